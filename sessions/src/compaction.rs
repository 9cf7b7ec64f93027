//! Compaction: folding the older part of a user's short-term log into the
//! rolling summary (`summary.md`), moving the folded records to the archive,
//! and merging the durable facts the summarizer found into long-term memory
//! (profile and topic notes). Also the sliding window that bounds the log
//! when compaction is off, and the fallback summary when the summarizer
//! keeps failing.
//!
//! It owns the order of those writes and the recovery from a crash between
//! them; it never writes the log except through
//! [`Stm::drop_prefix_locked`], never holds the user's lock while the
//! summarizer runs, and never reads another user's data.
//!
//! # Crash safety
//!
//! A run reads a snapshot under the user's lock, releases the lock while the
//! summarizer works (appends go on), then takes the lock again, checks that
//! the summary and the head of the log are still what it read (else it
//! writes nothing: [`CompactionOutcome::Superseded`]), and commits the batch
//! `B` (the first records of the snapshot) in this order, each step atomic
//! (unique temp file, fsync, rename):
//!
//! 1. merge the facts into the profile and topic notes — idempotent: a
//!    repeated fact changes nothing;
//! 2. write `summary.md`: the new body and a [`FoldMarker`] naming `B`
//!    (length, last record, SHA-256 of its lines);
//! 3. [`archive::write_batch`]`(B)` — the file name is derived from `B`'s
//!    content, so writing `B` again replaces the same file;
//! 4. drop `B` from the head of the log.
//!
//! A crash before 2 leaves summary, archive and log as they were: the next
//! run starts over (and step 1 repeats harmlessly). A crash after 2 leaves
//! `B` at the head of the log *and* matching the marker: [`read_for_context`]
//! skips it (it is in the summary; never shown twice), and the next run,
//! before anything else, redoes 3 and 4 for exactly `B` — the same archive
//! file, so nothing is archived twice, nothing summarized twice, nothing
//! lost. Records appended meanwhile come after `B` and stay, in order. Once
//! 4 is done the head of the log no longer matches the marker. The marker,
//! not the summarizer, fixes `B`, which is why the summary is written before
//! the archive: a retry after a crash between "archive" and "summary" would
//! otherwise cut a different batch and archive its first records twice.
//!
//! The fallback summary and the sliding window retire their batch through
//! the same steps 2–4, so the same argument holds for them.
//!
//! Only one run per user at a time inside a [`Compactor`] (one per channel,
//! cloned): a second trigger returns [`CompactionOutcome::AlreadyRunning`].
//!
//! The file work of a run (the whole-log reads, gzip, atomic writes and
//! their fsyncs) runs on Tokio's blocking pool with the user's lock moved
//! along, so it never stalls the async workers that serve other users'
//! turns, and a run whose caller is dropped still finishes its commit.

mod fallback;
pub(crate) mod plan;
mod view;

pub use view::{RecentMemory, already_folded, read_for_context, unfolded_recent};

use crate::archive::{self, ArchiveError};
use crate::config::SessionConfig;
use crate::layout::Layout;
use crate::locks::UserGuard;
use crate::names::SafeName;
use crate::profile::{self, MergeReport, Owner};
use crate::record::{Record, Role};
use crate::stm::{Stm, StmError};
use crate::summarizer::{FactSection, SummarizeError, Summarizer, SummaryKind, SummaryOutput, SummaryRequest};
use crate::summary::{self, SummaryError, SummaryFile};
use crate::topics;
use crate::versions::{Author, Change};
use chrono::{DateTime, Utc};
use plan::Decision;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// What one call of [`Compactor::maybe_compact`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// Nothing to fold.
    NotNeeded,
    /// Another run for this user is in progress; this trigger is dropped.
    AlreadyRunning,
    /// Only an interrupted run's batch was archived and dropped.
    Resumed { archived: usize, archived_to: PathBuf },
    /// `folded` records went into the summary and to `archived_to`.
    Compacted {
        folded: usize,
        archived_to: PathBuf,
        facts: MergeReport,
    },
    /// The summarizer failed; `folded` records went into a deterministic
    /// fallback summary so the log stays bounded. `failures` is the count of
    /// failures in a row that remains (0 after a full fallback).
    Fallback {
        folded: usize,
        archived_to: PathBuf,
        failures: u32,
    },
    /// Compaction is off: the oldest records left the log unsummarized.
    SlidingWindow { archived: usize, archived_to: PathBuf },
    /// The summarizer failed or timed out; nothing was folded. Retried at
    /// the next trigger.
    SummarizerFailed { failures: u32, error: String },
    /// The log or summary changed while the summarizer ran (e.g.
    /// `/session clear`); nothing was written.
    Superseded,
}

