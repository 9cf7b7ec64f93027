//! `access.json`, one per channel (DESIGN §6): the shape of the file, and
//! reading and writing it. Writes are atomic (temp + fsync + rename), the
//! file is mode 0600 in a 0700 folder, and every read-modify-write holds a
//! cross-process lock (`access.json.lock`), so the running broker (issuing
//! pairing codes) and `mnemo access …` (approving them) never lose each
//! other's changes.
//!
//! It decides nothing about messages (that is `decide`) and never talks to a
//! platform. Strict like every mnemo config: an unknown field or a wrong
//! type is a `ConfigError` naming the file, the field path and its line;
//! it is read, like everything in the state folder, never through a link.

use chrono::{DateTime, Utc};
use mnemo_sessions::config::{ConfigError, ConfigFile, FieldError, parse_object_bytes};
use mnemo_sessions::fsutil::{FileError, atomic_write, create_private_dir_all, read_if_exists};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::Path;

/// Who may talk to the bot in direct messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// `allowFrom` may talk; a stranger gets a pairing code the operator
    /// approves with `mnemo access pair`. The default: safe, and usable.
    #[default]
    Pairing,
    /// Only `allowFrom`; strangers are ignored without a word.
    Allowlist,
    /// Anyone may talk (and spend the owner's model budget).
    Open,
    /// No direct messages at all, not even from `allowFrom`.
    Disabled,
}

impl DmPolicy {
    pub fn name(self) -> &'static str {
        match self {
            DmPolicy::Pairing => "pairing",
            DmPolicy::Allowlist => "allowlist",
            DmPolicy::Open => "open",
            DmPolicy::Disabled => "disabled",
        }
    }
}

/// One group / channel / guild channel the operator opted in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupRule {
    /// Answer only when mentioned, replied to or commanded. True by default:
    /// a bot that answers every line of a busy group burns the budget.
    #[serde(default = "yes")]
    pub require_mention: bool,
    /// Who may talk to the bot in this group; absent: everyone in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_from: Option<BTreeSet<String>>,
    /// Whose memory the group's turns use: each asker's own (`per-user`,
    /// the default), or the group's own (`shared`).
    #[serde(default, skip_serializing_if = "GroupMemory::is_per_user")]
    pub memory: GroupMemory,
    /// Keep the messages the bot sees but is not asked in the group's
    /// shared memory, without answering them (needs `memory: "shared"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub observe: bool,
}

/// Whose memory a group's turns use (`groups.<id>.memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupMemory {
    /// Each asker's personal memory (in the model's context: an answer in
    /// the group may repeat it; docs/platforms.md says so).
    #[default]
    PerUser,
    /// The group's own memory, recalled only in that group; no member's
    /// personal memory is used.
    Shared,
}

impl GroupMemory {
    fn is_per_user(&self) -> bool {
        *self == GroupMemory::PerUser
    }
}

fn yes() -> bool {
    true
}

impl Default for GroupRule {
    fn default() -> Self {
        GroupRule {
            require_mention: true,
            allow_from: None,
            memory: GroupMemory::PerUser,
            observe: false,
        }
    }
}

/// A pairing code handed to a stranger, waiting for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingPairing {
    pub code: String,
    pub user_id: String,
    /// The display name the platform gave, so the operator knows who asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,
    pub chat_id: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Replies about pairing this sender has had (capped, then silence).
    pub replies: u32,
}

/// A sender the operator approved who has not been told yet: the broker
/// greets them ("paired") with its answer to their next direct message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovedNotice {
    pub user_id: String,
    pub approved_at: DateTime<Utc>,
}

/// The whole file. A missing file means `AccessFile::default()`: pairing,
/// nobody allowed yet, no groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AccessFile {
    pub dm_policy: DmPolicy,
    /// Platform user ids allowed to talk in direct messages.
    pub allow_from: BTreeSet<String>,
    /// Opted-in groups by their chat id; any other group is ignored.
    pub groups: BTreeMap<String, GroupRule>,
    pub pending: Vec<PendingPairing>,
    pub approved: Vec<ApprovedNotice>,
}

