//! Group commit for `stm.fsync: true`: the appends of several users that
//! land together are made durable by one committer per batch, instead of
//! each append taking a blocking-pool thread of its own for its
//! `fdatasync`.
//!
//! An append writes its line on the caller's thread (one `write` to the
//! page cache) and hands the open log to [`GroupCommit::sync`], which
//! resolves only once *that* file's data is on disk — and, for a log the
//! append created, the entries of its folder and of `stm/`. If no committer
//! is running, the append starts one on Tokio's blocking pool; it takes
//! everything queued as one batch, syncs the files one after the other (on
//! ext4 a sequential `fdatasync` costs what concurrent ones do, measured in
//! BENCHMARKS.md, without a thread per append waking and sleeping), syncs
//! each folder once per batch however many new logs it holds, and repeats
//! until the queue is empty, then ends. What is shared is the thread and the
//! folder syncs, never the acknowledgement: each append is answered with its
//! own file's result, and nothing is acknowledged before its data is
//! durable (durable-before-model stays).
//!
//! A committer is a blocking-pool task, not a thread of its own, so nothing
//! outlives the runtime and Tokio's paused test clock does not run ahead
//! while a sync is in flight. It never opens, reads or writes a log: it
//! only syncs handles it is given.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

/// One channel's group commit (in `Stm`'s shared part).
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Arc<Queue>,
}

/// The syncs waiting for the committer. A `std` mutex: held to push or take
/// a batch, never across I/O or an `.await`.
#[derive(Default)]
struct Queue(Mutex<Pending>);

#[derive(Default)]
struct Pending {
    jobs: Vec<Job>,
    /// A committer is running (or about to) and will take what is queued.
    running: bool,
}

/// One append waiting to be durable.
struct Job {
    file: Arc<File>,
    /// Folders whose entries must be durable too (a new log: its folder
    /// and `stm/`).
    dirs: Vec<PathBuf>,
    done: oneshot::Sender<io::Result<()>>,
}

impl GroupCommit {
    /// Makes what was written to `file` durable, with `dirs` synced after it
    /// (see [`Job::dirs`]). Resolves when this file's sync (and its folders')
    /// is done, with this file's own result. Called on a Tokio runtime.
    pub(crate) async fn sync(&self, file: Arc<File>, dirs: Vec<PathBuf>) -> io::Result<()> {
        let (done, synced) = oneshot::channel();
        let start = {
            let mut pending = self.queue.lock();
            pending.jobs.push(Job { file, dirs, done });
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            let committer = Committer {
                queue: Arc::clone(&self.queue),
                finished: false,
            };
            drop(tokio::task::spawn_blocking(move || committer.run()));
        }
        synced
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the runtime stopped before this append was synced")))
    }
}

impl Queue {
    /// The pending syncs, even if a panicking thread poisoned the mutex:
    /// every change is one push or one take, so the queue stays consistent.
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The committer of the moment: batches until the queue is empty.
struct Committer {
    queue: Arc<Queue>,
    /// Set once it found the queue empty and stepped down.
    finished: bool,
}

impl Committer {
    fn run(mut self) {
        loop {
            let batch = {
                let mut pending = self.queue.lock();
                if pending.jobs.is_empty() {
                    pending.running = false;
                    self.finished = true;
                    return;
                }
                std::mem::take(&mut pending.jobs)
            };
            commit(batch);
        }
    }
}

impl Drop for Committer {
    /// Never run (the runtime shut down first) or stopped by a panic: the
    /// appends queued are answered with an error (their senders dropped)
    /// and the next append starts a new committer.
    fn drop(&mut self) {
        if !self.finished {
            let mut pending = self.queue.lock();
            pending.jobs.clear();
            pending.running = false;
        }
    }
}

/// Syncs every file of the batch in turn, answering an append as soon as
/// its file is synced when it needs no folder; then syncs each folder the
/// others need, once, and answers them.
fn commit(batch: Vec<Job>) {
    let mut waiting_for_folders: Vec<Job> = Vec::new();
    for job in batch {
        match job.file.sync_data() {
            Ok(()) if !job.dirs.is_empty() => waiting_for_folders.push(job),
            // The append's future may have been dropped (its turn
            // cancelled): its data is durable all the same.
            result => {
                let _ = job.done.send(result);
            }
        }
    }
    let mut folders: HashMap<PathBuf, Result<(), (io::ErrorKind, String)>> = HashMap::new();
    for job in waiting_for_folders {
        let mut result = Ok(());
        for dir in &job.dirs {
            let synced = folders
                .entry(dir.clone())
                .or_insert_with(|| crate::fsutil::sync_dir(dir).map_err(|e| (e.kind(), e.to_string())));
            if let Err((kind, message)) = synced {
                result = Err(io::Error::new(*kind, message.clone()));
                break;
            }
        }
        let _ = job.done.send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    fn written(dir: &std::path::Path, name: &str) -> Arc<File> {
        let mut file = File::create(dir.join(name)).unwrap();
        file.write_all(b"line\n").unwrap();
        Arc::new(file)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_append_of_a_batch_is_answered_with_its_own_result() {
        let dir = tempfile::tempdir().unwrap();
        let commit = Arc::new(GroupCommit::default());
        let mut waiting = Vec::new();
        for i in 0..20 {
            let file = written(dir.path(), &format!("log{i}"));
            let commit = Arc::clone(&commit);
            let dirs = if i % 2 == 0 {
                vec![dir.path().to_path_buf()]
            } else {
                vec![dir.path().join("missing")]
            };
            waiting.push(tokio::spawn(async move { commit.sync(file, dirs).await }));
        }
        for (i, task) in waiting.into_iter().enumerate() {
            let result = task.await.unwrap();
            if i % 2 == 0 {
                assert!(result.is_ok(), "append {i}: {result:?}");
            } else {
                let e = result.expect_err("a folder that cannot be synced fails its append");
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "append {i}");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committer_steps_down_when_idle_and_the_next_append_starts_another() {
        let dir = tempfile::tempdir().unwrap();
        let commit = GroupCommit::default();
        for i in 0..3 {
            let sync = commit.sync(written(dir.path(), &format!("log{i}")), Vec::new());
            let synced = tokio::time::timeout(Duration::from_secs(1), sync).await;
            assert!(matches!(synced, Ok(Ok(()))), "append {i}: {synced:?}");
            // The committer checks the queue once more, finds it empty and
            // ends: nothing keeps running between bursts.
            for _ in 0..500 {
                if !commit.queue.lock().running {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert!(!commit.queue.lock().running, "after append {i}");
        }
    }
}
