//! Session state: the one seam between a turn and a channel's short-term
//! memory. [`Sessions`] keeps, for each active user, what a turn needs —
//! the recent unfolded records, the counters that say whether a fold is
//! due, the rolling summary and profile bodies — in memory, loaded on first
//! use and dropped when the user has been quiet longer than the others
//! (a bounded LRU), so a turn reads no whole file.
//!
//! The files stay the source of truth: every append goes to disk first
//! (durable per `stm.fsync`) and reaches the memory copy only after it
//! succeeded; a failed write throws the copy away. Before each use the copy
//! is checked against the files it was loaded from (device, inode, length,
//! mtime: one `stat` each), so a change made behind the bot's back — the
//! CLI's `sessions maintain`, an operator editing a profile, a compaction or
//! expiry — is reloaded, never overwritten with stale memory. Compaction
//! and `/session` commands that change files also drop the copy after they
//! commit.
//!
//! The log is checked before every use: appends go to it, and a log
//! replaced or removed must never receive one. The summary and profile are
//! only ever read from memory (nothing here writes them), so a turn's view
//! ([`Sessions::turn_view`]) looks at them at most once per
//! [`FILES_RECHECK`] of message time — and at once after any in-process
//! rewriter of a user's files ([`Stm::lock`]: clear, expiry, maintenance,
//! a memory tool's edit) ran. An edit from another process (an operator,
//! the CLI) reaches the context within that second; until then the turn
//! sees the summary and profile as they were, consistent with the log.
//! [`Sessions::context_view`] always looks.
//!
//! It never touches the network and takes time only as `now` parameters.
//! Every method takes the user's log lock from [`crate::locks`] (only the
//! reload after a compaction does not: see [`Sessions::compact`]), so it is
//! serialised with expiry and the `/session` commands (which take both of
//! the user's locks) and with compaction's swap of the log, but not with
//! compaction's commit (summary, archive, profile), which runs beside it.

mod handles;
mod map;
mod state;

use crate::compaction::{CompactionError, CompactionOutcome, Compactor};
use crate::config::SessionConfig;
use crate::layout::Layout;
use crate::locks::UserGuard;
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::{Stm, StmError};
use crate::summary::SummaryError;
use chrono::{DateTime, TimeDelta, Utc};
use handles::Budget;
use map::StateMap;
use state::{FileId, Looked, SessionState, same_log};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many users' states a channel keeps in memory by default. A state is
/// a few KiB (the window of records, the summary and profile bodies), so
/// this bounds a channel's session memory to tens of MiB at most.
pub const DEFAULT_MAX_ACTIVE: usize = 4096;

/// How many of them keep their log open by default (see `handles`).
pub const DEFAULT_MAX_OPEN_LOGS: usize = 256;

/// The longest a turn's view goes without looking at the user's summary
/// and profile on disk (message time): an edit made by another process is
/// in the context within this. The bot's own changes are seen at once.
pub const FILES_RECHECK: TimeDelta = TimeDelta::seconds(1);

/// Why a session operation failed. The memory copy is dropped on any error,
/// so the next call starts again from the files.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error(transparent)]
    Summary(#[from] SummaryError),
    #[error("the write was interrupted: the runtime is shutting down")]
    Interrupted,
}

/// What [`Sessions::append`] tells the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// Compaction has work for this user (decided from counters, DESIGN §2).
    pub fold_due: bool,
    /// The log holds more than `stm.maxMessages` unfolded records: the
    /// hard bound asks for a fold now, whatever waits in the user's queue.
    pub over_bound: bool,
}

/// What the context builder needs, read from memory. Shares the texts
/// and records with the session state (`Arc`s): a view costs no copy of
/// them, and stays as it was when the state moves on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextView {
    /// The rolling summary's body, if any.
    pub summary: Option<Arc<str>>,
    /// The long-term profile's body, if any (an unreadable profile is
    /// logged and left out).
    pub profile: Option<Arc<str>>,
    /// The last records not yet folded into `summary`, oldest first.
    pub recent: Vec<Arc<Record>>,
}

