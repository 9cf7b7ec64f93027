//! What is stored, and how much: per user and per channel (files, bytes,
//! messages, last activity), for `/session status` and
//! `mnemo sessions report`. It also owns the one definition of "everything
//! stored about a user" ([`user_roots`]) that status, export and
//! `/session clear all` share, so the three can never disagree.
//!
//! Read-only: it never writes, moves or deletes a file, and it never follows
//! a symbolic link out of the sessions folder.

use crate::archive;
use crate::bundles;
use crate::fsutil::{self, FileError};
use crate::layout::{Layout, SHARED_TOPICS};
use crate::names::SafeName;
use crate::stm::Stm;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Stm(#[from] crate::stm::StmError),
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
}

/// One user's footprint in one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserStorage {
    pub user: SafeName,
    /// Regular files under the user's folders (see [`user_roots`]),
    /// including their export bundles.
    pub files: u64,
    pub bytes: u64,
    /// Messages in the short-term log.
    pub stm_messages: usize,
    /// Messages in the archive (folded, pushed out or expired).
    pub archived_messages: usize,
    /// The newest message, in the log or the archive.
    pub last_activity: Option<DateTime<Utc>>,
}

/// One channel's footprint: every user's, plus the channel's own files
/// (config, access list, recall indexes, maintenance state, shared topics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelStorage {
    pub channel: SafeName,
    pub users: Vec<UserStorage>,
    pub channel_files: u64,
    pub channel_bytes: u64,
}

impl ChannelStorage {
    pub fn total_files(&self) -> u64 {
        self.channel_files + self.users.iter().map(|u| u.files).sum::<u64>()
    }

    pub fn total_bytes(&self) -> u64 {
        self.channel_bytes + self.users.iter().map(|u| u.bytes).sum::<u64>()
    }
}

impl std::fmt::Display for ChannelStorage {
    /// The table `mnemo sessions report` prints: one line per user, then the
    /// channel's own files and the total.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channel = self.channel.decode().unwrap_or_else(|| self.channel.to_string());
        writeln!(f, "channel {channel}: {} user(s)", self.users.len())?;
        for u in &self.users {
            let name = u.user.decode().unwrap_or_else(|| u.user.to_string());
            let last = u
                .last_activity
                .map_or("never".to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
            writeln!(
                f,
                "  {name}: {} file(s), {}, {} message(s) in STM, {} archived, last activity {last}",
                u.files,
                human_bytes(u.bytes),
                u.stm_messages,
                u.archived_messages
            )?;
        }
        writeln!(
            f,
            "  channel files: {} file(s), {}",
            self.channel_files,
            human_bytes(self.channel_bytes)
        )?;
        write!(
            f,
            "  total: {} file(s), {}",
            self.total_files(),
            human_bytes(self.total_bytes())
        )
    }
}

/// Every file or folder that holds data of `user` and nothing of anyone
/// else's: STM folder, profile, fact log, own topics, daily/weekly summaries, archive,
/// and the user's export bundles. (The user's recall index is derived from
/// these and handled by [`crate::recall`].)
/// A user whose encoded name is `_shared` has no topic folder: that one is
/// the operator's.
pub fn user_roots(layout: &Layout, user: &SafeName) -> Result<Vec<PathBuf>, ReportError> {
    let mut roots = vec![layout.stm_dir(user), layout.profile_path(user), layout.facts_path(user)];
    roots.extend(layout.user_topics_dir(user));
    roots.push(layout.documents_dir(user));
    roots.push(layout.kept_dir(user));
    roots.push(layout.versions_dir(user));
    roots.push(layout.summaries_dir(user));
    roots.push(layout.archive_dir(user));
    roots.push(layout.reminders_path(user));
    roots.push(layout.usage_path(user));
    roots.extend(bundles::user_exports(layout, user)?);
    Ok(roots)
}

