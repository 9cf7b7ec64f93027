//! Dropping a folded prefix from a log in two halves, so compaction holds
//! the user's log lock only for a rename while its file work runs beside
//! the user's appends:
//!
//! - [`Stm::stage_drop`], under the fold lock only: reads the log's
//!   complete lines, checks its head is the folded batch and writes the
//!   rest to a synced temp file next to it — or [`Stm::stage_drop_read`],
//!   the same from a [`LogRead`] the caller made earlier under the same
//!   fold lock, so a compaction reads the log once per run, not three
//!   times;
//! - [`Stm::finish_drop_locked`], under the log lock: checks the log is
//!   still the file it read (same inode, not shorter), copies what was
//!   appended since onto the temp file (synced when `stm.fsync` is on, as
//!   the appends were), renames it into place and — with `stm.fsync` on —
//!   syncs the folder before the lock is released, so no acknowledged
//!   append can land in a file whose name is not yet durable.
//!
//! Every byte after the batch stays byte for byte, in order; a log replaced
//! or shortened in between (which only a rewriter holding the fold lock, or
//! another process, can do) is refused and left alone. It never writes the
//! log in place and never reads another user's log.

use super::{Stm, StmError, read};
use crate::fsutil::{self, Staged, open_nofollow, sync_dir};
use crate::locks::{FoldGuard, UserGuard};
use crate::names::SafeName;
use crate::record::Record;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;

/// The log as a compaction run read it under the user's fold lock: its
/// complete lines, the records in them (with where each line ends), and
/// the open file, so its inode number cannot be reused while the run
/// holds this.
///
/// Under the fold lock only appends change the log, and every rewrite —
/// a compaction's swap, clear, expiry, maintenance, in this process or
/// another — replaces it by rename or removes it. So while the file at
/// the log's path is still this one and not shorter, the bytes read are
/// still its head ([`Stm::unchanged_since`]), and the run can stage its
/// drop from them ([`Stm::stage_drop_read`]) instead of reading the log
/// again. (An edit in place that keeps the length is not noticed — the
/// same limit the swap has always had.)
#[derive(Debug, Default)]
pub struct LogRead {
    file: Option<Arc<File>>,
    /// The log's bytes up to the end of its last complete line.
    bytes: Vec<u8>,
    indexed: read::IndexedLog,
}

impl LogRead {
    /// The valid records, oldest first.
    pub fn records(&self) -> &[Record] {
        &self.indexed.records
    }

    /// The log's lines of the first `n` records (see
    /// [`read::IndexedLog::batch_lines`]).
    pub fn batch_lines(&self, n: usize) -> Vec<u8> {
        self.indexed.batch_lines(&self.bytes, n)
    }
}

/// A log without its folded prefix, written beside it and waiting for
/// [`Stm::finish_drop_locked`]. Dropped instead, it removes its temp file
/// and the log stays as it was.
#[derive(Debug)]
pub struct StagedDrop {
    user: SafeName,
    staged: Staged,
    /// The log that was read, kept open so its inode number cannot be
    /// reused by a replacement (`None`: there was no log).
    log: Option<Arc<File>>,
    /// How many bytes of it the temp file already holds (up to the end of
    /// the read's last complete line).
    copied: u64,
}

/// The folder of a swapped log, still to be fsynced (only when `stm.fsync`
/// is off: with it on, the swap synced it under the lock).
#[must_use = "sync the folder before the run reports its commit"]
#[derive(Debug)]
pub struct FolderSync(Option<PathBuf>);

impl FolderSync {
    /// Whether there is a folder left to sync.
    pub fn pending(&self) -> bool {
        self.0.is_some()
    }

    /// fsyncs the folder, so the rename survives a crash.
    pub fn run(self) -> Result<(), StmError> {
        match self.0 {
            Some(dir) => sync_dir(&dir).map_err(StmError::io("fsync the folder of", &dir)),
            None => Ok(()),
        }
    }
}

impl Stm {
    /// The first half (see the module doc); the caller holds `user`'s fold
    /// lock, so nobody else rewrites the log meanwhile.
    pub fn stage_drop(&self, fold: &FoldGuard, user: &SafeName, folded: &[Record]) -> Result<StagedDrop, StmError> {
        if !fold.protects(self.layout().channel(), user) {
            return Err(self.wrong_guard(fold.channel(), fold.user(), user));
        }
        let path = self.layout().messages_path(user);
        let (bytes, log) = match open_nofollow(self.layout().state_root(), &path) {
            Ok(mut log) => {
                let mut bytes = Vec::new();
                log.read_to_end(&mut bytes).map_err(StmError::io("read", &path))?;
                (bytes, Some(Arc::new(log)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), None),
            Err(e) => return Err(StmError::io("open", &path)(e)),
        };
        let settled = read::settled(&bytes);
        let rest_start = self.split_folded(user, settled, folded)?;
        let staged = fsutil::stage(self.layout().state_root(), &path, &settled[rest_start..])
            .map_err(StmError::io("rewrite", &path))?;
        Ok(StagedDrop {
            user: user.clone(),
            staged,
            log,
            copied: settled.len() as u64,
        })
    }

    /// The log's complete lines and records, with the file kept open (see
    /// [`LogRead`]); the caller holds `user`'s fold lock. A missing log is
    /// empty.
    pub fn read_for_fold(&self, fold: &FoldGuard, user: &SafeName) -> Result<LogRead, StmError> {
        if !fold.protects(self.layout().channel(), user) {
            return Err(self.wrong_guard(fold.channel(), fold.user(), user));
        }
        let path = self.layout().messages_path(user);
        let mut log = match open_nofollow(self.layout().state_root(), &path) {
            Ok(log) => log,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LogRead::default()),
            Err(e) => return Err(StmError::io("open", &path)(e)),
        };
        let mut bytes = Vec::new();
        log.read_to_end(&mut bytes).map_err(StmError::io("read", &path))?;
        let settled = read::settled(&bytes).len();
        bytes.truncate(settled);
        let indexed = read::parse_indexed(&path, &bytes);
        Ok(LogRead {
            file: Some(Arc::new(log)),
            bytes,
            indexed,
        })
    }