impl ContextView {
    /// The recent records as plain values (a copy), to compare with plain
    /// records (the turn path shares them: `recent`).
    pub fn recent_records(&self) -> Vec<Record> {
        self.recent.iter().map(|r| Record::clone(r)).collect()
    }
}

/// One channel's session states. Cheap to clone: clones share the states.
#[derive(Clone)]
pub struct Sessions {
    shared: Arc<Shared>,
}

struct Shared {
    stm: Stm,
    config: SessionConfig,
    compactor: Compactor,
    /// A `std` mutex, not a Tokio one: held for one map lookup or insert,
    /// never across an `.await` or file I/O (a state is taken out while in
    /// use, under the user's lock).
    states: Mutex<StateMap>,
    budget: Budget,
}

impl Sessions {
    pub fn new(stm: Stm, config: SessionConfig, compactor: Compactor) -> Self {
        Self::with_limits(stm, config, compactor, DEFAULT_MAX_ACTIVE, DEFAULT_MAX_OPEN_LOGS)
    }

    /// With a cap on states kept (`max_active`) and on open log handles.
    pub fn with_limits(
        stm: Stm,
        config: SessionConfig,
        compactor: Compactor,
        max_active: usize,
        max_open_logs: usize,
    ) -> Self {
        Sessions {
            shared: Arc::new(Shared {
                stm,
                config,
                compactor,
                states: Mutex::new(StateMap::new(max_active)),
                budget: Budget::new(max_open_logs),
            }),
        }
    }

    pub fn stm(&self) -> &Stm {
        &self.shared.stm
    }

    pub fn layout(&self) -> &Layout {
        self.shared.stm.layout()
    }

    pub fn config(&self) -> &SessionConfig {
        &self.shared.config
    }

    /// Appends `record` to the user's log — on disk first, then in memory —
    /// and says whether a fold is due at `now`. With `stm.fsync` on, the
    /// write and its fsync run on the blocking pool, not on an async worker.
    pub async fn append(&self, user: &SafeName, record: &Record, now: DateTime<Utc>) -> Result<Appended, SessionError> {
        Ok(self.append_checked(user, record, now, None).await?.unwrap_or_default())
    }

    /// [`Sessions::append`] of a message as it arrives from a platform,
    /// unless it is already among the user's last `keep` records: a
    /// platform delivering again what it was never told was stored (the
    /// process died between the store and the acknowledgement). `None`
    /// for such a repeat, which is not written again.
    pub async fn append_new(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        keep: usize,
    ) -> Result<Option<Appended>, SessionError> {
        self.append_checked(user, record, now, Some(keep)).await
    }

    /// The append, unless `skip_repeat_in` says to look for the record's
    /// msg id among the user's last records first and finds it (`None`).
    async fn append_checked(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        skip_repeat_in: Option<usize>,
    ) -> Result<Option<Appended>, SessionError> {
        let guard = self.stm().lock_log(user).await;
        if !self.stm().fsync() {
            return self.append_locked(&guard, user, record, now, skip_repeat_in);
        }
        let (this, user, record) = (self.clone(), user.clone(), record.clone());
        // The guard moves along: the lock is held until the write is done,
        // even if this future is dropped meanwhile.
        crate::blocking::off_workers(move || this.append_locked(&guard, &user, &record, now, skip_repeat_in))
            .await
            .unwrap_or(Err(SessionError::Interrupted))
    }

    /// The append under the user's lock (blocking with `stm.fsync` on);
    /// `None` for a repeat found among the last `skip_repeat_in` records.
    fn append_locked(
        &self,
        guard: &UserGuard,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        skip_repeat_in: Option<usize>,
    ) -> Result<Option<Appended>, SessionError> {
        debug_assert!(guard.protects(self.layout().channel(), user));
        let mut state = self.checked_out(user, Check::Log, skip_repeat_in.unwrap_or(0))?;
        if skip_repeat_in.is_some() && state.recent.iter().any(|r| r.msg_id == record.msg_id) {
            self.states().put(user.clone(), state);
            return Ok(None);
        }
        // On error `state` is dropped here: memory never runs ahead of disk.
        let written = state.write(self.stm(), user, record, &self.shared.budget)?;
        self.stm().sync_appended(user, &written.file, written.new_file)?;
        state.appended(record);
        let appended = Appended {
            fold_due: state.fold_due(&self.shared.config, now),
            over_bound: state.over_bound(&self.shared.config),
        };
        self.states().put(user.clone(), state);
        Ok(Some(appended))
    }