#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Summary(#[from] SummaryError),
    #[error("compaction was interrupted: the runtime is shutting down; the next run continues where it stopped")]
    Interrupted,
    #[doc(hidden)]
    #[error("test fail point {0:?} reached: the run stopped as if the process had crashed")]
    Injected(FailPoint),
}

/// Test hook: stop a run right after a commit step, as a crash would.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPoint {
    AfterLtm,
    AfterSummary,
    AfterArchive,
}

impl FailPoint {
    pub const ALL: [FailPoint; 3] = [FailPoint::AfterLtm, FailPoint::AfterSummary, FailPoint::AfterArchive];
}

/// Compacts one channel's users. Cheap to clone; clones share the set of
/// runs in progress, so make one per channel and clone it.
#[derive(Clone)]
pub struct Compactor {
    inner: Arc<Inner>,
}

struct Inner {
    stm: Stm,
    config: SessionConfig,
    summarizer: Arc<dyn Summarizer>,
    /// Users with a run in progress. A `std` mutex: held for one insert or
    /// remove, never across an `.await`.
    running: Mutex<HashSet<SafeName>>,
    fail_point: Option<FailPoint>,
}

impl Compactor {
    pub fn new(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>) -> Self {
        Self::build(stm, config, summarizer, None)
    }

    /// Test hook: a compactor whose runs stop after `step`.
    #[doc(hidden)]
    pub fn failing_after(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>, step: FailPoint) -> Self {
        Self::build(stm, config, summarizer, Some(step))
    }

    fn build(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>, fail_point: Option<FailPoint>) -> Self {
        let running = Mutex::new(HashSet::new());
        Compactor {
            inner: Arc::new(Inner {
                stm,
                config,
                summarizer,
                running,
                fail_point,
            }),
        }
    }

    /// Folds what the rules say is due (DESIGN §4): past `threshold`, all
    /// but the last `contextWindow`; anything older than `maxAgeMinutes` at
    /// `now`; past `maxMessages`, at least the excess (unsummarized if
    /// compaction is off). The broker calls it after each reply (in the
    /// background) and before building the context of a turn, so messages
    /// that aged out are folded rather than dropped.
    pub async fn maybe_compact(
        &self,
        user: &SafeName,
        now: DateTime<Utc>,
    ) -> Result<CompactionOutcome, CompactionError> {
        let Some(_running) = Running::claim(&self.inner, user) else {
            return Ok(CompactionOutcome::AlreadyRunning);
        };
        let stm = &self.inner.stm;

        // Phase 1, under the lock, on a blocking thread (whole-log read,
        // archive and fsyncs): finish an interrupted run, then decide.
        let guard = stm.lock(user).await;
        let (batch, before, profile_body) = match self
            .off_workers(user, move |this, user| this.prepare(&guard, user, now))
            .await?
        {
            Prepared::Done(outcome) => return Ok(outcome),
            Prepared::Fold { batch, before, profile } => (batch, before, profile),
        };

        // Phase 2, unlocked: the summarizer may take its time; appends go on.
        let previous = before.as_ref().map(|s| s.body.trim()).filter(|b| !b.is_empty());
        let request = SummaryRequest {
            kind: SummaryKind::Rolling,
            previous_summary: previous,
            messages: &batch,
            notes: &[],
            profile: profile_body.as_deref(),
        };
        let timeout = self.inner.config.compacting.summarizer_timeout();
        let result = match tokio::time::timeout(timeout, self.inner.summarizer.summarize(request)).await {
            Ok(result) => result,
            Err(_) => Err(SummarizeError::Timeout(timeout)),
        };
        // An empty answer would replace the previous summary with nothing.
        let result = result.and_then(|output| {
            if output.summary.trim().is_empty() {
                Err(SummarizeError::Failed(
                    "the summarizer returned an empty summary".into(),
                ))
            } else {
                Ok(output)
            }
        });

        // Phase 3, under the lock, on a blocking thread: commit only onto
        // what was summarized.
        let guard = stm.lock(user).await;
        self.off_workers(user, move |this, user| {
            this.finish(&guard, user, (batch, before), result, now)
        })
        .await
    }

