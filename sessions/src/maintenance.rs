//! Scheduled maintenance of one channel's memory (DESIGN §4): daily and
//! weekly summaries, STM expiry, pruning of empty folders and crash
//! leftovers, and rotation of the broker's logs. Everything is a function of
//! an explicit `now`; nothing here reads the clock or sleeps, so every rule
//! is testable at any date and the broker's scheduler decides when to run
//! (see [`Maintenance::next_due`]).
//!
//! One run, in order: plan the due days and weeks from the persisted state
//! (catching up what was missed while the bot was down, once), write the
//! dailies, then the weeklies of weeks whose dailies are complete — at most
//! `scheduler.maxSummariesPerRun` model calls, `scheduler.summaryConcurrency`
//! at a time, leftovers and failures retried next run — save the state, then
//! expire idle STMs, prune, rotate logs. A failure for one user is reported
//! and never stops the others. The pieces live in the submodules; this file
//! only orders them and keeps the books.

pub mod digest_pass;
pub mod digests;
pub mod expiry;
pub mod logs;
pub mod prune;
mod run;
pub mod schedule;
pub mod state;

use crate::config::SessionConfig;
use crate::names::SafeName;
use crate::stm::Stm;
use crate::summarizer::Summarizer;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;
use schedule::WeekId;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Maintenance of one channel: its STM handle (and so its layout and the
/// broker's lock registry), its config, the app's time zone and the
/// summarizer. Cheap to clone.
#[derive(Clone)]
pub struct Maintenance {
    stm: Stm,
    config: SessionConfig,
    tz: Tz,
    summarizer: Arc<dyn Summarizer>,
    /// `<state>/logs` is shared by every channel; the broker lets one
    /// channel's maintenance rotate it (rotation is idempotent, so two would
    /// only be wasteful).
    rotate_logs: bool,
}

/// One step of a run, for `mnemo sessions maintain` to print as it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The days and weeks this run covers, catch-up included.
    Planned {
        days: Vec<NaiveDate>,
        weeks: Vec<WeekId>,
    },
    /// Summaries about to be asked for; `deferred` wait for the next run
    /// because of the per-run cap.
    Summarizing {
        kind: &'static str,
        count: usize,
        deferred: usize,
    },
    SummaryWritten {
        user: SafeName,
        period: String,
        path: PathBuf,
    },
    SummaryFailed {
        user: SafeName,
        period: String,
        reason: String,
    },
    Archived {
        user: SafeName,
        records: usize,
    },
    LogRotated {
        path: PathBuf,
    },
    Pruned {
        dirs: usize,
        temp_files: usize,
        exports: usize,
        /// Files past their keep time (archives, summaries, log archives).
        expired: usize,
    },
}

/// Something one run could not do. The rest of the run went on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Whose data, if it was one user's.
    pub user: Option<SafeName>,
    /// `daily 2026-03-01`, `weekly 2026-W09`, `expiry`, `prune`, `logs`, `state`.
    pub task: String,
    pub reason: String,
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub archived_users: Vec<SafeName>,
    /// Idle users whose last day's daily summary is still pending.
    pub expiry_deferred: Vec<SafeName>,
    pub rotated_logs: Vec<PathBuf>,
    pub pruned_dirs: Vec<PathBuf>,
    pub removed_temp_files: Vec<PathBuf>,
    /// Export bundles past `scheduler.exportKeepDays`.
    pub removed_exports: Vec<PathBuf>,
    /// Archives, summaries and log archives past their keep time
    /// (`scheduler.archiveKeepDays`, `summaryKeepDays`, `logKeepDays`).
    pub removed_expired: Vec<PathBuf>,
    pub dailies_written: Vec<PathBuf>,
    pub weeklies_written: Vec<PathBuf>,
    /// Summaries left for the next run by `scheduler.maxSummariesPerRun`.
    pub summaries_deferred: usize,
    pub failures: Vec<Failure>,
}

impl Maintenance {
    pub fn new(stm: Stm, config: SessionConfig, tz: Tz, summarizer: Arc<dyn Summarizer>) -> Self {
        Maintenance {
            stm,
            config,
            tz,
            summarizer,
            rotate_logs: true,
        }
    }