/// Every regular file under `root` (itself, if it is a file), sorted, with
/// its size. Symbolic links are skipped, never followed: a planted link must
/// not pull a file from elsewhere into a user's status or export. A missing
/// root is empty.
pub fn files_under(root: &Path) -> Result<Vec<(PathBuf, u64)>, ReportError> {
    let mut out = Vec::new();
    walk(root, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(path: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<(), ReportError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(FileError::new("inspect", path, source).into()),
    };
    if meta.is_file() {
        out.push((path.to_path_buf(), meta.len()));
    }
    if !meta.is_dir() {
        return Ok(());
    }
    // Not below a state root: `meta` already said `path` is no link.
    for entry in fsutil::list_dir(path, path)? {
        walk(&entry.path(), out)?;
    }
    Ok(())
}

/// One user's storage in the channel of `stm`.
pub fn user_storage(stm: &Stm, user: &SafeName) -> Result<UserStorage, ReportError> {
    let layout = stm.layout();
    let (mut files, mut bytes) = (0, 0);
    for root in user_roots(layout, user)? {
        for (_, size) in files_under(&root)? {
            files += 1;
            bytes += size;
        }
    }
    let stm_log = stm.read_all(user)?.records;
    let archived = archive::read_all(layout, user)?;
    let last_activity = stm_log.iter().chain(archived.iter()).map(|r| r.ts).max();
    Ok(UserStorage {
        user: user.clone(),
        files,
        bytes,
        stm_messages: stm_log.len(),
        archived_messages: archived.len(),
        last_activity,
    })
}

/// Every user of the channel, with the channel's own files.
pub fn channel_storage(stm: &Stm) -> Result<ChannelStorage, ReportError> {
    let layout = stm.layout();
    let users = known_users(layout)?
        .iter()
        .map(|user| user_storage(stm, user))
        .collect::<Result<Vec<_>, _>>()?;
    let (mut channel_files, mut channel_bytes) = (0, 0);
    let shared = [
        layout.config_path(),
        layout.access_path(),
        layout.maintenance_state_path(),
        layout.recall_root(),
        layout.shared_topics_dir(),
    ];
    for root in shared {
        for (_, size) in files_under(&root)? {
            channel_files += 1;
            channel_bytes += size;
        }
    }
    Ok(ChannelStorage {
        channel: layout.channel().clone(),
        users,
        channel_files,
        channel_bytes,
    })
}

/// The channels with a folder under `<state>/channels`, by their decoded
/// name, sorted; none when the state folder has no channels yet.
pub fn known_channels(state_root: &Path) -> Result<Vec<String>, FileError> {
    let dir = Layout::channels_root(state_root);
    let mut names: Vec<String> = fsutil::list_dir(&dir, &dir)?
        .into_iter()
        .filter_map(|e| e.file_name().to_str().and_then(SafeName::from_encoded))
        .filter_map(|name| name.decode())
        .collect();
    names.sort();
    Ok(names)
}

/// Every user with any data in the channel: an STM folder, a profile, a fact log, own
/// topics, summaries, an archive or an export. Names that are not valid
/// encodings (stray files an operator dropped in) are ignored.
pub fn known_users(layout: &Layout) -> Result<BTreeSet<SafeName>, ReportError> {
    let mut users = BTreeSet::new();
    for dir in [
        layout.stm_root(),
        layout.topics_root(),
        summaries_root(layout),
        layout.archive_root(),
    ] {
        for name in dir_names(&dir, true)? {
            if dir == layout.topics_root() && name == SHARED_TOPICS {
                continue;
            }
            users.extend(SafeName::from_encoded(&name));
        }
    }
    for name in dir_names(&layout.profiles_dir(), false)? {
        users.extend(name.strip_suffix(".md").and_then(SafeName::from_encoded));
    }
    for name in dir_names(&layout.facts_dir(), false)? {
        users.extend(name.strip_suffix(".jsonl").and_then(SafeName::from_encoded));
    }
    // A user may have only reminders (a `/session remind` is not stored).
    for name in dir_names(&layout.reminders_root(), false)? {
        users.extend(name.strip_suffix(".json").and_then(SafeName::from_encoded));
    }
    for name in dir_names(&layout.exports_dir(), false)? {
        users.extend(bundles::owner_of(&name));
    }
    Ok(users)
}

/// `summaries/`, the parent of every user's summaries folder. `Layout` has
/// no accessor for it, so it is derived from one (any name will do).
pub(crate) fn summaries_root(layout: &Layout) -> PathBuf {
    let any = layout.summaries_dir(&SafeName::of("%"));
    any.parent().map(Path::to_path_buf).unwrap_or(any)
}

/// Names of the folders (`dirs`) or files (`!dirs`) directly in `dir`.
fn dir_names(dir: &Path, dirs: bool) -> Result<Vec<String>, ReportError> {
    let mut names = Vec::new();
    for entry in fsutil::list_dir(dir, dir)? {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir == dirs {
            names.extend(entry.file_name().to_str().map(str::to_owned));
        }
    }
    Ok(names)
}

/// Bytes as people read them: `812 B`, `4.2 KB`, `1.3 MB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;
    use crate::locks::LockRegistry;
    use crate::record::{Record, Role};

    fn rec(ts: &str, text: &str) -> Record {
        Record {
            ts: DateTime::parse_from_rfc3339(ts).unwrap().with_timezone(&Utc),
            role: Role::User,
            text: text.into(),
            msg_id: text.into(),
            channel: "slack".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        }
    }

    #[tokio::test]
    async fn user_storage_counts_only_that_users_files_and_messages() {
        let dir = tempfile::tempdir().unwrap();
        let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
        let layout = stm.layout().clone();
        let (a, b) = (SafeName::of("alice"), SafeName::of("bob"));
        stm.append(&a, &rec("2026-03-01T10:00:00Z", "a1")).await.unwrap();
        stm.append(&b, &rec("2026-03-01T11:00:00Z", "b1")).await.unwrap();
        stm.append(&b, &rec("2026-03-01T12:00:00Z", "b2")).await.unwrap();
        archive::write_batch(&layout, &a, &[rec("2026-03-02T09:00:00Z", "a0")]).unwrap();
        fs::create_dir_all(layout.profiles_dir()).unwrap();
        fs::write(layout.profile_path(&a), "---\n---\n\n- likes tea\n").unwrap();

        let alice = user_storage(&stm, &a).unwrap();
        assert_eq!((alice.files, alice.stm_messages, alice.archived_messages), (3, 1, 1));
        assert_eq!(alice.last_activity, Some(rec("2026-03-02T09:00:00Z", "").ts));
        let bob = user_storage(&stm, &b).unwrap();
        assert_eq!((bob.files, bob.stm_messages, bob.archived_messages), (1, 2, 0));
        assert_eq!(bob.bytes, fs::metadata(layout.messages_path(&b)).unwrap().len());

        let channel = channel_storage(&stm).unwrap();
        assert_eq!(
            channel.users.iter().map(|u| u.user.clone()).collect::<Vec<_>>(),
            vec![a, b]
        );
        assert_eq!(channel.total_files(), 4);
    }

    #[test]
    fn shared_topics_and_stray_names_are_not_users() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        fs::create_dir_all(layout.shared_topics_dir()).unwrap();
        fs::create_dir_all(layout.stm_root().join("not.a.user")).unwrap();
        fs::create_dir_all(summaries_root(&layout).join("carol")).unwrap();
        fs::create_dir_all(layout.reminders_root()).unwrap();
        fs::write(layout.reminders_path(&SafeName::of("dave")), "{}").unwrap();
        fs::write(layout.reminders_root().join(".tmp-x.json"), "{}").unwrap();
        let users = known_users(&layout).unwrap();
        assert_eq!(
            users.into_iter().collect::<Vec<_>>(),
            vec![SafeName::of("carol"), SafeName::of("dave")],
            "a user with only reminders is a user"
        );
    }

    #[test]
    fn bytes_read_like_people_write_them() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(4300), "4.2 KB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MB");
    }
}
