//! Short-term memory: one channel's append-only JSONL logs,
//! `stm/<user>/messages.jsonl` (DESIGN §3, §4).
//!
//! Owns the log's on-disk format and its crash rules: one record per line,
//! each appended with a single `write` on an `O_APPEND` file (fsync
//! configurable), a line torn by a crash never glued to the next record, and
//! malformed lines skipped with a warning rather than failing the user
//! forever. Every write happens under the user's lock from
//! [`crate::locks::LockRegistry`]. It never summarizes, archives or decides
//! what to keep: compaction and maintenance call it.

pub(crate) mod read;
mod swap;
mod tail;

use crate::fsutil::{
    FileError, atomic_write, list_dir, open_append_nofollow, read_nofollow, remove_nofollow, sync_dir,
};
use crate::layout::Layout;
use crate::locks::{FoldGuard, LockRegistry, UserGuard};
use crate::names::SafeName;
use crate::record::Record;
use chrono::{DateTime, Utc};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::layout::MALFORMED_FILE;
pub use read::LogSnapshot;
pub use swap::{FolderSync, LogRead, StagedDrop};

/// Why a log operation failed. Reading never fails on bad content (only on
/// I/O); writing fails only on I/O, a wrong guard or a stale snapshot.
#[derive(Debug, thiserror::Error)]
pub enum StmError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "the lock held is for {held_channel}/{held_user}, not {channel}/{user}; take the lock of the user whose log you change (this is a bug in the caller)"
    )]
    WrongGuard {
        held_channel: SafeName,
        held_user: SafeName,
        channel: SafeName,
        user: SafeName,
    },
    #[error("cannot drop {expected} folded records from {}: {detail}; the log changed since it was read, so nothing was changed — read it again and retry", path.display())]
    PrefixMismatch {
        path: PathBuf,
        expected: usize,
        detail: String,
    },
    #[error("could not encode a record for {}: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl StmError {
    /// For `map_err`: an I/O error of `op` on `path`, as a [`FileError`].
    pub(crate) fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> StmError + 'p {
        move |source| FileError::new(op, path, source).into()
    }
}

/// One channel's short-term logs. Cheap to clone: clones share the layout
/// and the lock registry.
#[derive(Clone)]
pub struct Stm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Stm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stm")
            .field("root", &self.shared.layout.stm_root())
            .field("fsync", &self.shared.fsync)
            .finish_non_exhaustive()
    }
}

struct Shared {
    layout: Layout,
    locks: LockRegistry,
    /// `stm.fsync`: `sync_data` after every append. Off only where losing
    /// the last second of messages on power loss is acceptable (tests,
    /// benches, throwaway deployments).
    fsync: bool,
    /// How many times [`Stm::lock`] (both of a user's locks: every
    /// in-process rewriter of a user's files but compaction) was taken, in
    /// any user's name. The session state compares it to skip looking at
    /// files nobody in this process can have changed (see
    /// [`crate::session`]).
    exclusive_locks: AtomicU64,
}

