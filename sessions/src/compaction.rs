//! Compaction: folding the older part of a user's short-term log into the
//! rolling summary (`summary.md`), moving the folded records to the archive,
//! and merging the durable facts the summarizer found into long-term memory
//! (profile and topic notes). Also the sliding window that bounds the log
//! when compaction is off, and the fallback summary when the summarizer
//! keeps failing.
//!
//! It owns the order of those writes and the recovery from a crash between
//! them; it never writes the log except through [`Stm::stage_drop`] and
//! [`Stm::finish_drop_locked`], never holds a lock of the user's while the
//! summarizer runs, and never reads another user's data.
//!
//! # Crash safety
//!
//! A run reads a snapshot under the user's *fold* lock (see
//! [`crate::locks`]: appends go on, but no other rewriter of the user's
//! files — clear, expiry — runs), releases it while the summarizer works,
//! then takes it again, checks that the summary and the head of the log
//! are still what it read (else it writes nothing:
//! [`CompactionOutcome::Superseded`]), and commits the batch `B` (the first
//! records of the snapshot) in this order, each step atomic (unique temp
//! file, fsync, rename):
//!
//! 1. merge the facts into the profile and topic notes and append what
//!    changed to the dated fact log ([`crate::facts`]) — idempotent: a
//!    repeated fact changes nothing and adds no entry;
//! 2. write `summary.md`: the new body and a [`FoldMarker`] naming `B`
//!    (length, last record, SHA-256 of its lines as the log holds them);
//! 3. [`archive::write_encoded`]`(B)` — the file name is derived from `B`'s
//!    content (the marker's SHA-256: `B` is encoded and hashed once, see
//!    [`EncodedBatch`]), so writing `B` again replaces the same file;
//! 4. drop `B` from the head of the log: the rest is staged in a synced
//!    temp file under the fold lock alone; only the swap — copying what was
//!    appended since, the rename and, with `stm.fsync` on, the folder sync —
//!    takes the user's log lock, so the user's next turn waits for a rename
//!    at most, not for the commit's eight fsyncs.
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
//! cloned): a second trigger returns [`CompactionOutcome::AlreadyRunning`]
//! and the run in progress looks once more when it is done, so a fold made
//! due by messages appended during a run is not dropped.
//!
//! The log is read once per run, in phase 1, without the log lock (only
//! complete lines count) and with the file kept open ([`LogRead`]): under
//! the fold lock only appends change it, and every rewrite replaces it, so
//! phase 3 checks "the head is still `B`" as "the log is still that file
//! and not shorter" (one `stat`) and stages the drop from the bytes phase 1
//! read; the swap copies what was appended since. Only a failed summarizer
//! reads the log again (to see how far past `maxMessages` it grew).
//!
//! The file work of a run (the log read, gzip, atomic writes and their
//! fsyncs) runs on the lower-priority background threads
//! ([`crate::blocking::in_background`]) with the fold lock moved along, so
//! it never stalls the async workers that serve other users' turns nor
//! takes a core a turn wants, and a run whose caller is dropped still
//! finishes its commit. Only the swap, which holds the user's log lock,
//! runs on Tokio's blocking pool at the process's priority.

mod fail;
mod fallback;
mod ltm;
pub mod plan;
mod running;
mod thread;
mod view;

#[cfg(feature = "fail-points")]
pub use fail::FailPoint;
#[cfg(not(feature = "fail-points"))]
use fail::FailPoint;
use running::Running;
use thread::Thread;
pub use view::{RecentMemory, already_folded, read_for_context, unfolded_recent};

