//! Versions of a user's long-term memory: every replace or delete of a file
//! under `ltm/` goes through [`replace`], which first keeps the file's
//! previous content as one record in `ltm/versions/<user>/`, whoever writes
//! (compaction, a model's memory tool, a `/session` command). [`history`]
//! lists the records, [`undo`] puts the newest one back.
//!
//! A record is `<seq>-<file>.json` (`seq` counts up per user, `file` is a
//! hash of the path): `{"seq","ts","by","what","file","before"}`, `before`
//! being the whole previous text or `null` when the file did not exist. The
//! last [`KEEP_PER_FILE`] records per file are kept. Undo pops: it restores
//! `before` and deletes the record, so undoing again steps further back.
//!
//! Callers hold the user's lock. A record names its file by its path under
//! `ltm/`, and undo acts only on a path that belongs to the same user (see
//! [`owned_path`]), so an edited record cannot reach another user's file.
//! Files only, via [`crate::fsutil`]; no clock (`now` is a parameter).

use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Component, Path, PathBuf};

/// Versions kept per file (the CoreAI memory system's number).
pub const KEEP_PER_FILE: usize = 30;

/// Who changed long-term memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    /// The summarizer's facts, merged when old messages are folded.
    Compaction,
    /// A memory tool the model called while answering.
    Tool,
    /// A `/session` command of the user.
    Command,
    /// An operator's tool: `mnemo store copy` writing a profile it moved
    /// from another store.
    Operator,
}

impl Author {
    pub fn label(self) -> &'static str {
        match self {
            Author::Compaction => "summary of older messages",
            Author::Tool => "memory tool",
            Author::Command => "your command",
            Author::Operator => "the operator",
        }
    }
}

/// Who makes a change and what it is, in a few words for `/session history`
/// (shown to the owner only, never logged).
#[derive(Clone, Copy, Debug)]
pub struct Change<'a> {
    pub by: Author,
    pub what: &'a str,
}

/// One kept version, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub seq: u64,
    pub ts: DateTime<Utc>,
    pub by: Author,
    pub what: String,
    /// The file's path under `ltm/` (`users/<user>.md`, `topics/<user>/<slug>.md`, …).
    pub file: String,
    /// The file's content before the change; `None` when it did not exist.
    pub before: Option<String>,
    /// When `/session undo` took this change back: the version stays in
    /// the history, marked, and the next undo goes further back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<DateTime<Utc>>,
}