impl Stm {
    pub fn new(layout: Layout, locks: LockRegistry, fsync: bool) -> Self {
        Stm {
            shared: Arc::new(Shared {
                layout,
                locks,
                fsync,
                exclusive_locks: AtomicU64::new(0),
            }),
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// Takes both of `user`'s locks in this channel (see [`crate::locks`]);
    /// hold it across a read-decide-write sequence that rewrites the user's
    /// files (expiry, clear, maintenance) so no append and no compaction
    /// commit slips in between.
    pub async fn lock(&self, user: &SafeName) -> UserGuard {
        let guard = self.shared.locks.lock_exclusive(self.layout().channel(), user).await;
        // Counted once held, before anything is written under it.
        self.shared.exclusive_locks.fetch_add(1, Ordering::AcqRel);
        guard
    }

    /// How many times [`Stm::lock`] has been taken on this channel, by any
    /// user's task: unchanged means no in-process rewriter (clear, expiry,
    /// maintenance, a memory tool's edit) ran since.
    pub fn exclusive_locks(&self) -> u64 {
        self.shared.exclusive_locks.load(Ordering::Acquire)
    }

    /// Takes only `user`'s log lock: for appends and reads of the log, which
    /// may go on while a compaction writes the summary and archive.
    pub async fn lock_log(&self, user: &SafeName) -> UserGuard {
        self.shared.locks.lock(self.layout().channel(), user).await
    }

    /// Takes only `user`'s fold lock: compaction holds it across its commit
    /// and takes the log lock only to swap in the shortened log.
    pub async fn lock_fold(&self, user: &SafeName) -> FoldGuard {
        self.shared.locks.lock_fold(self.layout().channel(), user).await
    }

    /// Appends one record, taking the user's lock for the duration.
    ///
    /// The file I/O is synchronous: one small write (plus fsync if enabled)
    /// under a lock that only this user's tasks contend for.
    pub async fn append(&self, user: &SafeName, record: &Record) -> Result<(), StmError> {
        let guard = self.lock_log(user).await;
        self.append_locked(&guard, user, record)
    }

    /// Appends one record as one line with a single `write` on an `O_APPEND`
    /// file. If a crash tore the previous line (no trailing `\n`), a `\n` is
    /// written first so that fragment stays its own malformed line.
    pub fn append_locked(&self, guard: &UserGuard, user: &SafeName, record: &Record) -> Result<(), StmError> {
        self.check_guard(guard, user)?;
        let path = self.layout().messages_path(user);
        let line = encode_line(&path, record)?;
        let (file, meta) = self.open_for_append(user)?;
        let len = meta.len();
        let torn = len > 0 && !ends_with_newline(&file, len).map_err(StmError::io("read", &path))?;
        self.write_line(user, &file, &line, torn)?;
        self.sync_appended(user, &file, len == 0)
    }

    /// Opens (creating if needed, with its folder) the user's log for
    /// appending; returns it with its metadata (`fstat`).
    pub(crate) fn open_for_append(&self, user: &SafeName) -> Result<(fs::File, fs::Metadata), StmError> {
        let path = self.layout().messages_path(user);
        let file = open_append_nofollow(self.layout().state_root(), &path).map_err(StmError::io("open", &path))?;
        let meta = file.metadata().map_err(StmError::io("inspect", &path))?;
        Ok((file, meta))
    }

    /// Writes one encoded line (ending in `\n`) to the user's log opened by
    /// [`Stm::open_for_append`], sealing a torn last line first. Not synced:
    /// the caller syncs as `stm.fsync` says ([`Stm::sync_appended`]). The
    /// caller holds the user's lock.
    pub(crate) fn write_line(
        &self,
        user: &SafeName,
        mut file: &fs::File,
        line: &[u8],
        seal_torn: bool,
    ) -> Result<(), StmError> {
        // Built only for a warning or an error: three allocations a turn
        // otherwise.
        let path = || self.layout().messages_path(user);
        if seal_torn {
            tracing::warn!(file = %path().display(), "the last line was torn (no trailing newline); sealing it so it is skipped and not glued to the new record");
            file.write_all(b"\n")
                .map_err(|e| StmError::io("append to", &path())(e))?;
        }
        file.write_all(line).map_err(|e| StmError::io("append to", &path())(e))
    }

    /// One record as the user's next JSONL line, `\n` included (the path
    /// is built only for an error).
    pub(crate) fn encode_line_for(&self, user: &SafeName, record: &Record) -> Result<Vec<u8>, StmError> {
        let mut line = serde_json::to_vec(record).map_err(|source| StmError::Encode {
            path: self.layout().messages_path(user),
            source,
        })?;
        line.push(b'\n');
        Ok(line)
    }

    /// With `stm.fsync` on: makes what [`Stm::write_line`] wrote to `file`
    /// durable — and, for a log that was empty (`new_file`), its folder
    /// entries: a new file is durable only once its folder entry is, and a
    /// new user's folder only once the `stm/` entry is. Blocking; the caller
    /// holds the user's lock, off the async workers. With it off: nothing.
    pub(crate) fn sync_appended(&self, user: &SafeName, file: &fs::File, new_file: bool) -> Result<(), StmError> {
        if !self.shared.fsync {
            return Ok(());
        }
        let path = self.layout().messages_path(user);
        file.sync_data().map_err(StmError::io("fsync", &path))?;
        if new_file {
            sync_dir(&self.layout().stm_dir(user)).map_err(StmError::io("fsync the folder of", &path))?;
            sync_dir(&self.layout().stm_root()).map_err(StmError::io("fsync the folder of", &path))?;
        }
        Ok(())
    }

    /// Whether appends are fsynced (`stm.fsync`).
    pub fn fsync(&self) -> bool {
        self.shared.fsync
    }

    /// The last `n` valid records, oldest first. Reads backwards from the
    /// end in blocks, so the cost is O(n), not O(file). Malformed lines are
    /// skipped with a warning. A missing log is empty.
    pub fn tail(&self, user: &SafeName, n: usize) -> Result<Vec<Record>, StmError> {
        let path = self.layout().messages_path(user);
        tail::tail(self.layout().state_root(), &path, n).map_err(StmError::io("read", &path))
    }

    /// Every valid record, oldest first, and how many lines were skipped.
    pub fn read_all(&self, user: &SafeName) -> Result<LogSnapshot, StmError> {
        let path = self.layout().messages_path(user);
        read::read_all(self.layout().state_root(), &path).map_err(StmError::io("read", &path))
    }

    /// How many valid records the log holds.
    pub fn count(&self, user: &SafeName) -> Result<usize, StmError> {
        Ok(self.read_all(user)?.records.len())
    }

    /// The timestamp of the newest valid record; `None` for an empty or
    /// missing log.
    pub fn last_activity(&self, user: &SafeName) -> Result<Option<DateTime<Utc>>, StmError> {
        Ok(self.tail(user, 1)?.first().map(|r| r.ts))
    }

    /// Every user with an STM folder, sorted. Folders whose names are not
    /// valid encodings (stray files, temp leftovers) are skipped.
    pub fn users(&self) -> Result<Vec<SafeName>, StmError> {
        let root = self.layout().stm_root();
        let mut users = Vec::new();
        for entry in list_dir(self.layout().state_root(), &root)? {
            let is_dir = entry.file_type().map_err(StmError::io("list", &root))?.is_dir();
            let name = entry.file_name();
            match name.to_str().and_then(SafeName::from_encoded) {
                Some(user) if is_dir => users.push(user),
                _ => tracing::debug!(entry = ?entry.path(), "not a user folder; skipped"),
            }
        }
        users.sort();
        Ok(users)
    }

    /// Under the lock: atomically rewrites the log without its first valid
    /// records, after checking they are exactly `folded`. Everything after
    /// them (records appended since the snapshot, in order) stays byte for
    /// byte. A mismatch changes nothing. Malformed lines inside the dropped
    /// prefix are appended to `stm/<user>/malformed.jsonl` first, so a crash
    /// between the two steps can duplicate them there but never lose them.
    pub fn drop_prefix_locked(&self, guard: &UserGuard, user: &SafeName, folded: &[Record]) -> Result<(), StmError> {
        self.check_guard(guard, user)?;
        if folded.is_empty() {
            return Ok(());
        }
        let path = self.layout().messages_path(user);
        let bytes = match read_nofollow(self.layout().state_root(), &path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StmError::io("read", &path)(e)),
        };
        let rest_start = self.split_folded(user, &bytes, folded)?;
        atomic_write(self.layout().state_root(), &path, &bytes[rest_start..]).map_err(StmError::io("rewrite", &path))
    }

    /// Where the records after `folded` start in the log's `bytes`, after
    /// checking its head is exactly `folded`; malformed lines inside that
    /// head are appended to `stm/<user>/malformed.jsonl` first.
    fn split_folded(&self, user: &SafeName, bytes: &[u8], folded: &[Record]) -> Result<usize, StmError> {
        let path = self.layout().messages_path(user);
        let split = read::split_prefix(bytes, folded).map_err(|detail| StmError::PrefixMismatch {
            path: path.clone(),
            expected: folded.len(),
            detail,
        })?;
        self.quarantine(user, &split.malformed)?;
        Ok(split.rest_start)
    }

    /// Malformed lines leaving the log with a folded prefix: appended to
    /// `stm/<user>/malformed.jsonl` (synced) before the log is rewritten.
    fn quarantine(&self, user: &SafeName, malformed: &[&[u8]]) -> Result<(), StmError> {
        if malformed.is_empty() {
            return Ok(());
        }
        let quarantine = self.layout().malformed_path(user);
        tracing::warn!(
            file = %self.layout().messages_path(user).display(),
            lines = malformed.len(),
            kept_in = %quarantine.display(),
            "malformed lines left the log with the folded records; kept for the operator"
        );
        self.keep_malformed(&quarantine, malformed)
    }

    /// Every valid record in the log's complete lines: for a reader holding
    /// the fold lock but not the log lock, who may see an append half
    /// written — that line is left out, not reported as malformed.
    pub fn read_settled(&self, user: &SafeName) -> Result<LogSnapshot, StmError> {
        let path = self.layout().messages_path(user);
        match read_nofollow(self.layout().state_root(), &path) {
            Ok(bytes) => Ok(read::parse_all(&path, read::settled(&bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(LogSnapshot::default()),
            Err(e) => Err(StmError::io("read", &path)(e)),
        }
    }

    /// Under the lock: deletes the user's log. A missing log is fine.
    pub fn remove_locked(&self, guard: &UserGuard, user: &SafeName) -> Result<(), StmError> {
        self.check_guard(guard, user)?;
        let path = self.layout().messages_path(user);
        match remove_nofollow(self.layout().state_root(), &path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StmError::io("delete", &path)(e)),
        }
        if self.shared.fsync {
            let dir = self.layout().stm_dir(user);
            sync_dir(&dir).map_err(StmError::io("fsync the folder of", &path))?;
        }
        Ok(())
    }

    fn check_guard(&self, guard: &UserGuard, user: &SafeName) -> Result<(), StmError> {
        if guard.protects(self.layout().channel(), user) {
            Ok(())
        } else {
            Err(self.wrong_guard(guard.channel(), guard.user(), user))
        }
    }

    fn wrong_guard(&self, held_channel: &SafeName, held_user: &SafeName, user: &SafeName) -> StmError {
        StmError::WrongGuard {
            held_channel: held_channel.clone(),
            held_user: held_user.clone(),
            channel: self.layout().channel().clone(),
            user: user.clone(),
        }
    }

    fn keep_malformed(&self, quarantine: &Path, lines: &[&[u8]]) -> Result<(), StmError> {
        let mut out = Vec::new();
        for line in lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        let mut file =
            open_append_nofollow(self.layout().state_root(), quarantine).map_err(StmError::io("open", quarantine))?;
        file.write_all(&out).map_err(StmError::io("append to", quarantine))?;
        // Always synced: the rewrite that follows deletes the originals.
        file.sync_data().map_err(StmError::io("fsync", quarantine))
    }
}

/// One record as a JSONL line, `\n` included.
pub(crate) fn encode_line(path: &Path, record: &Record) -> Result<Vec<u8>, StmError> {
    let mut line = serde_json::to_vec(record).map_err(|source| StmError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    line.push(b'\n');
    Ok(line)
}

/// Whether the file's last byte is `\n`, reading only that byte.
pub(crate) fn ends_with_newline(file: &fs::File, len: u64) -> io::Result<bool> {
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] == b'\n')
}