/// What went wrong with an `access.json`: it could not be read, written
/// or locked (a [`FileError`] naming the path), or it is not valid (a
/// [`ConfigError`] naming the file, the field and the line).
#[derive(Debug, thiserror::Error)]
pub enum AccessFileError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// Parses the bytes of `path`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<AccessFile, AccessFileError> {
    Ok(checked(
        ConfigFile::Access,
        path,
        parse_object_bytes(ConfigFile::Access, path, bytes)?,
    )?)
}

/// `rules` as parsed from `path`, refused where fields contradict each
/// other (the file and the database row both pass here).
pub(super) fn checked(kind: ConfigFile, path: &Path, rules: AccessFile) -> Result<AccessFile, ConfigError> {
    for (id, rule) in &rules.groups {
        // Observed messages are kept as the group's context: with no group
        // memory there is nowhere they could go but a member's own.
        if rule.observe && rule.memory != GroupMemory::Shared {
            let field = FieldError::new(
                format!("groups.{id}.observe"),
                "observe needs \"memory\": \"shared\" (observed messages are kept in the group's own memory)"
                    .to_string(),
            );
            return Err(ConfigError::invalid(kind, path, field));
        }
    }
    Ok(rules)
}

/// The file at `path`; `None` if there is none. Like every file in the
/// state folder, never read through a symbolic link.
pub fn read(path: &Path) -> Result<Option<AccessFile>, AccessFileError> {
    match read_if_exists(folder_of(path), path)? {
        Some(bytes) => parse(path, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Replaces the file atomically: mode 0600, its folder 0700 (the folder
/// holds the channel's memory too, which is nobody else's business).
pub fn write(path: &Path, file: &AccessFile) -> Result<(), AccessFileError> {
    let werr = |source| FileError::new("write", path, source);
    let mut bytes = serde_json::to_vec_pretty(file).map_err(|e| werr(io::Error::other(e)))?;
    bytes.push(b'\n');
    let dir = folder_of(path);
    create_private_dir_all(dir, dir).map_err(werr)?;
    atomic_write(dir, path, &bytes).map_err(werr)?;
    Ok(())
}

/// The folder of `path` (the channel's sessions folder, mnemo's own).
fn folder_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// An exclusive lock on `<access.json>.lock`, released when dropped (the
/// file descriptor closes). Advisory: it orders mnemo's own writers.
pub struct FileLock {
    _file: File,
}

/// Takes the lock of `path` (the access.json), waiting for another holder.
/// Holders only read and write one small file, so the wait is short.
pub fn lock(path: &Path) -> Result<FileLock, AccessFileError> {
    let lock_path = lock_path(path);
    let lerr = |source| FileError::new("lock", &lock_path, source);
    let dir = folder_of(path);
    create_private_dir_all(dir, dir).map_err(lerr)?;
    let file = mnemo_sessions::fsutil::lock_beside(path).map_err(lerr)?;
    Ok(FileLock { _file: file })
}

pub use mnemo_sessions::fsutil::lock_path;

/// Read-modify-write under the lock: `change` sees the file as it is on
/// disk now (default if missing) and the result is written only if it
/// changed. Returns `change`'s value and the file as it now stands. An
/// invalid file is an error, never silently replaced.
pub fn update<T>(path: &Path, change: impl FnOnce(&mut AccessFile) -> T) -> Result<(T, AccessFile), AccessFileError> {
    let _lock = lock(path)?;
    let before = read(path)?.unwrap_or_default();
    let mut file = before.clone();
    let out = change(&mut file);
    if file != before {
        write(path, &file)?;
    }
    Ok((out, file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_empty_object_is_the_default_pairing_policy() {
        let f = parse(Path::new("a.json"), b"{}").unwrap();
        assert_eq!(f, AccessFile::default());
        assert_eq!(f.dm_policy, DmPolicy::Pairing);
    }

    #[test]
    fn the_documented_fields_parse_in_camel_case() {
        let text = br#"{
            "dmPolicy": "allowlist",
            "allowFrom": ["U1", "U2"],
            "groups": { "C1": {}, "C2": { "requireMention": false, "allowFrom": ["U3"] } },
            "pending": [{ "code": "ABCD2345", "userId": "U9", "chatId": "D9",
                          "createdAt": "2026-03-23T03:00:00Z", "expiresAt": "2026-03-23T04:00:00Z", "replies": 1 }],
            "approved": [{ "userId": "U2", "approvedAt": "2026-03-23T03:10:00Z" }]
        }"#;
        let f = parse(Path::new("a.json"), text).unwrap();
        assert_eq!(f.dm_policy, DmPolicy::Allowlist);
        assert!(f.allow_from.contains("U2"));
        assert!(f.groups["C1"].require_mention, "requireMention defaults to true");
        assert!(!f.groups["C2"].require_mention);
        assert_eq!(f.pending[0].user_id, "U9");
        assert_eq!(f.approved[0].user_id, "U2");
    }

    #[test]
    fn group_memory_is_per_user_unless_shared_and_observing_needs_it() {
        let text = br#"{"groups": {"C1": {}, "C2": {"memory": "shared", "observe": true}}}"#;
        let f = parse(Path::new("a.json"), text).unwrap();
        assert_eq!(
            (f.groups["C1"].memory, f.groups["C1"].observe),
            (GroupMemory::PerUser, false)
        );
        assert_eq!(
            (f.groups["C2"].memory, f.groups["C2"].observe),
            (GroupMemory::Shared, true)
        );
        // Written back without the defaults, as an operator would write it.
        let written = serde_json::to_string(&f.groups["C1"]).unwrap();
        assert!(!written.contains("memory") && !written.contains("observe"), "{written}");
        let err = parse(Path::new("/s/access.json"), br#"{"groups": {"C3": {"observe": true}}}"#).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("groups.C3.observe") && text.contains("shared"), "{text}");
        let err = parse(
            Path::new("/s/access.json"),
            br#"{"groups": {"C4": {"memory": "everyone"}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("groups.C4.memory"), "{err}");
    }

    #[test]
    fn a_misspelt_field_is_named_with_its_path() {
        let err = parse(
            Path::new("/s/access.json"),
            br#"{"groups": {"C1": {"requireMentions": false}}}"#,
        )
        .unwrap_err();
        let AccessFileError::Invalid(invalid) = &err else {
            panic!("{err}")
        };
        assert_eq!(invalid.field(), Some("groups.C1.requireMentions"));
        assert_eq!(invalid.at.map(|at| at.line), Some(1), "{err}");
        assert!(
            err.to_string()
                .starts_with("the access list /s/access.json, field `groups.C1.requireMentions`, line 1, column "),
            "{err}"
        );
        let err = parse(Path::new("a"), br#"{"dmPolicy": "everyone"}"#).unwrap_err();
        assert!(err.to_string().contains("dmPolicy"), "{err}");
        let err = parse(Path::new("a"), br#"["open"]"#).unwrap_err();
        assert!(err.to_string().contains("JSON object"), "{err}");
        let err = parse(Path::new("a"), b"").unwrap_err();
        assert!(err.to_string().contains("it is empty"), "{err}");
    }

    #[test]
    fn writes_are_private_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("channels/x/sessions/access.json");
        let mut f = AccessFile::default();
        f.allow_from.insert("U1".into());
        write(&path, &f).unwrap();
        assert_eq!(read(&path).unwrap(), Some(f));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
    }

    #[test]
    fn update_keeps_changes_of_other_writers_and_skips_no_op_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.json");
        update(&path, |f| f.allow_from.insert("A".into())).unwrap();
        update(&path, |f| f.allow_from.insert("B".into())).unwrap();
        let (_, now) = update(&path, |_| ()).unwrap();
        assert_eq!(
            now.allow_from.iter().map(String::as_str).collect::<Vec<_>>(),
            ["A", "B"]
        );
        fs::write(&path, b"{ not json").unwrap();
        assert!(matches!(update(&path, |_| ()), Err(AccessFileError::Invalid(_))));
        assert_eq!(
            fs::read(&path).unwrap(),
            b"{ not json",
            "an invalid file is never overwritten"
        );
    }

    #[test]
    fn a_missing_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(&dir.path().join("access.json")).unwrap(), None);
    }
}