impl Version {
    /// `profile` or `topic <slug>` (or the path under `ltm/` for other files).
    pub fn file_label(&self) -> String {
        let path = Path::new(&self.file);
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        match path.components().next().and_then(|c| c.as_os_str().to_str()) {
            Some("users") => "profile".to_string(),
            Some("topics") => format!("topic {stem}"),
            _ => self.file.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{path} is not a long-term memory file of this user; refused")]
    NotOwned { path: PathBuf },
}

/// Replaces (`new: Some`) or deletes (`None`) the user's long-term file
/// `target`, keeping its previous content as a version first. Nothing is
/// written, and no version kept, when the content would not change.
/// Returns whether the file changed.
pub fn replace(
    layout: &Layout,
    user: &SafeName,
    target: &Path,
    new: Option<&[u8]>,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<bool, VersionError> {
    let file = owned_path(layout, user, target)?;
    let root = layout.state_root();
    let before = fsutil::read_if_exists(root, target)?;
    if before.as_deref() == new {
        return Ok(false);
    }
    let dir = layout.versions_dir(user);
    let names = record_names(root, &dir)?;
    let seq = names.iter().map(|(seq, _, _)| *seq).max().unwrap_or(0) + 1;
    let tag = file_tag(&file);
    let version = Version {
        seq,
        ts: now,
        by: change.by,
        what: change.what.to_string(),
        file,
        before: before.map(|b| String::from_utf8_lossy(&b).into_owned()),
        undone: None,
    };
    let path = layout.version_record_path(user, &record_name(&version));
    let json = serde_json::to_vec(&version).map_err(|e| FileError::new("encode", &path, io::Error::other(e)))?;
    fsutil::replace(root, &path, &json)?;
    match new {
        Some(bytes) => fsutil::replace(root, target, bytes)?,
        None => _ = fsutil::remove_if_exists(root, target)?,
    }
    // Prune this file's oldest versions beyond the limit.
    let mut same: Vec<&(u64, String, PathBuf)> = names.iter().filter(|(_, t, _)| *t == tag).collect();
    same.sort_by_key(|(seq, _, _)| *seq);
    let excess = (same.len() + 1).saturating_sub(KEEP_PER_FILE);
    for (_, _, old) in same.into_iter().take(excess) {
        fsutil::remove_nofollow(root, old).map_err(FileError::with("delete", old))?;
    }
    Ok(true)
}

/// The user's kept versions, newest first; with `file_label`, only those
/// of that file (`profile`, `topic <slug>`). An unreadable record is
/// skipped with a warning naming it.
pub fn history(layout: &Layout, user: &SafeName) -> Result<Vec<Version>, VersionError> {
    let root = layout.state_root();
    let mut names = record_names(root, &layout.versions_dir(user))?;
    names.sort_by_key(|(seq, _, _)| std::cmp::Reverse(*seq));
    let mut out = Vec::with_capacity(names.len());
    for (_, _, path) in names {
        match read_record(root, &path) {
            Ok(version) => out.push(version),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "version record unreadable; skipped"),
        }
    }
    Ok(out)
}

/// Puts back the newest kept version not yet undone and marks its record
/// undone at `now` (it stays in the history); `None` when there is
/// nothing to undo. The restored file is written atomically.
pub fn undo(layout: &Layout, user: &SafeName, now: DateTime<Utc>) -> Result<Option<Version>, VersionError> {
    let root = layout.state_root();
    let mut names = record_names(root, &layout.versions_dir(user))?;
    names.sort_by_key(|(seq, _, _)| std::cmp::Reverse(*seq));
    for (_, _, path) in names {
        let mut version = match read_record(root, &path) {
            Ok(version) => version,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "version record unreadable; skipped");
                continue;
            }
        };
        if version.undone.is_some() {
            continue;
        }
        let target = layout.ltm_file(&version.file);
        owned_path(layout, user, &target)?;
        match &version.before {
            Some(text) => fsutil::replace(root, &target, text.as_bytes())?,
            None => _ = fsutil::remove_if_exists(root, &target)?,
        }
        version.undone = Some(now);
        let json = serde_json::to_vec(&version).map_err(|e| FileError::new("encode", &path, io::Error::other(e)))?;
        fsutil::replace(root, &path, &json)?;
        return Ok(Some(version));
    }
    Ok(None)
}

/// The record's file name in `ltm/versions/<user>/`: `<seq>-<file tag>.json`.
pub fn record_name(version: &Version) -> String {
    format!("{:010}-{}.json", version.seq, file_tag(&version.file))
}

/// Replaces all of `user`'s kept versions with `kept` (as another store
/// holds them: `mnemo store copy`). A record naming a file that is not
/// the user's own is refused before anything is written.
pub fn put_all(layout: &Layout, user: &SafeName, kept: &[Version]) -> Result<(), VersionError> {
    for version in kept {
        owned_path(layout, user, &layout.ltm_file(&version.file))?;
    }
    let root = layout.state_root();
    fsutil::remove_if_exists(root, &layout.versions_dir(user))?;
    for version in kept {
        let path = layout.version_record_path(user, &record_name(version));
        let json = serde_json::to_vec(version).map_err(|e| FileError::new("encode", &path, io::Error::other(e)))?;
        fsutil::replace(root, &path, &json)?;
    }
    Ok(())
}

/// `target`'s path under `ltm/` if it is one of `user`'s own long-term
/// files: `<kind>/<user>.<ext>` or `<kind>/<user>/<name>`, plain
/// components only, never under `versions/`.
pub fn owned_path(layout: &Layout, user: &SafeName, target: &Path) -> Result<String, VersionError> {
    let refuse = || VersionError::NotOwned {
        path: target.to_path_buf(),
    };
    let rel = target.strip_prefix(layout.ltm_root()).map_err(|_| refuse())?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(refuse)?;
    let mine = match parts.as_slice() {
        ["versions", ..] => false,
        [_, file] => Path::new(file).file_stem().and_then(|s| s.to_str()) == Some(user.as_str()),
        [_, owner, _] => *owner == user.as_str(),
        _ => false,
    };
    if !mine {
        return Err(refuse());
    }
    Ok(parts.join("/"))
}

