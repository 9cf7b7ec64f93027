//! Pruning: removes a user's empty folders (STM, own topics, daily and
//! weekly summaries, archive), temp files older than an hour that a crash
//! left behind (`fsutil::TEMP_PREFIX`), `/session export` bundles older
//! than `scheduler.exportKeepDays` (they hold everything about a user), and
//! — only where the operator set a keep time — archived batches, daily and
//! weekly summaries, and gzipped logs older than `archiveKeepDays`,
//! `summaryKeepDays`, `logKeepDays` (retention; 0 = forever, the default).
//!
//! It removes only folders that are empty at that moment (under the user's
//! lock, so an append cannot be creating a file in one) and only temp files
//! old enough that no live write can still own them (a write finishes in
//! well under a second). Files with content go only past a keep time, by
//! their last write.

use crate::fsutil::{self, FileError, TEMP_PREFIX};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::report;
use crate::stm::Stm;
use chrono::{DateTime, TimeDelta, Utc};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A temp file older than this is a crash leftover.
pub const TEMP_FILE_MAX_AGE: TimeDelta = TimeDelta::hours(1);

/// What one prune pass removed, and what it could not.
#[derive(Debug, Default)]
pub struct Pruned {
    pub dirs: Vec<PathBuf>,
    pub temp_files: Vec<PathBuf>,
    pub exports: Vec<PathBuf>,
    /// Archives, summaries and log archives past their keep time.
    pub expired: Vec<PathBuf>,
    pub errors: Vec<FileError>,
}

/// How long each kind of file is kept; `None` = forever.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keep {
    pub exports: TimeDelta,
    pub archives: Option<TimeDelta>,
    pub summaries: Option<TimeDelta>,
    pub logs: Option<TimeDelta>,
}

/// Removes crash leftovers under the sessions folder and under `logs_dir`,
/// files past their keep time, then every user's empty folders.
pub async fn prune(stm: &Stm, logs_dir: Option<&Path>, now: DateTime<Utc>, keep: &Keep) -> Pruned {
    let mut out = Pruned::default();
    let layout = stm.layout();
    remove_old_temp_files(layout.root(), now, &mut out);
    remove_old_exports(&layout.exports_dir(), now, keep.exports, &mut out);
    if let Some(logs) = logs_dir {
        remove_old_temp_files(logs, now, &mut out);
        if let Some(age) = keep.logs {
            remove_expired(&super::logs::logs_archive_dir(logs), now, age, &mut out);
        }
    }
    let users = match report::known_users(layout) {
        Ok(users) => users,
        Err(e) => {
            let e = io::Error::other(e.to_string());
            out.errors.push(FileError::new("list the users of", layout.root(), e));
            return out;
        }
    };
    for user in users {
        let _guard = stm.lock(&user).await;
        if let Some(age) = keep.archives {
            remove_expired(&layout.archive_dir(&user), now, age, &mut out);
        }
        if let Some(age) = keep.summaries {
            remove_expired(&layout.daily_dir(&user), now, age, &mut out);
            remove_expired(&layout.weekly_dir(&user), now, age, &mut out);
        }
        for dir in user_dirs_deepest_first(layout, &user) {
            match remove_if_empty(&dir) {
                Ok(true) => out.dirs.push(dir),
                Ok(false) => {}
                Err(e) => out.errors.push(FileError::new("delete", dir, e)),
            }
        }
    }
    out
}

/// The user's folders, children before parents so a folder emptied by
/// removing its empty children goes too.
fn user_dirs_deepest_first(layout: &Layout, user: &SafeName) -> Vec<PathBuf> {
    let mut dirs = vec![layout.stm_dir(user)];
    dirs.extend(layout.user_topics_dir(user));
    dirs.extend([
        layout.daily_dir(user),
        layout.weekly_dir(user),
        layout.summaries_dir(user),
        layout.archive_dir(user),
    ]);
    dirs
}

