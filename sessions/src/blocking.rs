//! Running file work off the async workers that serve users' turns, in one
//! of two places:
//!
//! - [`off_workers`]: Tokio's blocking pool, at the process's own priority,
//!   for work a turn waits on (an fsynced append, a user's first recall
//!   index load) or that holds a lock a turn waits on (compaction's swap
//!   of the log).
//! - [`in_background`]: mnemo's background threads, at a lower scheduling
//!   priority ([`BACKGROUND_NICE`] on Linux), for work no turn waits on:
//!   compaction's log read, summary, archive and their fsyncs. When the
//!   cores are busy with turns, a fold gets a small share of them (but a
//!   turn that wakes beside a running fold may still wait out the fold's
//!   slice: see [`BACKGROUND_NICE`]). When the cores are idle the
//!   background runs at full speed.
//!
//! A panic in the work is re-raised in the caller, as if it had run inline.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};

/// Runs `work` on the blocking pool; `None` only when the runtime is
/// shutting down and the work was never run to completion.
pub(crate) async fn off_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Some(value),
        Err(e) if e.is_panic() => resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// The most background threads: started on demand, one more whenever work
/// arrives and all are busy, and kept. Compaction with `stm.fsync` on is
/// mostly waiting for fsyncs, so a few run side by side.
pub const BACKGROUND_THREADS: usize = 4;

/// The nice value of the background threads (Linux; elsewhere they run at
/// the process's priority). At 10 a background thread gets about a tenth
/// of a core a turn wants. It does not make a waking turn take the core
/// at once: under EEVDF the running thread keeps its slice (up to ~0.7 ms)
/// whatever the nice values. `SCHED_IDLE`, which would, starves the folds
/// when the cores are busy for long (BENCHMARKS-JOURNAL.md, seventh
/// session).
pub const BACKGROUND_NICE: i32 = 10;

/// Runs `work` on a background thread (see the module doc). The work runs
/// to its end even if the caller stops waiting; `None` only if it could not
/// be handed to any thread (none could be started).
pub(crate) async fn in_background<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(work)));
    });
    if let Err(job) = pool().submit(job) {
        // No thread could be started (the process is at its thread limit):
        // said in the log, and the work runs on Tokio's blocking pool.
        off_workers(job).await?;
    }
    match rx.await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => None,
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<PoolState>,
    ready: Condvar,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState::default()),
        ready: Condvar::new(),
    })
}

impl Pool {
    /// Queues `job`, starting a thread if none is idle and the cap allows.
    /// `Err` gives the job back when there is no thread to run it.
    fn submit(&'static self, job: Job) -> Result<(), Job> {
        let mut state = self.lock();
        if state.idle == 0 && state.threads < BACKGROUND_THREADS {
            let started = std::thread::Builder::new()
                .name("mnemo-background".into())
                .spawn(move || self.work());
            match started {
                Ok(_) => state.threads += 1,
                Err(e) if state.threads == 0 => {
                    tracing::warn!(error = %e, "cannot start a background thread; compaction runs on the blocking pool");
                    return Err(job);
                }
                Err(e) => tracing::warn!(error = %e, threads = state.threads, "cannot start another background thread"),
            }
        }
        state.queue.push_back(job);
        drop(state);
        self.ready.notify_one();
        Ok(())
    }

    fn work(&self) {
        lower_priority();
        loop {
            let job = {
                let mut state = self.lock();
                loop {
                    if let Some(job) = state.queue.pop_front() {
                        break job;
                    }
                    state.idle += 1;
                    state = self.ready.wait(state).unwrap_or_else(PoisonError::into_inner);
                    state.idle -= 1;
                }
            };
            // A panic is caught inside the job and goes to its caller.
            job();
        }
    }

    /// The state, even if poisoned: every change under the lock is a push,
    /// a pop or a counter step, so it is always consistent.
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Gives the calling thread the background's nice value. On Linux the nice
/// value is per thread (`setpriority` on the thread's id); raising it needs
/// no privilege.
#[cfg(target_os = "linux")]
fn lower_priority() {
    let tid = rustix::thread::gettid();
    let current = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
    if current >= BACKGROUND_NICE {
        return;
    }
    if let Err(e) = rustix::process::setpriority_process(Some(tid), BACKGROUND_NICE) {
        tracing::warn!(error = %e, "cannot lower the background thread's priority; it runs at the process's");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_work_returns_its_value_on_a_lower_priority_thread() {
        let (name, nice) = in_background(|| {
            let tid = rustix::thread::gettid();
            (
                std::thread::current().name().map(str::to_string),
                rustix::process::getpriority_process(Some(tid)).unwrap(),
            )
        })
        .await
        .unwrap();
        assert_eq!(name.as_deref(), Some("mnemo-background"));
        let process = rustix::process::getpriority_process(None).unwrap();
        assert!(nice >= BACKGROUND_NICE.max(process), "nice {nice}, process {process}");
    }

    #[tokio::test]
    async fn many_jobs_at_once_all_finish_on_at_most_the_cap_of_threads() {
        let jobs: Vec<_> = (0..64)
            .map(|i| {
                tokio::spawn(in_background(move || {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    (i, std::thread::current().id())
                }))
            })
            .collect();
        let mut done = Vec::new();
        for job in jobs {
            done.push(job.await.unwrap().unwrap());
        }
        let ids: std::collections::HashSet<_> = done.iter().map(|(_, id)| *id).collect();
        assert_eq!(
            done.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..64).collect::<Vec<_>>()
        );
        assert!(ids.len() <= BACKGROUND_THREADS, "{} threads", ids.len());
    }

    #[tokio::test]
    async fn a_panic_in_background_work_reaches_the_caller() {
        let caught = tokio::spawn(in_background(|| -> u8 { panic!("boom") })).await;
        let panic = caught.unwrap_err().into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
        // The thread that ran it still serves the next job.
        assert_eq!(in_background(|| 7).await, Some(7));
    }
}
