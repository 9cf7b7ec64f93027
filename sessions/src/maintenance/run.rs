//! The body of one maintenance run: the order of the steps, the per-run cap
//! and concurrency bound on model calls, and the bookkeeping that moves the
//! state file's watermarks only past work that is really done.
//!
//! Model calls run on their own tasks (at most `scheduler.summaryConcurrency`
//! at once, each bounded by `compacting.summarizerTimeoutSecs`); files are
//! written here, one at a time, under the user's lock.

use super::digests::{self, DigestJob, Period};
use super::expiry::{self, Expiry};
use super::logs;
use super::prune;
use super::schedule::{self, Plan};
use super::state::{MaintenanceState, digest_key};
use super::{Failure, Maintenance, MaintenanceReport, Progress};
use crate::fsutil;
use crate::names::SafeName;
use crate::report;
use crate::summarizer::{SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use chrono::{DateTime, NaiveDate, Utc};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

type ProgressFn<'a> = &'a mut (dyn FnMut(&Progress) + Send);

pub(super) async fn run(m: &Maintenance, now: DateTime<Utc>, progress: ProgressFn<'_>) -> MaintenanceReport {
    let mut report = MaintenanceReport::default();
    let state_path = m.stm.layout().maintenance_state_path();
    match MaintenanceState::load(&state_path) {
        Ok(mut state) => {
            digest_pass(m, now, &mut state, &mut report, progress).await;
            state.last_run = Some(now);
            if let Err(e) = state.save(&state_path) {
                report.failures.push(failure(None, "state", e.to_string()));
            }
            expiry_pass(m, now, state.daily_done_through, &mut report, progress).await;
        }
        // Without the state, which days are summarized is unknown, and so is
        // whether an idle STM's last day is: both wait for the operator.
        Err(e) => report.failures.push(failure(None, "state", e.to_string())),
    }

    let logs_dir = m.stm.layout().logs_dir();
    let keep = m.config.scheduler.keep();
    let pruned = prune::prune(&m.stm, m.rotate_logs.then_some(logs_dir.as_path()), now, &keep).await;
    progress(&Progress::Pruned {
        dirs: pruned.dirs.len(),
        temp_files: pruned.temp_files.len(),
        exports: pruned.exports.len(),
        expired: pruned.expired.len(),
    });
    for e in pruned.errors {
        report.failures.push(failure(None, "prune", e.to_string()));
    }
    report.pruned_dirs = pruned.dirs;
    report.removed_temp_files = pruned.temp_files;
    report.removed_exports = pruned.exports;
    report.removed_expired = pruned.expired;

    if m.rotate_logs {
        let rotation = logs::rotate_logs(&logs_dir, now, m.config.scheduler.log_rotate_days);
        for path in &rotation.rotated {
            progress(&Progress::LogRotated { path: path.clone() });
        }
        for e in rotation.errors {
            report.failures.push(failure(None, "logs", e.to_string()));
        }
        report.rotated_logs = rotation.rotated;
    }
    report
}

fn failure(user: Option<&SafeName>, task: &str, reason: String) -> Failure {
    Failure {
        user: user.cloned(),
        task: task.to_string(),
        reason,
    }
}

/// Dailies, then weeklies of weeks whose dailies are all done; moves the
/// watermarks.
async fn digest_pass(
    m: &Maintenance,
    now: DateTime<Utc>,
    state: &mut MaintenanceState,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) {
    let c = &m.config.compacting;
    let Plan { days, weeks } = schedule::plan(
        now,
        m.tz,
        c.daily_summary_hour,
        c.weekly_summary_weekday(),
        state.daily_done_through,
        state.weekly_done_through,
    );
    progress(&Progress::Planned {
        days: days.clone(),
        weeks: weeks.clone(),
    });
    if !c.enabled {
        // Summaries are off: the due periods pass without model calls and
        // are not made up when summaries are switched back on.
        state.daily_done_through = days.last().copied().or(state.daily_done_through);
        state.weekly_done_through = weeks.last().copied().or(state.weekly_done_through);
        return;
    }
    let users: Vec<SafeName> = match report::known_users(m.stm.layout()) {
        Ok(users) => users.into_iter().collect(),
        Err(e) => {
            report.failures.push(failure(None, "daily", e.to_string()));
            return;
        }
    };
    let mut budget = m.config.scheduler.max_summaries_per_run;

    let mut pending: BTreeSet<Period> = BTreeSet::new();
    let (jobs, errors) = digests::daily_jobs(&m.stm, m.tz, &days, &users);
    if let Some(first) = days.first() {
        for (user, e) in errors {
            let period = Period::Day(*first);
            if count_failure(m, state, &user, period, &e.to_string(), report, progress) {
                pending.insert(period);
            }
        }
    }
    let jobs = drop_given_up(m, state, jobs);
    pending.extend(summarize_all(m, now, "daily", jobs, &mut budget, state, report, progress).await);
    state.daily_done_through = advance(&days, state.daily_done_through, &pending, Period::Day);

    let done_through = state.daily_done_through;
    let ready: Vec<_> = weeks
        .iter()
        .copied()
        .take_while(|w| w.days().last().is_some_and(|sun| Some(*sun) <= done_through))
        .collect();
    let mut jobs = Vec::new();
    for week in &ready {
        for user in &users {
            match digests::weekly_job(m.stm.layout(), user, *week) {
                Ok(Some(job)) => jobs.push(job),
                Ok(None) => {}
                Err(e) => {
                    if count_failure(m, state, user, Period::Week(*week), &e.to_string(), report, progress) {
                        pending.insert(Period::Week(*week));
                    }
                }
            }
        }
    }
    let jobs = drop_given_up(m, state, jobs);
    pending.extend(summarize_all(m, now, "weekly", jobs, &mut budget, state, report, progress).await);
    state.weekly_done_through = advance(&ready, state.weekly_done_through, &pending, Period::Week);

    // Failure counts of periods now behind the watermarks are history.
    let (day_mark, week_mark) = (state.daily_done_through, state.weekly_done_through);
    state.failures.retain(|key, _| {
        let period = key.rsplit('/').next().unwrap_or("");
        match (period.parse::<NaiveDate>(), schedule::WeekId::parse(period)) {
            (Ok(day), _) => day_mark.is_none_or(|mark| day > mark),
            (_, Some(week)) => week_mark.is_none_or(|mark| week > mark),
            _ => false,
        }
    });
}

/// The last of `periods` (ascending) before the first pending one; the old
/// mark if the very first is pending.
fn advance<T: Copy>(periods: &[T], old: Option<T>, pending: &BTreeSet<Period>, wrap: fn(T) -> Period) -> Option<T> {
    let mut mark = old;
    for p in periods {
        if pending.contains(&wrap(*p)) {
            break;
        }
        mark = Some(*p);
    }
    mark
}

/// The summarizer failure limit: `compacting.maxFailures` runs in a row, at
/// least one attempt.
fn max_failures(m: &Maintenance) -> u32 {
    m.config.compacting.max_failures.max(1)
}

/// Jobs whose failure count reached the limit are given up (they were
/// reported when they reached it), so one broken user cannot hold the
/// schedule back forever.
fn drop_given_up(m: &Maintenance, state: &MaintenanceState, jobs: Vec<DigestJob>) -> Vec<DigestJob> {
    let limit = max_failures(m);
    jobs.into_iter()
        .filter(|job| {
            let key = digest_key(job.period.kind_name(), job.user.as_str(), &job.period.label());
            state.failures.get(&key).is_none_or(|n| *n < limit)
        })
        .collect()
}

/// Counts one failure of a digest, reports it, and says whether it is still
/// pending (to be retried next run) or now given up.
fn count_failure(
    m: &Maintenance,
    state: &mut MaintenanceState,
    user: &SafeName,
    period: Period,
    reason: &str,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) -> bool {
    let key = digest_key(period.kind_name(), user.as_str(), &period.label());
    let count = state.failures.entry(key).or_insert(0);
    *count += 1;
    let limit = max_failures(m);
    let retry = *count < limit;
    let reason = if retry {
        format!("{reason} (attempt {count} of {limit}; retried at the next run)")
    } else {
        format!("{reason} (attempt {count} of {limit}; given up, the schedule moves on)")
    };
    progress(&Progress::SummaryFailed {
        user: user.clone(),
        period: period.label(),
        reason: reason.clone(),
    });
    report.failures.push(failure(
        Some(user),
        &format!("{} {}", period.kind_name(), period.label()),
        reason,
    ));
    retry
}

/// Asks for the summaries of `jobs` (at most `budget` of them, the rest
/// deferred), writes those that come back, and returns the periods still
/// pending: deferred, or failed and to be retried.
#[allow(clippy::too_many_arguments)] // one run's context; a struct would only rename it
async fn summarize_all(
    m: &Maintenance,
    now: DateTime<Utc>,
    kind: &'static str,
    mut jobs: Vec<DigestJob>,
    budget: &mut usize,
    state: &mut MaintenanceState,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) -> BTreeSet<Period> {
    let mut pending = BTreeSet::new();
    let deferred = jobs.split_off(jobs.len().min(*budget));
    *budget -= jobs.len();
    report.summaries_deferred += deferred.len();
    pending.extend(deferred.iter().map(|j| j.period));
    if jobs.is_empty() && deferred.is_empty() {
        return pending;
    }
    progress(&Progress::Summarizing {
        kind,
        count: jobs.len(),
        deferred: deferred.len(),
    });

    let concurrency = m.config.scheduler.summary_concurrency.max(1);
    let timeout = m.config.compacting.summarizer_timeout();
    let mut queue = jobs.into_iter();
    let mut running = JoinSet::new();
    let mut by_task = HashMap::new();
    loop {
        while running.len() < concurrency {
            let Some(job) = queue.next() else { break };
            let job = Arc::new(job);
            let (task_job, summarizer) = (Arc::clone(&job), Arc::clone(&m.summarizer));
            let handle = running.spawn(async move { summarize(summarizer.as_ref(), &task_job, timeout).await });
            by_task.insert(handle.id(), job);
        }
        let Some(joined) = running.join_next_with_id().await else {
            break;
        };
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(e) => (
                e.id(),
                Err(SummarizeError::Failed(format!(
                    "the summarizer task ended abnormally: {e}"
                ))),
            ),
        };
        let Some(job) = by_task.remove(&id) else { continue };
        let outcome = match result {
            Ok(output) if output.summary.trim().is_empty() => {
                Err("the summarizer returned an empty summary".to_string())
            }
            Ok(output) => write_digest(m, &job, &output, now).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(Some(path)) => {
                state.failures.remove(&digest_key(
                    job.period.kind_name(),
                    job.user.as_str(),
                    &job.period.label(),
                ));
                progress(&Progress::SummaryWritten {
                    user: job.user.clone(),
                    period: job.period.label(),
                    path: path.clone(),
                });
                match job.period {
                    Period::Day(_) => report.dailies_written.push(path),
                    Period::Week(_) => report.weeklies_written.push(path),
                }
            }
            Ok(None) => {}
            Err(reason) => {
                if count_failure(m, state, &job.user, job.period, &reason, report, progress) {
                    pending.insert(job.period);
                }
            }
        }
    }
    pending
}