fn read_record(root: &Path, path: &Path) -> Result<Version, VersionError> {
    let bytes = fsutil::read_nofollow(root, path).map_err(FileError::with("read", path))?;
    let parsed = serde_json::from_slice(&bytes);
    Ok(parsed.map_err(|e| FileError::new("parse", path, io::Error::new(io::ErrorKind::InvalidData, e)))?)
}

/// `(seq, file tag, path)` of every record in `dir`; a missing folder is empty.
fn record_names(root: &Path, dir: &Path) -> Result<Vec<(u64, String, PathBuf)>, VersionError> {
    let mut out = Vec::new();
    for entry in fsutil::list_dir(root, dir)? {
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        let Some((seq, tag)) = stem.split_once('-') else {
            continue;
        };
        if let Ok(seq) = seq.parse::<u64>() {
            out.push((seq, tag.to_string(), entry.path()));
        }
    }
    Ok(out)
}

/// A short stable tag of a file's path, so pruning needs no record reads.
fn file_tag(file: &str) -> String {
    format!("{:016x}", crate::stable_key::key_of(&[file.as_bytes()]))
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;
    use chrono::TimeZone;

    fn at(min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 10, min, 0).unwrap()
    }

    const BY_TOOL: Change<'static> = Change {
        by: Author::Tool,
        what: "test",
    };

    #[test]
    fn every_change_keeps_the_previous_content_and_undo_walks_back_one_step_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let path = layout.profile_path(&user);
        assert!(replace(&layout, &user, &path, Some(b"one"), BY_TOOL, at(1)).unwrap());
        assert!(replace(&layout, &user, &path, Some(b"two"), BY_TOOL, at(2)).unwrap());
        assert!(!replace(&layout, &user, &path, Some(b"two"), BY_TOOL, at(3)).unwrap());
        assert!(replace(&layout, &user, &path, None, BY_TOOL, at(4)).unwrap());
        assert!(!path.exists());
        let kept = history(&layout, &user).unwrap();
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[0].before.as_deref(), Some("two"));
        assert_eq!(kept[0].file_label(), "profile");
        undo(&layout, &user, at(5)).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        undo(&layout, &user, at(6)).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        undo(&layout, &user, at(7)).unwrap().unwrap();
        assert!(!path.exists());
        assert!(undo(&layout, &user, at(8)).unwrap().is_none());
        // Each undone change is still in the history, marked with when.
        let kept = history(&layout, &user).unwrap();
        assert_eq!(
            kept.iter().map(|v| v.undone).collect::<Vec<_>>(),
            [Some(at(5)), Some(at(6)), Some(at(7))]
        );
    }

    #[test]
    fn only_the_last_thirty_versions_of_a_file_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let profile = layout.profile_path(&user);
        let topic = layout.topic_path(&user, &SafeName::of("boat")).unwrap();
        replace(&layout, &user, &topic, Some(b"note"), BY_TOOL, at(0)).unwrap();
        for n in 0..40u32 {
            replace(&layout, &user, &profile, Some(n.to_string().as_bytes()), BY_TOOL, at(n)).unwrap();
        }
        let kept = history(&layout, &user).unwrap();
        assert_eq!(
            kept.iter().filter(|v| v.file_label() == "profile").count(),
            KEEP_PER_FILE
        );
        assert_eq!(kept.iter().filter(|v| v.file_label() == "topic boat").count(), 1);
        assert_eq!(kept[0].before.as_deref(), Some("38"));
    }

    #[test]
    fn another_users_file_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let (me, other) = (SafeName::of("U1"), SafeName::of("U2"));
        for path in [
            layout.profile_path(&other),
            layout.topic_path(&other, &SafeName::of("x")).unwrap(),
            layout.versions_dir(&me).join("0000000001-x.json"),
            layout.ltm_root().join("users/../users/U2.md"),
            layout.messages_path(&me),
        ] {
            let refused = replace(&layout, &me, &path, Some(b"x"), BY_TOOL, at(1));
            assert!(matches!(refused, Err(VersionError::NotOwned { .. })), "{path:?}");
        }
        assert!(history(&layout, &me).unwrap().is_empty());
    }
}
