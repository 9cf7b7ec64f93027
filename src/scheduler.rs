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
//! A channel kept in Postgres also runs the database's maintenance
//! (`mnemo_pg::maintain`: daily and weekly summaries, the fold sweep,
//! expiry, retention), on the same schedule, on whichever broker holds the
//! channel's lease; the state folder's run then only rotates the broker's
//! logs and prunes its export bundles and temp files.
//!
//! The loop reads the time only through its [`Clock`] (the wall clock in
//! the product), so a test drives it with tokio's paused clock.

use crate::app::App;
use chrono::{DateTime, Utc};
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
        // Names this broker in the database's maintenance leases.
        let holder = broker_id();
        let task = tokio::spawn(async move {
            loop {
                let now = clock();
                for (name, memory) in app.memories() {
                    if let Some(pg) = &memory.pg {
                        pg_maintenance(name, pg, &holder, now).await;
                    }
                    // On Postgres too: the state folder still holds the
                    // broker's logs and the export bundles, which this run
                    // rotates and prunes (it finds no user memory there).
                    let report = memory.maintenance.run(now, &mut |_| {}).await;
                    let outcome = if report.failures.is_empty() { "ok" } else { "partial" };
                    crate::ops::metrics::metrics().maintenance_run(name, outcome);
                    for failure in &report.failures {
                        tracing::warn!(channel = %name, task = %failure.task, reason = %failure.reason, "maintenance step failed; retried next run");
                    }
                    tracing::info!(channel = %name, %report, "maintenance run");
                }
                let now = clock();
                let next = app
                    .memories()
                    .values()
                    // The database's maintenance keeps the files' schedule:
                    // the daily summary hour or cleanupIntervalMinutes.
                    .map(|m| m.maintenance.next_due(now))
                    .min();
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

/// One maintenance run of a channel kept in Postgres, if this broker gets
/// the channel's lease (else another broker is doing it).
async fn pg_maintenance(name: &str, pg: &mnemo_pg::PgChannel, holder: &str, now: DateTime<Utc>) {
    match mnemo_pg::maintain::run(pg, holder, now).await {
        Ok(report) => {
            let outcome = if report.failed == 0 && report.digest_failures.is_empty() {
                "ok"
            } else {
                "partial"
            };
            if report.held_by.is_none() {
                crate::ops::metrics::metrics().maintenance_run(name, outcome);
            }
            for failure in &report.digest_failures {
                tracing::warn!(channel = %name, task = %failure.task, reason = %failure.reason, "maintenance step failed; retried next run");
            }
            tracing::info!(channel = %name, %report, "maintenance run (postgres)");
        }
        Err(e) => {
            crate::ops::metrics::metrics().maintenance_run(name, "failed");
            tracing::warn!(channel = %name, error = %e, "maintenance run failed; retried next run");
        }
    }
}

/// This broker's name among several: host, process id and a random part
/// (a restarted process on the same host is another holder).
fn broker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}/{}/{:08x}", host.trim(), std::process::id(), rand::random::<u32>())
}

#[cfg(test)]
mod tests;
