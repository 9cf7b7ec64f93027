//! One user's session state: what a turn needs from their short-term
//! memory (the recent unfolded records, counters for "is a fold due?", the
//! rolling summary and profile bodies), the identity of the files it was
//! loaded from, and an open append handle.
//!
//! It never decides to keep itself: [`super::Sessions`] checks the identities
//! against the disk before each use and throws a state away on any error, so
//! memory is never ahead of the files. Every function here does blocking
//! file I/O and is called with the user's lock held.

use super::SessionError;
use super::handles::{Budget, OpenLog};
use crate::compaction::plan;
use crate::config::SessionConfig;
use crate::fsutil::FileStamp;
use crate::layout::Layout;
use crate::names::SafeName;
use crate::profile;
use crate::record::Record;
use crate::stm::{self, Stm, StmError};
use crate::summary;
use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file's identity as last read or written (see [`FileStamp`]).
pub(super) type FileId = FileStamp;

/// Whether `now` is the log we last saw or wrote. Our own appends change the
/// mtime without our learning it (that would cost an `fstat`), so the log is
/// compared by file and length only: only we append to it, and every rewrite
/// is a rename (a new inode).
pub(super) fn same_log(a: Option<FileId>, b: Option<FileId>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a.dev, a.ino, a.len) == (b.dev, b.ino, b.len),
        (None, None) => true,
        _ => false,
    }
}
/// When the summary and profile were last looked at: the message time of
/// the turn that looked (`None`: a look outside a turn, which does not
/// count for the timer) and [`Stm::exclusive_locks`] just before.
#[derive(Clone, Copy, Debug)]
pub(super) struct Looked {
    pub(super) at: Option<DateTime<Utc>>,
    pub(super) exclusive_locks: u64,
}

/// A line written by [`SessionState::write`], waiting to be made durable.
pub(super) struct Written {
    /// The log it went to.
    pub(super) file: Arc<File>,
    /// The log was empty before: its folder entries need syncing too.
    pub(super) new_file: bool,
}

/// What a turn needs from one user's short-term memory, loaded once and
/// kept up to date by the appends that go through [`super::Sessions`].
pub(super) struct SessionState {
    /// The log as last read or written by us.
    pub(super) log: Option<FileId>,
    /// Where the log is (kept: building the path costs three allocations,
    /// and it is `stat`ed before every use).
    pub(super) log_path: PathBuf,
    /// The log's last line has no `\n` (a crash tore it): the next append
    /// seals it first.
    torn_tail: bool,
    /// `summary.md` as last read.
    pub(super) summary_file: Option<FileId>,
    /// The rolling summary's body, trimmed; `None` when blank or missing.
    /// Shared with the views handed out (no copy per turn).
    pub(super) summary: Option<Arc<str>>,
    /// The profile as last read.
    pub(super) profile_file: Option<FileId>,
    /// The profile's body; `None` when missing, blank or unreadable.
    pub(super) profile: Option<Arc<str>>,
    /// When `summary_file` and `profile_file` were last compared with the
    /// disk (see [`super::FILES_RECHECK`]).
    pub(super) looked: Option<Looked>,
    /// The last `keep` records not yet folded into the summary, oldest
    /// first; shared with the views handed out.
    pub(super) recent: VecDeque<Arc<Record>>,
    /// How many records `recent` may hold.
    pub(super) keep: usize,
    /// How many records of the log are not folded yet.
    unfolded: usize,
    /// The timestamp of the first of them (the age rule looks at it).
    first_unfolded_ts: Option<DateTime<Utc>>,
    /// A batch already in the summary still waits at the head of the log
    /// (a crash came between summary and drop): the next run finishes it.
    pending_resume: bool,
    /// An open `O_APPEND` handle on the log, when the channel's budget of
    /// open files allows one.
    appender: Option<OpenLog>,
}