    /// Whether the log at `user`'s path is still the file `read` was made
    /// from and not shorter than what it read: then the records read are
    /// still the head of the log (see [`LogRead`]). One `stat`.
    pub fn unchanged_since(&self, user: &SafeName, read: &LogRead) -> Result<bool, StmError> {
        let path = self.layout().messages_path(user);
        let now = fsutil::FileStamp::at(&path).map_err(StmError::io("inspect", &path))?;
        Ok(match (&read.file, now) {
            (Some(file), Some(now)) => {
                let then = file.metadata().map_err(StmError::io("inspect", &path))?;
                (then.dev(), then.ino()) == (now.dev, now.ino) && now.len >= read.bytes.len() as u64
            }
            (None, None) => true,
            _ => false,
        })
    }

    /// [`Stm::stage_drop`] of the first `n` records of `read`, from the
    /// bytes already read: nothing is read or parsed again. The caller
    /// holds `user`'s fold lock, the one `read` was made under, and has
    /// checked [`Stm::unchanged_since`] if it let go of the lock between.
    /// Malformed lines before the `n`th record leave the log with the
    /// prefix and are kept in `malformed.jsonl` first, as with
    /// [`Stm::stage_drop`].
    pub fn stage_drop_read(
        &self,
        fold: &FoldGuard,
        user: &SafeName,
        read: &LogRead,
        n: usize,
    ) -> Result<StagedDrop, StmError> {
        if !fold.protects(self.layout().channel(), user) {
            return Err(self.wrong_guard(fold.channel(), fold.user(), user));
        }
        let path = self.layout().messages_path(user);
        let rest_start = match n.checked_sub(1) {
            None => 0,
            Some(last) => *read.indexed.ends.get(last).ok_or_else(|| StmError::PrefixMismatch {
                path: path.clone(),
                expected: n,
                detail: format!("the log read holds only {} valid records", read.indexed.records.len()),
            })?,
        };
        let malformed: Vec<&[u8]> = read
            .indexed
            .malformed
            .iter()
            .take_while(|span| span.start < rest_start)
            .map(|span| &read.bytes[span.clone()])
            .collect();
        self.quarantine(user, &malformed)?;
        let staged = fsutil::stage(self.layout().state_root(), &path, &read.bytes[rest_start..])
            .map_err(StmError::io("rewrite", &path))?;
        Ok(StagedDrop {
            user: user.clone(),
            staged,
            log: read.file.clone(),
            copied: read.bytes.len() as u64,
        })
    }

    /// The second half (see the module doc), under the log lock. On error
    /// nothing changed and the temp file is gone.
    pub fn finish_drop_locked(&self, guard: &UserGuard, drop: StagedDrop) -> Result<FolderSync, StmError> {
        let StagedDrop {
            user,
            mut staged,
            log,
            copied,
        } = drop;
        self.check_guard(guard, &user)?;
        let path = self.layout().messages_path(&user);
        let current = open_nofollow(self.layout().state_root(), &path).map_err(StmError::io("open", &path))?;
        let meta = current.metadata().map_err(StmError::io("inspect", &path))?;
        let read = match &log {
            Some(log) => Some(log.metadata().map_err(StmError::io("inspect", &path))?),
            None => None,
        };
        let same = read.is_some_and(|read| (read.dev(), read.ino()) == (meta.dev(), meta.ino()));
        if !same || meta.len() < copied {
            return Err(StmError::PrefixMismatch {
                path,
                expected: 0,
                detail: "the log was replaced or shortened while the compaction committed".into(),
            });
        }
        let len = usize::try_from(meta.len() - copied)
            .map_err(|_| StmError::io("read", &path)(io::Error::new(io::ErrorKind::InvalidData, "log too large")))?;
        let mut since = vec![0u8; len];
        current
            .read_exact_at(&mut since, copied)
            .map_err(StmError::io("read", &path))?;
        staged.append(&since).map_err(StmError::io("rewrite", &path))?;
        if self.fsync() && !since.is_empty() {
            staged.sync_data().map_err(StmError::io("fsync", &path))?;
        }
        let dir = staged.parent().to_path_buf();
        staged.commit().map_err(StmError::io("rewrite", &path))?;
        let folder = FolderSync(Some(dir));
        if self.fsync() {
            folder.run()?;
            return Ok(FolderSync(None));
        }
        Ok(folder)
    }
}