use crate::archive::{self, ArchiveError, EncodedBatch};
use crate::config::SessionConfig;
use crate::fsutil;
use crate::layout::Layout;
use crate::locks::FoldGuard;
use crate::names::SafeName;
use crate::profile::{self, MergeReport};
use crate::stm::{LogRead, StagedDrop, Stm, StmError};
use crate::summarizer::{SummarizeError, Summarizer, SummaryKind, SummaryOutput, SummaryRequest, rolling_summary};
use crate::summary::{self, SummaryError, SummaryFile};
use chrono::{DateTime, Utc};
use plan::Decision;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What one call of [`Compactor::maybe_compact`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// Nothing to fold.
    NotNeeded,
    /// Another run for this user is in progress; it looks again when done.
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
    /// Only with the `fail-points` feature (this crate's own tests).
    #[cfg(feature = "fail-points")]
    #[error("test fail point {0:?} reached: the run stopped as if the process had crashed")]
    Injected(FailPoint),
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
    /// Users with a run in progress, each with whether another trigger came
    /// during it. A `std` mutex: held for one look, never across an `.await`.
    running: Mutex<HashMap<SafeName, bool>>,
    /// The crash-test hook: where runs stop (`fail-points` feature only).
    #[cfg(feature = "fail-points")]
    fail_point: Option<FailPoint>,
}

impl Compactor {
    pub fn new(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>) -> Self {
        Compactor {
            inner: Arc::new(Inner {
                stm,
                config,
                summarizer,
                running: Mutex::new(HashMap::new()),
                #[cfg(feature = "fail-points")]
                fail_point: None,
            }),
        }
    }

    /// Test hook (`fail-points` feature only): a compactor whose runs stop
    /// after `step`, as a crash would.
    #[cfg(feature = "fail-points")]
    pub fn failing_after(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>, step: FailPoint) -> Self {
        let mut compactor = Compactor::new(stm, config, summarizer);
        if let Some(inner) = Arc::get_mut(&mut compactor.inner) {
            inner.fail_point = Some(step);
        }
        compactor
    }

    /// Folds what the rules say is due (DESIGN §4): past `threshold`, all
    /// but the last `contextWindow`; anything older than `maxAgeMinutes` at
    /// `now`; past `maxMessages`, at least the excess (unsummarized if
    /// compaction is off). The broker calls it (through `Sessions::compact`)
    /// in the background after a turn whose counters say a fold is due; it
    /// never runs before a context is built, so messages that aged out are
    /// still shown raw until it commits — folded, never dropped.
    ///
    /// A trigger that comes while a run for the same user is in progress
    /// returns [`CompactionOutcome::AlreadyRunning`] and is handed to that
    /// run, which looks once more when it is done: the messages appended
    /// meanwhile may have made another fold due, and it is not dropped.
    pub async fn maybe_compact(
        &self,
        user: &SafeName,
        now: DateTime<Utc>,
    ) -> Result<CompactionOutcome, CompactionError> {
        let Some(running) = Running::claim(&self.inner, user) else {
            return Ok(CompactionOutcome::AlreadyRunning);
        };
        let mut outcome = self.fold_once(user, now).await?;
        while running.asked_again() {
            let again = self.fold_once(user, now).await?;
            if again != CompactionOutcome::NotNeeded {
                outcome = again;
            }
        }
        Ok(outcome)
    }