/// `Ok(true)` if `dir` was an empty folder and is gone.
fn remove_if_empty(dir: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    if fs::read_dir(dir)?.next().is_some() {
        return Ok(false);
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        // Someone put a file in it meanwhile: it is not ours to remove.
        Err(e) if matches!(e.kind(), io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::NotFound) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Export bundles (regular files directly in `exports/`) whose last write is
/// at least `max_age` before `now`.
fn remove_old_exports(dir: &Path, now: DateTime<Utc>, max_age: TimeDelta, out: &mut Pruned) {
    for entry in entries(dir, out) {
        if entry.file_type().is_ok_and(|t| t.is_file())
            && let Some(path) = remove_if_older(&entry, now, max_age, out)
        {
            out.exports.push(path);
        }
    }
}

/// Regular files directly in `dir` last written at least `max_age` ago.
fn remove_expired(dir: &Path, now: DateTime<Utc>, max_age: TimeDelta, out: &mut Pruned) {
    for entry in entries(dir, out) {
        if entry.file_type().is_ok_and(|t| t.is_file())
            && let Some(path) = remove_if_older(&entry, now, max_age, out)
        {
            out.expired.push(path);
        }
    }
}

/// Crash-leftover temp files anywhere under `dir`, once no live write can
/// still own them.
fn remove_old_temp_files(dir: &Path, now: DateTime<Utc>, out: &mut Pruned) {
    for entry in entries(dir, out) {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            remove_old_temp_files(&entry.path(), now, out);
            continue;
        }
        let is_temp = entry.file_name().to_str().is_some_and(|n| n.starts_with(TEMP_PREFIX));
        if kind.is_file()
            && is_temp
            && let Some(path) = remove_if_older(&entry, now, TEMP_FILE_MAX_AGE, out)
        {
            out.temp_files.push(path);
        }
    }
}

/// The entries of `dir`: none for a missing folder; any other failure is
/// reported in `out` and yields none.
fn entries(dir: &Path, out: &mut Pruned) -> Vec<fs::DirEntry> {
    fsutil::list_dir(dir, dir).unwrap_or_else(|e| {
        out.errors.push(e);
        Vec::new()
    })
}

/// Removes `entry` if its last write is at least `max_age` before `now`;
/// the path when it was removed (a file already gone is not an error).
fn remove_if_older(entry: &fs::DirEntry, now: DateTime<Utc>, max_age: TimeDelta, out: &mut Pruned) -> Option<PathBuf> {
    let old = entry
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|modified| now - DateTime::<Utc>::from(modified) >= max_age);
    if !old {
        return None;
    }
    let path = entry.path();
    match fs::remove_file(&path) {
        Ok(()) => Some(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            out.errors.push(FileError::new("delete", path, e));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;
    use crate::locks::LockRegistry;

    const WEEK: TimeDelta = TimeDelta::days(7);
    const KEEP: Keep = Keep {
        exports: WEEK,
        archives: None,
        summaries: None,
        logs: None,
    };

    #[tokio::test]
    async fn export_bundles_go_once_past_their_keep_time_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
        let exports = stm.layout().exports_dir();
        fs::create_dir_all(&exports).unwrap();
        let bundle = exports.join("alice.20261101T000000Z.tar.gz");
        fs::write(&bundle, "everything about alice").unwrap();
        let written = DateTime::<Utc>::from(fs::metadata(&bundle).unwrap().modified().unwrap());

        let early = prune(&stm, None, written + WEEK - TimeDelta::seconds(1), &KEEP).await;
        assert!(early.exports.is_empty() && bundle.exists());
        let due = prune(&stm, None, written + WEEK, &KEEP).await;
        assert!(due.errors.is_empty(), "{:?}", due.errors);
        assert_eq!(due.exports, vec![bundle.clone()]);
        assert!(!bundle.exists());
    }

    #[tokio::test]
    async fn empty_user_folders_and_old_temp_files_go_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
        let layout = stm.layout().clone();
        let (a, b) = (SafeName::of("alice"), SafeName::of("bob"));
        fs::create_dir_all(layout.daily_dir(&a)).unwrap();
        fs::create_dir_all(layout.stm_dir(&a)).unwrap();
        fs::create_dir_all(layout.stm_dir(&b)).unwrap();
        fs::write(layout.messages_path(&b), "{}\n").unwrap();
        let temp = layout.stm_dir(&b).join(format!("{TEMP_PREFIX}messages.jsonl-1-2-3"));
        fs::write(&temp, "half").unwrap();
        // What a recall segment merge that crashed mid-write leaves.
        let index = layout.recall_dir(&b);
        fs::create_dir_all(&index).unwrap();
        let merge_temp = index.join(format!("{TEMP_PREFIX}segment.bin-1-2-3"));
        fs::write(&merge_temp, "half a segment").unwrap();
        fs::create_dir_all(layout.shared_topics_dir()).unwrap();

        let written = DateTime::<Utc>::from(fs::metadata(&temp).unwrap().modified().unwrap());
        let early = prune(&stm, None, written + TEMP_FILE_MAX_AGE - TimeDelta::seconds(1), &KEEP).await;
        assert!(early.temp_files.is_empty());
        let pruned = prune(&stm, None, written + TEMP_FILE_MAX_AGE, &KEEP).await;
        assert!(pruned.errors.is_empty(), "{:?}", pruned.errors);
        let mut swept = pruned.temp_files.clone();
        swept.sort();
        let mut left = vec![temp, merge_temp];
        left.sort();
        assert_eq!(swept, left);
        assert!(!layout.summaries_dir(&a).exists() && !layout.stm_dir(&a).exists());
        assert!(layout.messages_path(&b).exists());
        assert!(
            layout.shared_topics_dir().exists(),
            "the operator's folder is not a user's"
        );
    }

    #[tokio::test]
    async fn archives_summaries_and_logs_go_past_their_keep_time_and_are_kept_forever_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
        let layout = stm.layout().clone();
        let ada = SafeName::of("ada");
        let logs = dir.path().join("logs");
        let files = [
            layout.archive_dir(&ada).join("messages-abc.jsonl.gz"),
            layout.daily_dir(&ada).join("2026-01-01.md"),
            layout.weekly_dir(&ada).join("2026-W01.md"),
            super::super::logs::logs_archive_dir(&logs).join("mnemo.log.2026-01-01.gz"),
        ];
        for file in &files {
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(file, "kept data").unwrap();
        }
        fs::write(layout.messages_path(&ada), "{}\n").ok();
        let written = DateTime::<Utc>::from(fs::metadata(&files[0]).unwrap().modified().unwrap());
        let later = written + TimeDelta::days(400);

        let forever = prune(&stm, Some(&logs), later, &KEEP).await;
        assert!(
            forever.expired.is_empty() && files.iter().all(|f| f.exists()),
            "0 = forever"
        );

        let days = |d| Some(TimeDelta::days(d));
        let keep = Keep {
            exports: WEEK,
            archives: days(30),
            summaries: days(60),
            logs: days(90),
        };
        let early = prune(&stm, Some(&logs), written + TimeDelta::days(29), &keep).await;
        assert!(early.expired.is_empty());
        let month = prune(&stm, Some(&logs), written + TimeDelta::days(30), &keep).await;
        assert_eq!(
            month.expired,
            vec![files[0].clone()],
            "only the archive is past 30 days"
        );
        // A day past the longest keep: the files were written a tick apart.
        let all = prune(&stm, Some(&logs), written + TimeDelta::days(91), &keep).await;
        assert!(all.errors.is_empty(), "{:?}", all.errors);
        assert_eq!(all.expired.len(), 3);
        assert!(files.iter().all(|f| !f.exists()));
    }
}