impl SessionState {
    /// Reads the user's summary, whole log and profile. Called when a user
    /// becomes active and when a file changed behind our back — never once
    /// per turn. The summary is read first and the log second, under the
    /// user's lock, so an in-process compaction cannot commit in between —
    /// except after a compaction (`Sessions::reload`), which reads without
    /// the lock and leaves the result to the checks of its first use.
    pub(super) fn load(stm: &Stm, user: &SafeName, keep: usize, looked: Looked) -> Result<SessionState, SessionError> {
        let layout = stm.layout();
        let summary_path = layout.summary_path(user);
        let summary_file = FileId::at(&summary_path).map_err(StmError::io("inspect", &summary_path))?;
        let summary = summary::read_or_salvage(layout, user)?;
        let log_path = layout.messages_path(user);
        let (log, bytes) = read_log(&log_path).map_err(StmError::io("read", &log_path))?;
        let indexed = stm::read::parse_indexed(&log_path, &bytes);
        let marker = summary.as_ref().and_then(|s| s.meta.last_folded.as_ref());
        let folded = plan::already_folded(&indexed.records, marker, &|n| Some(indexed.batch_lines(&bytes, n)));
        let records = indexed.records;
        let unfolded = &records[folded..];
        let mut state = SessionState {
            log,
            log_path,
            torn_tail: bytes.last().is_some_and(|&b| b != b'\n'),
            summary_file,
            summary: summary
                .map(|s| Arc::from(s.body.trim()))
                .filter(|b: &Arc<str>| !b.is_empty()),
            profile_file: None,
            profile: None,
            looked: Some(looked),
            recent: unfolded[unfolded.len().saturating_sub(keep)..]
                .iter()
                .map(|r| Arc::new(r.clone()))
                .collect(),
            keep,
            unfolded: unfolded.len(),
            first_unfolded_ts: unfolded.first().map(|r| r.ts),
            pending_resume: folded > 0,
            appender: None,
        };
        state.reload_profile(layout, user);
        Ok(state)
    }

    /// Re-reads the profile body. An unreadable profile is logged (by
    /// [`profile::read_body`]) and the turn goes on without it, as before.
    pub(super) fn reload_profile(&mut self, layout: &Layout, user: &SafeName) {
        let path = layout.profile_path(user);
        self.profile_file = FileId::at(&path).unwrap_or(None);
        self.profile = profile::read_body(layout, user).unwrap_or(None).map(Arc::from);
    }

    /// Writes one record's line to the log (not synced), keeping the
    /// handle open if the budget allows; returns the handle and whether
    /// the log was new, for [`Stm::sync_appended`]. The record reaches
    /// this state only through [`SessionState::appended`], once the write
    /// is durable. On an error the caller must drop the state: the disk may
    /// hold part of a line.
    pub(super) fn write(
        &mut self,
        stm: &Stm,
        user: &SafeName,
        record: &Record,
        budget: &Budget,
    ) -> Result<Written, StmError> {
        let line = stm.encode_line_for(user, record)?;
        let (file, new_file) = match &self.appender {
            Some(open) => (Arc::clone(open.file()), false),
            None => {
                let (file, meta) = stm.open_for_append(user)?;
                self.log = Some(FileId::of(&meta));
                let file = Arc::new(file);
                self.appender = budget.keep(Arc::clone(&file));
                (file, meta.len() == 0)
            }
        };
        stm.write_line(user, &file, &line, self.torn_tail)?;
        let written = line.len() as u64 + u64::from(self.torn_tail);
        if let Some(log) = &mut self.log {
            log.len += written;
        }
        self.torn_tail = false;
        Ok(Written { file, new_file })
    }

    /// Takes in a record whose line [`SessionState::write`] wrote and
    /// `stm.fsync` made durable.
    pub(super) fn appended(&mut self, record: &Record) {
        self.unfolded += 1;
        self.first_unfolded_ts.get_or_insert(record.ts);
        self.recent.push_back(Arc::new(record.clone()));
        while self.recent.len() > self.keep {
            self.recent.pop_front();
        }
    }

    /// Whether compaction has work, from the counters (DESIGN §2).
    pub(super) fn fold_due(&self, config: &SessionConfig, now: DateTime<Utc>) -> bool {
        plan::due(self.unfolded, self.first_unfolded_ts, self.pending_resume, config, now)
    }

    /// Past `stm.maxMessages`: the hard bound (DESIGN §4) wants a fold.
    pub(super) fn over_bound(&self, config: &SessionConfig) -> bool {
        self.unfolded > config.stm.max_messages
    }
}

/// The log's identity and bytes, from one open file (so they match). A
/// missing log is empty.
fn read_log(path: &Path) -> io::Result<(Option<FileId>, Vec<u8>)> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((None, Vec::new())),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    let mut id = FileId::of(&meta);
    // Appended to between the fstat and the read (not by us: we hold the
    // lock): the length read is the one that counts.
    id.len = bytes.len() as u64;
    Ok((Some(id), bytes))
}