    /// One run of [`Compactor::maybe_compact`], the caller holding the
    /// user's [`Running`] mark.
    async fn fold_once(&self, user: &SafeName, now: DateTime<Utc>) -> Result<CompactionOutcome, CompactionError> {
        let stm = &self.inner.stm;

        // Phase 1, under the fold lock, on a blocking thread (whole-log
        // read, archive and fsyncs): finish an interrupted run, then decide.
        let mut resumed = None;
        let (log, batch_len, before, profile_body) = loop {
            let fold = stm.lock_fold(user).await;
            let (fold, prepared) = self
                .off_workers(user, Thread::Background, move |this, user| {
                    let prepared = this.prepare(&fold, user, now)?;
                    Ok((fold, prepared))
                })
                .await?;
            match prepared {
                Prepared::Resume {
                    count,
                    archived_to,
                    drop: staged,
                } => {
                    self.swap(user, staged).await?;
                    resumed = Some(CompactionOutcome::Resumed {
                        archived: count,
                        archived_to,
                    });
                }
                Prepared::Done(outcome, staged) => {
                    if let Some(staged) = staged {
                        self.swap(user, staged).await?;
                    }
                    return Ok(match (outcome, resumed) {
                        (CompactionOutcome::NotNeeded, Some(resumed)) => resumed,
                        (outcome, _) => outcome,
                    });
                }
                Prepared::Fold {
                    log,
                    batch_len,
                    before,
                    profile,
                } => break (*log, batch_len, before, profile),
            }
            std::mem::drop(fold);
        };

        // Phase 2, unlocked: the summarizer may take its time; appends go on.
        let previous = before.0.as_ref().map(|s| s.body.trim()).filter(|b| !b.is_empty());
        let request = SummaryRequest {
            kind: SummaryKind::Rolling,
            previous_summary: previous,
            messages: &log.records()[..batch_len],
            notes: &[],
            profile: profile_body.as_deref(),
        };
        let timeout = self.inner.config.compacting.summarizer_timeout();
        let result = rolling_summary(self.inner.summarizer.as_ref(), request, timeout).await;

        // Phase 3, under the fold lock, on a blocking thread: commit only
        // onto what was summarized; then swap in the shortened log.
        let fold = stm.lock_fold(user).await;
        let (outcome, drop, fold) = self
            .off_workers(user, Thread::Background, move |this, user| {
                let (outcome, drop) = this.finish(&fold, user, (log, batch_len, before), result, now)?;
                Ok((outcome, drop, fold))
            })
            .await?;
        if let Some(drop) = drop {
            self.swap(user, drop).await?;
        }
        std::mem::drop(fold);
        Ok(outcome)
    }

    /// Step 4's second half: under the user's log lock (on the blocking
    /// pool when appends are fsynced, as they are), copy what was appended
    /// since the stage, rename; then, with `stm.fsync` off, sync the folder
    /// after the lock is released.
    async fn swap(&self, user: &SafeName, drop: StagedDrop) -> Result<(), CompactionError> {
        let stm = &self.inner.stm;
        let log = stm.lock_log(user).await;
        let folder = if stm.fsync() {
            self.off_workers(user, Thread::Pool, move |this, _| {
                Ok(this.inner.stm.finish_drop_locked(&log, drop)?)
            })
            .await?
        } else {
            let folder = stm.finish_drop_locked(&log, drop)?;
            std::mem::drop(log);
            folder
        };
        if folder.pending() {
            self.off_workers(user, Thread::Background, move |_, _| Ok(folder.run()?))
                .await?;
        }
        Ok(())
    }

    /// Phase 1 (see [`Compactor::maybe_compact`]): the one read of the log
    /// in a run; phase 3 and the stage work from it (see [`LogRead`]).
    fn prepare(&self, fold: &FoldGuard, user: &SafeName, now: DateTime<Utc>) -> Result<Prepared, CompactionError> {
        let stm = &self.inner.stm;
        let layout = stm.layout();
        // Stamped before it is read: phase 3 re-reads it only if it changed.
        let summary_stamp = fsutil::FileStamp::at(&layout.summary_path(user)).ok();
        let before = summary::read_or_salvage(layout, user)?;
        let log = stm.read_for_fold(fold, user)?;
        let records = log.records();
        let marker = before.as_ref().and_then(|s| s.meta.last_folded.as_ref());
        let resume = plan::already_folded(records, marker, &|n| Some(log.batch_lines(n)));
        if resume > 0 {
            tracing::info!(user = %user.log_id(), records = resume, "finishing an interrupted compaction");
            // The batch as the marker names it, so the archive file is the
            // one the interrupted run may have written: the log's lines, or
            // (a marker from before compaction took them) encoded again.
            let lines = log.batch_lines(resume);
            let encoded = if marker.is_some_and(|m| plan::names_lines(m, &lines)) {
                EncodedBatch::from_lines(user, &records[..resume], lines)?
            } else {
                EncodedBatch::encode(user, &records[..resume])?
            };
            let (archived_to, drop) = self.archive_and_stage(fold, user, (&log, resume), &encoded)?;
            return Ok(Prepared::Resume {
                count: resume,
                archived_to,
                drop,
            });
        }
        Ok(match plan::decide(records, &self.inner.config, now) {
            Decision::Nothing => Prepared::Done(CompactionOutcome::NotNeeded, None),
            Decision::Slide(n) => {
                let next = before.unwrap_or_else(|| summary::empty(user));
                let (archived_to, drop) = self.commit(fold, user, (&log, n), next)?;
                let outcome = CompactionOutcome::SlidingWindow {
                    archived: n,
                    archived_to,
                };
                Prepared::Done(outcome, Some(drop))
            }
            Decision::Fold(n) => Prepared::Fold {
                log: Box::new(log),
                batch_len: n,
                before: (before, summary_stamp),
                profile: profile::read_body(layout, user).ok().flatten(),
            },
        })
    }