    /// The view a turn reads for its message, stored earlier (on intake):
    /// the summary and profile looked at no more often than
    /// [`FILES_RECHECK`] (message time `now`), the log at every use.
    pub async fn turn_view(&self, user: &SafeName, n: usize, now: DateTime<Utc>) -> Result<ContextView, SessionError> {
        let _guard = self.stm().lock_log(user).await;
        let state = self.checked_out(user, Check::Due(now), n)?;
        let view = view_of(&state, n);
        self.states().put(user.clone(), state);
        Ok(view)
    }

    /// Whether the question `msg_id` is settled among the user's records in
    /// memory (the last `context_window + 1` at least, and what intake
    /// kept: a settled question further back is no longer answered by a
    /// turn that waited that long).
    pub async fn is_settled(&self, user: &SafeName, msg_id: &str, now: DateTime<Utc>) -> Result<bool, SessionError> {
        let _guard = self.stm().lock_log(user).await;
        let state = self.checked_out(user, Check::Due(now), 0)?;
        let settled = crate::pending::is_settled(&state.recent, msg_id);
        self.states().put(user.clone(), state);
        Ok(settled)
    }

    /// The summary, profile and last `n` unfolded records of the user, from
    /// memory once loaded; a file changed since is re-read first.
    pub async fn context_view(&self, user: &SafeName, n: usize) -> Result<ContextView, SessionError> {
        let _guard = self.stm().lock_log(user).await;
        let state = self.checked_out(user, Check::Everything, n)?;
        let view = view_of(&state, n);
        self.states().put(user.clone(), state);
        Ok(view)
    }

    /// Runs compaction for the user (its file work off the async workers,
    /// see [`Compactor::maybe_compact`]). If it changed anything (or failed
    /// midway) the memory copy is stale: a user in memory gets a fresh copy
    /// loaded from the committed files here, in the background, so their
    /// next turn does not pay for the reload; anyone else's copy is dropped.
    ///
    /// A trigger that finds a run in progress returns
    /// [`CompactionOutcome::AlreadyRunning`] and is handed to that run,
    /// which folds again when it ends (see [`Compactor::maybe_compact`]) —
    /// otherwise the log would stay past `stm.maxMessages` until the user's
    /// next turn.
    pub async fn compact(&self, user: &SafeName, now: DateTime<Utc>) -> Result<CompactionOutcome, CompactionError> {
        let result = self.shared.compactor.maybe_compact(user, now).await;
        if !matches!(
            result,
            Ok(CompactionOutcome::NotNeeded | CompactionOutcome::AlreadyRunning)
        ) {
            self.reload(user).await;
        }
        result
    }

    /// Replaces the user's memory copy, if there is one, with one read from
    /// the files now, on the background threads and without the user's
    /// lock, so the user's next turn neither pays for the reload nor waits
    /// for it. A copy read while a turn appended is caught like any file
    /// changed behind the state's back: every use checks the log's identity
    /// and length, and the first turn's view after this looks at the
    /// summary and profile (`Looked::at` is `None`). If a turn put a state
    /// back meanwhile, that one stays. If the read fails the copy stays
    /// dropped and the next use tries again.
    async fn reload(&self, user: &SafeName) {
        let Some(stale) = self.states().take(user) else { return };
        let (this, user, keep) = (self.clone(), user.clone(), stale.keep);
        drop(stale);
        let looked = Looked {
            at: None,
            exclusive_locks: self.stm().exclusive_locks(),
        };
        let loaded = crate::blocking::in_background(move || {
            match SessionState::load(this.stm(), &user, keep, looked) {
                Ok(state) => this.states().put_if_absent(user, state),
                Err(e) => {
                    tracing::debug!(user = %user.log_id(), error = %e, "session reload after compaction failed; the next turn reads the files")
                }
            }
        });
        // `None`: no thread to run it; the next turn reads the files.
        let _ = loaded.await;
    }

