//! The daily and weekly summaries of one maintenance run, for either store:
//! which periods are due (from the persisted [`MaintenanceState`]), the
//! per-run cap and concurrency bound on model calls, failure counting, and
//! moving the watermarks only past work that is really done. Where the
//! messages come from and where a digest goes is the [`DigestStore`]'s
//! business: the state folder's files ([`FileDigests`]) or the database
//! (`mnemo_pg::digests`), so both stores keep one schedule and one set of
//! rules.
//!
//! Model calls run on their own tasks (at most `scheduler.summaryConcurrency`
//! at once, each bounded by `compacting.summarizerTimeoutSecs`); digests are
//! stored here, one at a time.

use super::digests::{self, DigestJob, DigestMeta, Period};
use super::schedule::{self, Plan, WeekId};
use super::state::{MaintenanceState, digest_key};
use super::{Failure, MaintenanceReport, Progress};
use crate::config::SessionConfig;
use crate::fsutil;
use crate::names::SafeName;
use crate::report;
use crate::stm::Stm;
use crate::summarizer::{SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Why a store could not list, read or write: reported per user and
/// period, retried at the next run.
pub type StoreError = Box<dyn std::error::Error + Send + Sync>;

/// Where a run finds the messages to summarize and keeps the digests.
#[async_trait]
pub trait DigestStore: Send + Sync {
    /// Every user of the channel who may have messages.
    async fn users(&self) -> Result<Vec<SafeName>, StoreError>;

    /// The daily jobs for `days` (ascending) and `users`: one per user and
    /// local day that had messages and has no daily yet, sorted by period
    /// then user; the users whose messages could not be read, apart.
    async fn daily_jobs(
        &self,
        tz: Tz,
        days: &[NaiveDate],
        users: &[SafeName],
    ) -> (Vec<DigestJob>, Vec<(SafeName, StoreError)>);

    /// The weekly job of `user` for `week`: `None` when the weekly exists
    /// or the week has no dailies ([`digests::weekly_from_dailies`]).
    async fn weekly_job(&self, user: &SafeName, week: WeekId) -> Result<Option<DigestJob>, StoreError>;

    /// Keeps one digest under the user's lock and says where it went;
    /// `None` if it appeared meanwhile, or if what it summarizes was
    /// cleared while the summarizer ran (a summary of deleted messages must
    /// not be written back).
    async fn write(&self, job: &DigestJob, meta: &DigestMeta, body: &str) -> Result<Option<PathBuf>, StoreError>;
}

/// What a digest pass needs besides the store. Cheap to build per run.
pub struct Digester<'a> {
    pub config: &'a SessionConfig,
    pub tz: Tz,
    pub summarizer: &'a Arc<dyn Summarizer>,
}

type ProgressFn<'a> = &'a mut (dyn FnMut(&Progress) + Send);