async fn summarize(
    summarizer: &dyn Summarizer,
    job: &DigestJob,
    timeout: Duration,
) -> Result<SummaryOutput, SummarizeError> {
    let request = SummaryRequest {
        kind: job.period.summary_kind(),
        previous_summary: None,
        messages: &job.messages,
        notes: &job.notes,
        profile: None,
    };
    tokio::time::timeout(timeout, summarizer.summarize(request))
        .await
        .unwrap_or(Err(SummarizeError::Timeout(timeout)))
}

/// Writes one digest under the user's lock: `Ok(None)` if the file appeared
/// meanwhile, or the user cleared their data while the summarizer ran (a
/// summary of deleted messages must not be written back).
async fn write_digest(
    m: &Maintenance,
    job: &DigestJob,
    output: &SummaryOutput,
    now: DateTime<Utc>,
) -> Result<Option<std::path::PathBuf>, digests::DigestError> {
    let layout = m.stm.layout();
    let _guard = m.stm.lock(&job.user).await;
    if job.path.exists() {
        return Ok(None);
    }
    let still_there = match job.period {
        Period::Day(day) => {
            let (from, to) = schedule::local_day_bounds(m.tz, day);
            !digests::user_records(&m.stm, &job.user, from, to)?.is_empty()
        }
        Period::Week(week) => week.days().iter().any(|d| layout.daily_path(&job.user, *d).exists()),
    };
    if !still_there {
        return Ok(None);
    }
    let meta = digests::DigestMeta::new(&job.user, job.period, m.tz, now, job.message_count);
    let text = digests::render(&job.path, &meta, &output.summary)?;
    fsutil::replace(layout.state_root(), &job.path, text.as_bytes())?;
    Ok(Some(job.path.clone()))
}

/// Expires every idle STM of the channel.
async fn expiry_pass(
    m: &Maintenance,
    now: DateTime<Utc>,
    dailies_done_through: Option<NaiveDate>,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) {
    let users = match m.stm.users() {
        Ok(users) => users,
        Err(e) => {
            report.failures.push(failure(None, "expiry", e.to_string()));
            return;
        }
    };
    let idle = m.config.scheduler.stm_expiry();
    for user in users {
        match expiry::expire_user(&m.stm, m.tz, &user, now, idle, dailies_done_through).await {
            Ok(Expiry::Active) => {}
            Ok(Expiry::Deferred { .. }) => report.expiry_deferred.push(user),
            Ok(Expiry::Archived { records, .. }) => {
                progress(&Progress::Archived {
                    user: user.clone(),
                    records,
                });
                report.archived_users.push(user);
            }
            Err(e) => report.failures.push(failure(Some(&user), "expiry", e.to_string())),
        }
    }
}