    /// Phase 3: checks that the summary and the head of the log are still
    /// what was summarized, then commits the summarizer's result (or its
    /// failure). The log is not read again: it is the file phase 1 read
    /// and not shorter, so the batch is still its head (see [`LogRead`]).
    /// Only a failure, which needs the current length of the log, reads it.
    fn finish(
        &self,
        fold: &FoldGuard,
        user: &SafeName,
        (log, batch_len, (before, stamp)): (LogRead, usize, ReadSummary),
        result: Result<SummaryOutput, SummarizeError>,
        now: DateTime<Utc>,
    ) -> Result<Committed, CompactionError> {
        let stm = &self.inner.stm;
        let path = stm.layout().summary_path(user);
        let current = match stamp {
            Some(then) if fsutil::FileStamp::at(&path).ok() == Some(then) => before.clone(),
            _ => summary::read_or_salvage(stm.layout(), user)?,
        };
        let log = if current != before || !stm.unchanged_since(user, &log)? {
            None
        } else if result.is_ok() {
            Some(log)
        } else {
            let fresh = stm.read_for_fold(fold, user)?;
            fresh
                .records()
                .starts_with(&log.records()[..batch_len])
                .then_some(fresh)
        };
        let Some(log) = log else {
            tracing::info!(user = %user.log_id(), "log or summary changed during summarization; nothing written");
            return Ok((CompactionOutcome::Superseded, None));
        };
        let mut next = current.unwrap_or_else(|| summary::empty(user));
        match result {
            Ok(output) => {
                let facts = self.merge_ltm(user, &log.records()[..batch_len], &output, now);
                self.fail_at(FailPoint::AfterLtm)?;
                next.body = output.summary.trim().to_string();
                next.body.push('\n');
                next.meta.fallback = false;
                next.meta.failures = 0;
                let (archived_to, drop) = self.fold_into(fold, user, (&log, batch_len), next, now)?;
                let outcome = CompactionOutcome::Compacted {
                    folded: batch_len,
                    archived_to,
                    facts,
                };
                Ok((outcome, Some(drop)))
            }
            Err(error) => self.after_failure(fold, user, (&log, batch_len), next, &error, now),
        }
    }