    /// Runs `work` on Tokio's blocking pool (see [`crate::blocking`]).
    async fn off_workers<T: Send + 'static>(
        &self,
        user: &SafeName,
        work: impl FnOnce(&Compactor, &SafeName) -> Result<T, CompactionError> + Send + 'static,
    ) -> Result<T, CompactionError> {
        let this = self.clone();
        let user = user.clone();
        crate::blocking::off_workers(move || work(&this, &user))
            .await
            .unwrap_or(Err(CompactionError::Interrupted))
    }

    /// Phase 1 (see [`Compactor::maybe_compact`]).
    fn prepare(&self, guard: &UserGuard, user: &SafeName, now: DateTime<Utc>) -> Result<Prepared, CompactionError> {
        let stm = &self.inner.stm;
        let layout = stm.layout();
        let before = summary::read_or_salvage(layout, user)?;
        let mut records = stm.read_all(user)?.records;
        let marker = before.as_ref().and_then(|s| s.meta.last_folded.as_ref());
        let resumed = match plan::already_folded(&records, marker) {
            0 => None,
            n => {
                let batch: Vec<Record> = records.drain(..n).collect();
                tracing::info!(user = %user, records = n, "finishing an interrupted compaction");
                Some((n, self.archive_and_drop(guard, user, &batch)?))
            }
        };
        Ok(match plan::decide(&records, &self.inner.config, now) {
            Decision::Nothing => Prepared::Done(match resumed {
                Some((archived, archived_to)) => CompactionOutcome::Resumed { archived, archived_to },
                None => CompactionOutcome::NotNeeded,
            }),
            Decision::Slide(n) => {
                let mut next = before.unwrap_or_else(|| summary::empty(user));
                next.meta.last_folded = plan::marker_for(&records[..n]);
                let archived_to = self.commit(guard, user, &records[..n], &next)?;
                Prepared::Done(CompactionOutcome::SlidingWindow {
                    archived: n,
                    archived_to,
                })
            }
            Decision::Fold(n) => Prepared::Fold {
                batch: records[..n].to_vec(),
                before,
                profile: profile::read_body(layout, user).ok().flatten(),
            },
        })
    }

    /// Phase 3: checks that the summary and the head of the log are still
    /// what was summarized, then commits the summarizer's result (or its
    /// failure).
    fn finish(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        (batch, before): (Vec<Record>, Option<SummaryFile>),
        result: Result<SummaryOutput, SummarizeError>,
        now: DateTime<Utc>,
    ) -> Result<CompactionOutcome, CompactionError> {
        let stm = &self.inner.stm;
        let current = summary::read_or_salvage(stm.layout(), user)?;
        let records = stm.read_all(user)?.records;
        if current != before || !records.starts_with(&batch) {
            tracing::info!(user = %user, "log or summary changed during summarization; nothing written");
            return Ok(CompactionOutcome::Superseded);
        }
        let mut next = current.unwrap_or_else(|| summary::empty(user));
        match result {
            Ok(output) => {
                let facts = self.merge_ltm(user, &batch, &output, now);
                self.fail_at(FailPoint::AfterLtm)?;
                next.body = output.summary.trim().to_string();
                next.body.push('\n');
                next.meta.fallback = false;
                next.meta.failures = 0;
                let archived_to = self.fold_into(guard, user, &batch, next, now)?;
                Ok(CompactionOutcome::Compacted {
                    folded: batch.len(),
                    archived_to,
                    facts,
                })
            }
            Err(error) => self.after_failure(guard, user, (&records, batch.len()), next, &error, now),
        }
    }

    /// A failed summarizer: count it; after `maxFailures` in a row fold the
    /// planned batch (`records[..batch_len]`) into a fallback summary; before
    /// that, fall back only for what sticks out past `maxMessages`, so the
    /// hard bound holds. Otherwise only the count is written.
    fn after_failure(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        (records, batch_len): (&[Record], usize),
        mut next: SummaryFile,
        error: &SummarizeError,
        now: DateTime<Utc>,
    ) -> Result<CompactionOutcome, CompactionError> {
        let config = &self.inner.config;
        let failures = next.meta.failures.saturating_add(1);
        let max = config.compacting.max_failures;
        tracing::warn!(user = %user, failures, max, error = %error, "summarizer failed");
        let over_bound = records.len().saturating_sub(config.stm.max_messages);
        let exhausted = failures >= config.compacting.max_failures;
        let fold = if exhausted {
            batch_len.max(over_bound)
        } else {
            over_bound
        };
        if fold == 0 {
            next.meta.failures = failures;
            summary::write(self.layout(), user, &next)?;
            return Ok(CompactionOutcome::SummarizerFailed {
                failures,
                error: error.to_string(),
            });
        }
        let remaining = if exhausted { 0 } else { failures };
        next.body = fallback::summarize(&next.body, &records[..fold], now);
        next.meta.fallback = true;
        next.meta.failures = remaining;
        tracing::warn!(user = %user, folded = fold, "fallback summary written so the log stays bounded");
        let archived_to = self.fold_into(guard, user, &records[..fold], next, now)?;
        Ok(CompactionOutcome::Fallback {
            folded: fold,
            archived_to,
            failures: remaining,
        })
    }

    /// Steps 2–4 for a batch that went into the summary body.
    fn fold_into(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        batch: &[Record],
        mut next: SummaryFile,
        now: DateTime<Utc>,
    ) -> Result<PathBuf, CompactionError> {
        next.meta.last_compacted = Some(now);
        next.meta.messages_compacted = next.meta.messages_compacted.saturating_add(batch.len() as u64);
        next.meta.last_folded = plan::marker_for(batch);
        self.commit(guard, user, batch, &next)
    }

    /// Steps 2–4 (see the module doc): summary with marker, archive, drop.
    fn commit(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        batch: &[Record],
        next: &SummaryFile,
    ) -> Result<PathBuf, CompactionError> {
        summary::write(self.layout(), user, next)?;
        self.fail_at(FailPoint::AfterSummary)?;
        self.archive_and_drop(guard, user, batch)
    }

    fn archive_and_drop(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        batch: &[Record],
    ) -> Result<PathBuf, CompactionError> {
        let archived_to = archive::write_batch(self.layout(), user, batch)?;
        self.fail_at(FailPoint::AfterArchive)?;
        self.inner.stm.drop_prefix_locked(guard, user, batch)?;
        Ok(archived_to)
    }

    /// Step 1. A profile that cannot be read or written is reported and
    /// skipped: the summary still goes ahead, and no fact is forced into a
    /// file a person has to fix.
    fn merge_ltm(&self, user: &SafeName, batch: &[Record], output: &SummaryOutput, now: DateTime<Utc>) -> MergeReport {
        let layout = self.layout();
        let max_chars = self.inner.config.ltm.max_profile_chars;
        let display_name = batch
            .iter()
            .rev()
            .filter(|r| r.role == Role::User)
            .find_map(|r| r.user_name.as_deref());
        let owner = Owner { display_name };
        let change = Change {
            by: Author::Compaction,
            what: "facts from older messages",
        };
        let report =
            profile::merge_facts(layout, user, owner, &output.facts, max_chars, change, now).unwrap_or_else(|e| {
                tracing::warn!(user = %user, error = %e, "facts not merged into the profile");
                MergeReport::default()
            });
        for fact in output.facts.iter().filter(|f| f.section == FactSection::Topics) {
            let change = Change {
                by: Author::Compaction,
                what: "ongoing topic from older messages",
            };
            if let Err(e) = topics::merge_fact(layout, user, &fact.key, &fact.value, max_chars, change, now) {
                tracing::warn!(user = %user, error = %e, "ongoing topic not recorded in a topic note");
            }
        }
        report
    }

    fn fail_at(&self, step: FailPoint) -> Result<(), CompactionError> {
        if self.inner.fail_point == Some(step) {
            Err(CompactionError::Injected(step))
        } else {
            Ok(())
        }
    }

    fn layout(&self) -> &Layout {
        self.inner.stm.layout()
    }
}

/// What phase 1 found: either the run is over, or a batch to summarize
/// with the summary it was read against and the profile for the summarizer.
enum Prepared {
    Done(CompactionOutcome),
    Fold {
        batch: Vec<Record>,
        before: Option<SummaryFile>,
        profile: Option<String>,
    },
}

/// Marks a user as being compacted; unmarks on drop (also on error, panic
/// or a cancelled future).
struct Running {
    inner: Arc<Inner>,
    user: SafeName,
}

impl Running {
    fn claim(inner: &Arc<Inner>, user: &SafeName) -> Option<Running> {
        let mut running = inner.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.insert(user.clone()).then(|| Running {
            inner: Arc::clone(inner),
            user: user.clone(),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.user);
    }
}
