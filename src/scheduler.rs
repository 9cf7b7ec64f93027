//! The background scheduler: runs maintenance for every channel at start
//! (the catch-up of runs missed while the bot was down) and then whenever
//! the earliest channel is next due (`Maintenance::next_due`: the next daily
//! summary hour in the configured zone, or `cleanupIntervalMinutes` from
//! now). The rules are pure functions of `now` in `mnemo-sessions`; this
//! loop only decides when to call them, and the persisted maintenance state
//! makes an extra wake-up harmless.
//!
//! A small tokio loop rather than a cron crate: the only schedule is "the
//! next due instant", and the exact, tested time rules (DST, ISO weeks)
//! already live in `mnemo_sessions::maintenance::schedule`.
//!
//! Each channel's store runs its own maintenance behind the memory seam
//! (`MemoryStore::maintain`): on the files, the steps of
//! `mnemo_sessions::maintenance`; on Postgres, the database's (daily and
//! weekly summaries, the fold sweep, expiry, retention) on whichever
//! broker holds the channel's lease, then the state folder's logs and
//! export bundles. This loop logs and counts what each part reports.
//!
//! The loop reads the time only through its [`Clock`] (the wall clock in
//! the product), so a test drives it with tokio's paused clock.

use crate::app::App;
use chrono::{DateTime, Utc};
use mnemo_sessions::store::Maintained;
use mnemo_sessions::usage::Purpose;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where the loop reads "now": `Utc::now` in the product; a test passes a
/// clock that follows tokio's (paused) time, so the sleeps it waits out and
/// the instants it hands to maintenance are the same time.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

pub struct Scheduler {
    task: JoinHandle<()>,
}

impl Scheduler {
    /// Starts the loop on the wall clock; it stops when `stop` fires.
    pub fn start(app: App, stop: watch::Receiver<bool>) -> Scheduler {
        Scheduler::start_with_clock(app, stop, Arc::new(Utc::now))
    }

    /// Starts the loop reading the time from `clock`.
    pub fn start_with_clock(app: App, mut stop: watch::Receiver<bool>, clock: Clock) -> Scheduler {
        let task = tokio::spawn(async move {
            loop {
                let now = clock();
                for (name, memory) in app.memories() {
                    // The summaries maintenance writes (daily, weekly) are the channel's spending.
                    let (runs, spent) = crate::model::metered(memory.store.maintain(now)).await;
                    for run in runs {
                        report(name, &run);
                    }
                    let tz = app.parts().tz;
                    let days = mnemo_sessions::usage::Days::of(now, tz, tz);
                    crate::pipeline::spend(&*memory.store, None, days, Purpose::Digest, Some(spent)).await;
                }
                let now = clock();
                let next = app.memories().values().map(|m| m.store.next_due(now)).min();
                let wait = next
                    .and_then(|at| (at - now).to_std().ok())
                    .unwrap_or(Duration::from_secs(3600))
                    // Land just after the due instant, never spin.
                    .max(Duration::from_secs(1))
                    + Duration::from_secs(1);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = crate::shutdown::fired(&mut stop) => break,
                }
            }
        });
        Scheduler { task }
    }

    /// Lets an in-progress run reach its end for a short while, then stops
    /// it (every maintenance step is crash-safe, so aborting is fine).
    pub async fn stop(self) {
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Logs and counts one part's maintenance run (a run another broker did
/// is only logged).
fn report(channel: &str, run: &Maintained) {
    if let Some(outcome) = run.outcome {
        crate::ops::metrics::metrics().maintenance_run(channel, outcome);
    }
    for (task, reason) in &run.failures {
        tracing::warn!(%channel, %task, %reason, "maintenance step failed; retried next run");
    }
    tracing::info!(%channel, part = run.part, report = %run.report, "maintenance run");
}

#[cfg(test)]
mod tests;