    /// A failed summarizer: count it; after `maxFailures` in a row fold the
    /// planned batch (the first `batch_len` records of `log`) into a
    /// fallback summary; before that, fall back only for what sticks out
    /// past `maxMessages`, so the hard bound holds. Otherwise only the
    /// count is written.
    fn after_failure(
        &self,
        guard: &FoldGuard,
        user: &SafeName,
        (log, batch_len): (&LogRead, usize),
        mut next: SummaryFile,
        error: &SummarizeError,
        now: DateTime<Utc>,
    ) -> Result<Committed, CompactionError> {
        let config = &self.inner.config;
        let records = log.records();
        let failures = next.meta.failures.saturating_add(1);
        let max = config.compacting.max_failures;
        tracing::warn!(user = %user.log_id(), failures, max, error = %error, "summarizer failed");
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
            let outcome = CompactionOutcome::SummarizerFailed {
                failures,
                error: error.to_string(),
            };
            return Ok((outcome, None));
        }
        let remaining = if exhausted { 0 } else { failures };
        next.body = fallback::summarize(&next.body, &records[..fold], now);
        next.meta.fallback = true;
        next.meta.failures = remaining;
        tracing::warn!(user = %user.log_id(), folded = fold, "fallback summary written so the log stays bounded");
        let (archived_to, drop) = self.fold_into(guard, user, (log, fold), next, now)?;
        let outcome = CompactionOutcome::Fallback {
            folded: fold,
            archived_to,
            failures: remaining,
        };
        Ok((outcome, Some(drop)))
    }

    /// Steps 2–4 for the first `n` records of `log`, which went into the
    /// summary body.
    fn fold_into(
        &self,
        fold: &FoldGuard,
        user: &SafeName,
        (log, n): (&LogRead, usize),
        mut next: SummaryFile,
        now: DateTime<Utc>,
    ) -> Result<(PathBuf, StagedDrop), CompactionError> {
        next.meta.last_compacted = Some(now);
        next.meta.messages_compacted = next.meta.messages_compacted.saturating_add(n as u64);
        self.commit(fold, user, (log, n), next)
    }

    /// Steps 2–4 (see the module doc) for the first `n` records of `log`:
    /// summary with the marker, archive, and the log without the batch
    /// staged for [`Compactor::swap`]. The batch is encoded and hashed
    /// once, for both the marker and the archive file's name.
    fn commit(
        &self,
        fold: &FoldGuard,
        user: &SafeName,
        (log, n): (&LogRead, usize),
        mut next: SummaryFile,
    ) -> Result<(PathBuf, StagedDrop), CompactionError> {
        let batch = &log.records()[..n];
        let encoded = EncodedBatch::from_lines(user, batch, log.batch_lines(n))?;
        next.meta.last_folded = plan::marker_for(batch, &encoded);
        summary::write(self.layout(), user, &next)?;
        self.fail_at(FailPoint::AfterSummary)?;
        self.archive_and_stage(fold, user, (log, n), &encoded)
    }

    /// Steps 3–4 for the first `n` records of `log`, encoded as `encoded`.
    fn archive_and_stage(
        &self,
        fold: &FoldGuard,
        user: &SafeName,
        (log, n): (&LogRead, usize),
        encoded: &EncodedBatch,
    ) -> Result<(PathBuf, StagedDrop), CompactionError> {
        let archived_to = archive::write_encoded(self.layout(), user, encoded)?;
        self.fail_at(FailPoint::AfterArchive)?;
        Ok((archived_to, self.inner.stm.stage_drop_read(fold, user, log, n)?))
    }

    #[cfg(feature = "fail-points")]
    fn fail_at(&self, step: FailPoint) -> Result<(), CompactionError> {
        if self.inner.fail_point == Some(step) {
            Err(CompactionError::Injected(step))
        } else {
            Ok(())
        }
    }

    /// Without the `fail-points` feature a step boundary is only a name.
    #[cfg(not(feature = "fail-points"))]
    fn fail_at(&self, _step: FailPoint) -> Result<(), CompactionError> {
        Ok(())
    }

    fn layout(&self) -> &Layout {
        self.inner.stm.layout()
    }
}

/// A summary as read (`None`: there was none) and the stamp its file had
/// just before (`None`: unknown, so it is read again to compare).
type ReadSummary = (Option<SummaryFile>, Option<Option<fsutil::FileStamp>>);

/// What phase 3 committed, and the log without the batch waiting for
/// [`Compactor::swap`] if there is one.
type Committed = (CompactionOutcome, Option<StagedDrop>);

/// What phase 1 found: an interrupted run's batch archived and its drop
/// staged (phase 1 runs again after the swap); the run is over (with a
/// sliding window's drop to swap in); or a batch to summarize — the head
/// of the log read — with the summary it was read against and the profile
/// for the summarizer.
enum Prepared {
    Resume {
        count: usize,
        archived_to: PathBuf,
        drop: StagedDrop,
    },
    Done(CompactionOutcome, Option<StagedDrop>),
    Fold {
        /// The log as phase 1 read it; phase 3 commits from it (boxed: the
        /// other variants are small).
        log: Box<LogRead>,
        /// How many of its first records to fold.
        batch_len: usize,
        /// The summary as phase 1 read it, with its file's stamp then.
        before: ReadSummary,
        profile: Option<String>,
    },
}