    /// Drops the user's memory copy; the next use reads the files. For
    /// whatever changed them outside this type (`/session clear`, …).
    pub async fn forget(&self, user: &SafeName) {
        let _guard = self.stm().lock_log(user).await;
        self.states().take(user);
    }

    /// Whether compaction has work for the user, from the counters in
    /// memory; `false` for a user not in memory (nothing was appended since
    /// the copy was dropped).
    pub fn fold_due(&self, user: &SafeName, now: DateTime<Utc>) -> bool {
        self.states()
            .get(user)
            .is_some_and(|state| state.fold_due(&self.shared.config, now))
    }

    /// How many users' states are in memory.
    pub fn active(&self) -> usize {
        self.states().len()
    }

    /// How many log handles are open.
    pub fn open_logs(&self) -> usize {
        self.shared.budget.open()
    }

    /// The user's state, taken out of the map, checked against the files
    /// as `check` says and reloaded where they changed; a state holding at
    /// least `keep` recent records. The caller holds the user's lock and
    /// puts the state back.
    fn checked_out(&self, user: &SafeName, check: Check, keep: usize) -> Result<SessionState, SessionError> {
        let layout = self.layout();
        let keep = keep.max(self.shared.config.stm.context_window + 1);
        let taken = self.states().take(user);
        let log_now = match &taken {
            Some(state) => FileId::at(&state.log_path),
            None => FileId::at(&layout.messages_path(user)),
        }
        .map_err(|e| StmError::io("inspect", &layout.messages_path(user))(e))?;
        // Read before the files are looked at: a rewriter that takes its
        // lock after this is counted again by the next look.
        let looked = Looked {
            at: match check {
                Check::Due(now) => Some(now),
                Check::Log | Check::Everything => None,
            },
            exclusive_locks: self.stm().exclusive_locks(),
        };
        let mut state = match taken {
            Some(state) if state.keep >= keep && same_log(state.log, log_now) => state,
            _ => return SessionState::load(self.stm(), user, keep, looked),
        };
        let look = match check {
            Check::Log => false,
            Check::Everything => true,
            Check::Due(now) => state.looked.is_none_or(|last| {
                last.exclusive_locks != looked.exclusive_locks
                    || last.at.is_none_or(|at| now < at || now - at >= FILES_RECHECK)
            }),
        };
        if look {
            let summary_path = layout.summary_path(user);
            let summary_now = FileId::at(&summary_path).map_err(StmError::io("inspect", &summary_path))?;
            if summary_now != state.summary_file {
                return SessionState::load(self.stm(), user, keep, looked);
            }
            if FileId::at(&layout.profile_path(user)).unwrap_or(None) != state.profile_file {
                state.reload_profile(layout, user);
            }
            state.looked = Some(looked);
        }
        Ok(state)
    }

    /// The map, even if a panicking thread poisoned the mutex: every change
    /// is one take or put, so the map is always consistent.
    fn states(&self) -> MutexGuard<'_, StateMap> {
        self.shared.states.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Which of a user's files [`Sessions::checked_out`] looks at.
#[derive(Clone, Copy)]
enum Check {
    /// Only the log: an append without a view.
    Log,
    /// The log, and the summary and profile if [`FILES_RECHECK`] passed
    /// since they were last looked at (message time `now`) or an in-process
    /// rewriter ran.
    Due(DateTime<Utc>),
    /// All three.
    Everything,
}

/// What a turn reads: the summary, profile and last `n` records of `state`.
fn view_of(state: &SessionState, n: usize) -> ContextView {
    let skip = state.recent.len().saturating_sub(n);
    ContextView {
        summary: state.summary.clone(),
        profile: state.profile.clone(),
        recent: state.recent.iter().skip(skip).cloned().collect(),
    }
}