/// Dailies, then weeklies of weeks whose dailies are all done; moves the
/// watermarks in `state` (the caller saves it).
pub async fn digest_pass(
    d: &Digester<'_>,
    store: &dyn DigestStore,
    now: DateTime<Utc>,
    state: &mut MaintenanceState,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) {
    let c = &d.config.compacting;
    let Plan { days, weeks } = schedule::plan(
        now,
        d.tz,
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
    let users = match store.users().await {
        Ok(users) => users,
        Err(e) => {
            report.failures.push(failure(None, "daily", e.to_string()));
            return;
        }
    };
    let mut run = Run {
        d,
        store,
        now,
        budget: d.config.scheduler.max_summaries_per_run,
        state,
        report,
        progress,
    };

    let mut pending: BTreeSet<Period> = BTreeSet::new();
    let (jobs, errors) = store.daily_jobs(d.tz, &days, &users).await;
    if let Some(first) = days.first() {
        for (user, e) in errors {
            let period = Period::Day(*first);
            if run.count_failure(&user, period, &e.to_string()) {
                pending.insert(period);
            }
        }
    }
    let jobs = run.drop_given_up(jobs);
    pending.extend(run.summarize_all("daily", jobs).await);
    run.state.daily_done_through = advance(&days, run.state.daily_done_through, &pending, Period::Day);

    let done_through = run.state.daily_done_through;
    let ready: Vec<_> = weeks
        .iter()
        .copied()
        .take_while(|w| w.days().last().is_some_and(|sun| Some(*sun) <= done_through))
        .collect();
    let mut jobs = Vec::new();
    for week in &ready {
        for user in &users {
            match store.weekly_job(user, *week).await {
                Ok(Some(job)) => jobs.push(job),
                Ok(None) => {}
                Err(e) => {
                    if run.count_failure(user, Period::Week(*week), &e.to_string()) {
                        pending.insert(Period::Week(*week));
                    }
                }
            }
        }
    }
    let jobs = run.drop_given_up(jobs);
    pending.extend(run.summarize_all("weekly", jobs).await);
    let state = &mut *run.state;
    state.weekly_done_through = advance(&ready, state.weekly_done_through, &pending, Period::Week);

    // Failure counts of periods now behind the watermarks are history.
    let (day_mark, week_mark) = (state.daily_done_through, state.weekly_done_through);
    state.failures.retain(|key, _| {
        let period = key.rsplit('/').next().unwrap_or("");
        match (period.parse::<NaiveDate>(), WeekId::parse(period)) {
            (Ok(day), _) => day_mark.is_none_or(|mark| day > mark),
            (_, Some(week)) => week_mark.is_none_or(|mark| week > mark),
            _ => false,
        }
    });
}

pub(super) fn failure(user: Option<&SafeName>, task: &str, reason: String) -> Failure {
    Failure {
        user: user.cloned(),
        task: task.to_string(),
        reason,
    }
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

/// One pass's books: the summaries it may still ask for, the state and the
/// report it fills in.
struct Run<'r, 'p> {
    d: &'r Digester<'r>,
    store: &'r dyn DigestStore,
    now: DateTime<Utc>,
    budget: usize,
    state: &'r mut MaintenanceState,
    report: &'r mut MaintenanceReport,
    progress: ProgressFn<'p>,
}

impl Run<'_, '_> {
    /// The summarizer failure limit: `compacting.maxFailures` runs in a
    /// row, at least one attempt.
    fn max_failures(&self) -> u32 {
        self.d.config.compacting.max_failures.max(1)
    }

    /// Jobs whose failure count reached the limit are given up (they were
    /// reported when they reached it), so one broken user cannot hold the
    /// schedule back forever.
    fn drop_given_up(&self, jobs: Vec<DigestJob>) -> Vec<DigestJob> {
        let limit = self.max_failures();
        jobs.into_iter()
            .filter(|job| {
                let key = digest_key(job.period.kind_name(), job.user.as_str(), &job.period.label());
                self.state.failures.get(&key).is_none_or(|n| *n < limit)
            })
            .collect()
    }

    /// Counts one failure of a digest, reports it, and says whether it is
    /// still pending (to be retried next run) or now given up.
    fn count_failure(&mut self, user: &SafeName, period: Period, reason: &str) -> bool {
        let limit = self.max_failures();
        let key = digest_key(period.kind_name(), user.as_str(), &period.label());
        let count = self.state.failures.entry(key).or_insert(0);
        *count += 1;
        let retry = *count < limit;
        let reason = if retry {
            format!("{reason} (attempt {count} of {limit}; retried at the next run)")
        } else {
            format!("{reason} (attempt {count} of {limit}; given up, the schedule moves on)")
        };
        (self.progress)(&Progress::SummaryFailed {
            user: user.clone(),
            period: period.label(),
            reason: reason.clone(),
        });
        self.report.failures.push(failure(
            Some(user),
            &format!("{} {}", period.kind_name(), period.label()),
            reason,
        ));
        retry
    }

    /// Asks for the summaries of `jobs` (at most the budget left, the rest
    /// deferred), stores those that come back, and returns the periods
    /// still pending: deferred, or failed and to be retried.
    async fn summarize_all(&mut self, kind: &'static str, mut jobs: Vec<DigestJob>) -> BTreeSet<Period> {
        let mut pending = BTreeSet::new();
        let deferred = jobs.split_off(jobs.len().min(self.budget));
        self.budget -= jobs.len();
        self.report.summaries_deferred += deferred.len();
        pending.extend(deferred.iter().map(|j| j.period));
        if jobs.is_empty() && deferred.is_empty() {
            return pending;
        }
        (self.progress)(&Progress::Summarizing {
            kind,
            count: jobs.len(),
            deferred: deferred.len(),
        });

        let concurrency = self.d.config.scheduler.summary_concurrency.max(1);
        let timeout = self.d.config.compacting.summarizer_timeout();
        let mut queue = jobs.into_iter();
        let mut running = JoinSet::new();
        let mut by_task = HashMap::new();
        loop {
            while running.len() < concurrency {
                let Some(job) = queue.next() else { break };
                let job = Arc::new(job);
                let (task_job, summarizer) = (Arc::clone(&job), Arc::clone(self.d.summarizer));
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
                Ok(output) => store_digest(self.d, self.store, self.now, &job, &output)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match outcome {
                Ok(Some(path)) => {
                    self.state.failures.remove(&digest_key(
                        job.period.kind_name(),
                        job.user.as_str(),
                        &job.period.label(),
                    ));
                    (self.progress)(&Progress::SummaryWritten {
                        user: job.user.clone(),
                        period: job.period.label(),
                        path: path.clone(),
                    });
                    match job.period {
                        Period::Day(_) => self.report.dailies_written.push(path),
                        Period::Week(_) => self.report.weeklies_written.push(path),
                    }
                }
                Ok(None) => {}
                Err(reason) => {
                    if self.count_failure(&job.user, job.period, &reason) {
                        pending.insert(job.period);
                    }
                }
            }
        }
        pending
    }
}

async fn store_digest(
    d: &Digester<'_>,
    store: &dyn DigestStore,
    now: DateTime<Utc>,
    job: &DigestJob,
    output: &SummaryOutput,
) -> Result<Option<PathBuf>, StoreError> {
    let meta = DigestMeta::new(&job.user, job.period, d.tz, now, job.message_count);
    store.write(job, &meta, &output.summary).await
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

/// The digests of a channel's state folder:
/// `summaries/<user>/daily|weekly/…md`, written under the user's lock.
pub struct FileDigests<'a> {
    pub stm: &'a Stm,
    pub tz: Tz,
}

#[async_trait]
impl DigestStore for FileDigests<'_> {
    async fn users(&self) -> Result<Vec<SafeName>, StoreError> {
        Ok(report::known_users(self.stm.layout())?.into_iter().collect())
    }

    async fn daily_jobs(
        &self,
        tz: Tz,
        days: &[NaiveDate],
        users: &[SafeName],
    ) -> (Vec<DigestJob>, Vec<(SafeName, StoreError)>) {
        let (jobs, errors) = digests::daily_jobs(self.stm, tz, days, users);
        let errors = errors.into_iter().map(|(u, e)| (u, StoreError::from(e))).collect();
        (jobs, errors)
    }

    async fn weekly_job(&self, user: &SafeName, week: WeekId) -> Result<Option<DigestJob>, StoreError> {
        Ok(digests::weekly_job(self.stm.layout(), user, week)?)
    }

    async fn write(&self, job: &DigestJob, meta: &DigestMeta, body: &str) -> Result<Option<PathBuf>, StoreError> {
        let layout = self.stm.layout();
        let _guard = self.stm.lock(&job.user).await;
        if job.path.exists() {
            return Ok(None);
        }
        let still_there = match job.period {
            Period::Day(day) => {
                let (from, to) = schedule::local_day_bounds(self.tz, day);
                !digests::user_records(self.stm, &job.user, from, to)?.is_empty()
            }
            Period::Week(week) => week.days().iter().any(|d| layout.daily_path(&job.user, *d).exists()),
        };
        if !still_there {
            return Ok(None);
        }
        let text = digests::render(&job.path, meta, body)?;
        fsutil::replace(layout.state_root(), &job.path, text.as_bytes())?;
        Ok(Some(job.path.clone()))
    }
}
