//! Group commit for `stm.fsync: true`: the appends of several users that
//! land together are made durable by one committer thread, in batches,
//! instead of each append taking a blocking-pool thread of its own for its
//! `fdatasync`.
//!
//! An append writes its line on the caller's thread (one `write` to the
//! page cache) and hands the open log to [`GroupCommit::sync`], which
//! resolves only once *that* file's data is on disk — and, for a log the
//! append created, the entries of its folder and of `stm/`. The committer
//! takes everything queued while it was busy as one batch: the files are
//! synced one after the other on the one thread (on ext4 a sequential
//! `fdatasync` costs what concurrent ones do, measured in BENCHMARKS.md,
//! without a thread per append waking and sleeping), and each folder is
//! synced once per batch however many new logs it holds. What is shared is
//! the waiting and the folder syncs, never the acknowledgement: a turn
//! whose own sync failed gets its own error, and nothing is acknowledged
//! before its data is durable (durable-before-model stays).
//!
//! The thread starts on the first sync and stops when the channel's `Stm`
//! is dropped, after finishing what is queued. It never opens, reads or
//! writes a log: it only syncs handles it is given.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use tokio::sync::oneshot;

/// One channel's committer (in `Stm`'s shared part).
#[derive(Default)]
pub(crate) struct GroupCommit {
    /// Started on the first sync: a channel with `stm.fsync` off, or with
    /// no turns, never has a thread.
    queue: OnceLock<Arc<Queue>>,
}

/// The syncs waiting for the committer.
#[derive(Default)]
struct Queue {
    /// A `std` mutex: held to push or take a batch, never across I/O or an
    /// `.await`.
    pending: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Default)]
struct Pending {
    jobs: Vec<Job>,
    /// The `Stm` is gone: finish what is queued, then stop.
    closed: bool,
}

/// One append waiting to be durable.
struct Job {
    file: Arc<File>,
    /// Folders whose entries must be durable too, in order (a new log: its
    /// folder, then `stm/`).
    dirs: Vec<PathBuf>,
    done: oneshot::Sender<io::Result<()>>,
}

impl GroupCommit {
    /// Makes what was written to `file` durable, with `dirs` synced after it
    /// (see [`Job::dirs`]). Resolves when this file's sync (and its folders')
    /// is done, with this file's own result.
    pub(crate) async fn sync(&self, file: Arc<File>, dirs: Vec<PathBuf>) -> io::Result<()> {
        let (done, synced) = oneshot::channel();
        let queue = self.queue()?;
        lock(&queue.pending).jobs.push(Job { file, dirs, done });
        queue.wake.notify_one();
        synced.await.unwrap_or_else(|_| {
            Err(io::Error::other(
                "the committer thread stopped before this append was synced",
            ))
        })
    }

    fn queue(&self) -> io::Result<&Arc<Queue>> {
        if let Some(queue) = self.queue.get() {
            return Ok(queue);
        }
        let queue = Arc::new(Queue::default());
        let theirs = Arc::clone(&queue);
        // Two first syncs at once: only the winner's queue is kept, and the
        // loser's thread finds its queue closed (below) and stops.
        let spawned = std::thread::Builder::new()
            .name("mnemo-stm-commit".into())
            .spawn(move || run(&theirs))?;
        drop(spawned);
        if let Err(lost) = self.queue.set(queue) {
            close(&lost);
        }
        // Set just now, by us or by the other first sync.
        self.queue
            .get()
            .ok_or_else(|| io::Error::other("the committer queue was not set"))
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.get() {
            close(queue);
        }
    }
}

fn close(queue: &Queue) {
    lock(&queue.pending).closed = true;
    queue.wake.notify_one();
}

/// The pending syncs, even if a panicking thread poisoned the mutex: every
/// change is one push or one take, so the queue is always consistent.
fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The committer thread: one batch at a time until closed and empty.
fn run(queue: &Queue) {
    loop {
        let batch = {
            let mut pending = lock(&queue.pending);
            while pending.jobs.is_empty() && !pending.closed {
                pending = queue.wake.wait(pending).unwrap_or_else(PoisonError::into_inner);
            }
            if pending.jobs.is_empty() {
                return;
            }
            std::mem::take(&mut pending.jobs)
        };
        commit(batch);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_append_of_a_batch_is_answered_with_its_own_result() {
        let dir = tempfile::tempdir().unwrap();
        let commit = Arc::new(GroupCommit::default());
        let mut waiting = Vec::new();
        for i in 0..20 {
            let path = dir.path().join(format!("log{i}"));
            let mut file = File::create(&path).unwrap();
            file.write_all(format!("line {i}\n").as_bytes()).unwrap();
            let commit = Arc::clone(&commit);
            let dirs = if i % 2 == 0 {
                vec![dir.path().to_path_buf()]
            } else {
                vec![dir.path().join("missing")]
            };
            waiting.push(tokio::spawn(async move { commit.sync(Arc::new(file), dirs).await }));
        }
        for (i, result) in futures_join(waiting).await.into_iter().enumerate() {
            if i % 2 == 0 {
                assert!(result.is_ok(), "append {i}: {result:?}");
            } else {
                let e = result.expect_err("a folder that cannot be synced fails its append");
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "append {i}");
            }
        }
    }

    #[test]
    fn the_thread_stops_when_the_channel_is_dropped() {
        let commit = GroupCommit::default();
        let queue = Arc::clone(commit.queue().unwrap());
        drop(commit);
        assert!(lock(&queue.pending).closed);
        // The thread holds the other reference until it returns.
        for _ in 0..1000 {
            if Arc::strong_count(&queue) == 1 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the committer thread still runs after its channel was dropped");
    }

    async fn futures_join(tasks: Vec<tokio::task::JoinHandle<io::Result<()>>>) -> Vec<io::Result<()>> {
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    }
}