    /// Whether this channel's runs rotate `<state>/logs` (on by default).
    pub fn rotating_logs(mut self, on: bool) -> Self {
        self.rotate_logs = on;
        self
    }

    /// When the scheduler should run next after `now`: the next daily
    /// summary hour or `scheduler.cleanupIntervalMinutes` from now,
    /// whichever comes first. Start-up is always a run (the catch-up).
    pub fn next_due(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let hour = self.config.compacting.daily_summary_hour;
        let today = schedule::local_day(self.tz, now);
        let mut next = schedule::run_instant(self.tz, today, hour);
        if next <= now {
            next = today
                .succ_opt()
                .map_or(now, |d| schedule::run_instant(self.tz, d, hour));
        }
        let interval = TimeDelta::from_std(self.config.scheduler.cleanup_interval()).unwrap_or(TimeDelta::hours(1));
        next.min(now + interval)
    }

    /// One maintenance run at `now`; also the catch-up at start. `progress`
    /// sees each step as it happens; the report sums them up.
    pub async fn run(&self, now: DateTime<Utc>, progress: &mut (dyn FnMut(&Progress) + Send)) -> MaintenanceReport {
        run::run(self, now, progress).await
    }
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::Planned { days, weeks } => {
                write!(f, "due: {} day(s)", days.len())?;
                if let (Some(first), Some(last)) = (days.first(), days.last()) {
                    write!(f, " ({first} … {last})")?;
                }
                write!(f, ", {} week(s)", weeks.len())?;
                if let (Some(first), Some(last)) = (weeks.first(), weeks.last()) {
                    write!(f, " ({first} … {last})")?;
                }
                Ok(())
            }
            Progress::Summarizing { kind, count, deferred } => {
                write!(
                    f,
                    "asking for {count} {kind} summar{}",
                    if *count == 1 { "y" } else { "ies" }
                )?;
                if *deferred > 0 {
                    write!(f, " ({deferred} more left for the next run)")?;
                }
                Ok(())
            }
            Progress::SummaryWritten { user, period, path } => {
                write!(f, "wrote {period} for {} ({})", display_user(user), path.display())
            }
            Progress::SummaryFailed { user, period, reason } => {
                write!(f, "{period} for {} failed: {reason}", display_user(user))
            }
            Progress::Archived { user, records } => {
                write!(
                    f,
                    "archived the idle short-term memory of {} ({records} messages)",
                    display_user(user)
                )
            }
            Progress::LogRotated { path } => write!(f, "rotated log {}", path.display()),
            Progress::Pruned {
                dirs,
                temp_files,
                exports,
                expired,
            } => {
                write!(
                    f,
                    "pruned {dirs} empty folder(s), {temp_files} leftover temp file(s), {exports} expired export(s) \
                     and {expired} file(s) past their keep time"
                )
            }
        }
    }
}

impl fmt::Display for MaintenanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "dailies written: {}, weeklies written: {}, left for next run: {}",
            self.dailies_written.len(),
            self.weeklies_written.len(),
            self.summaries_deferred
        )?;
        writeln!(
            f,
            "archived users: {} (deferred: {}), rotated logs: {}, pruned folders: {}, temp files removed: {}, \
             expired exports removed: {}, past keep time removed: {}",
            self.archived_users.len(),
            self.expiry_deferred.len(),
            self.rotated_logs.len(),
            self.pruned_dirs.len(),
            self.removed_temp_files.len(),
            self.removed_exports.len(),
            self.removed_expired.len()
        )?;
        writeln!(f, "failures: {}", self.failures.len())?;
        for failure in &self.failures {
            match &failure.user {
                Some(user) => writeln!(f, "  {} for {}: {}", failure.task, display_user(user), failure.reason)?,
                None => writeln!(f, "  {}: {}", failure.task, failure.reason)?,
            }
        }
        Ok(())
    }
}

/// A user as operators know them: the raw id, or the encoded name if it
/// was too long to keep.
fn display_user(user: &SafeName) -> String {
    user.decode().unwrap_or_else(|| user.to_string())
}
