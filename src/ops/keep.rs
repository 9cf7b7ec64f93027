//! Keeping and deleting an operator's data: `forget` (everything about one
//! user, what `/session clear all confirm` does), `backup` (the whole state
//! folder as one `.tar.gz`) and `restore`. `forget` and `backup` run either
//! in the bot (through [`super::control`], with the bot's own per-user
//! locks) or in the CLI process while it holds the instance lock.
//!
//! A backup is consistent per user: each user's files are read under that
//! user's lock, so no append, compaction or clear is half-seen; every other
//! file is replaced atomically (a whole old or new version is read); and
//! a file that is only ever appended to (`*.jsonl`, the recall index's
//! `messages.tsv`, the broker's log) is cut after its last newline, so it
//! never holds a torn line.

use crate::channel_memory::ChannelMemory;
use crate::instance::{LOCK_FILE, SOCKET_FILE};
use anyhow::{Context as _, Result, bail};
use chrono::Utc;
use flate2::Compression;
use flate2::write::GzEncoder;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::fsutil::TEMP_PREFIX;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, SafeName, commands, report};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The manifest every backup carries at its root; restore requires it.
pub const MANIFEST: &str = "mnemo-backup.json";

type Memories = HashMap<String, ChannelMemory>;

/// The channel's STM handle: the running bot's (its locks) or a new one.
fn stm_for(state_root: &Path, channel: &str, memories: Option<&Memories>) -> Result<Stm> {
    if let Some(memory) = memories.and_then(|m| m.get(channel)) {
        return Ok(memory.stm.clone());
    }
    let layout = Layout::new(state_root, channel);
    if !layout.root().is_dir() {
        bail!(
            "no stored memory for channel `{channel}` under {}",
            state_root.display()
        );
    }
    let config = SessionConfig::load(&layout.config_path())?;
    Ok(Stm::new(layout, LockRegistry::new(), config.stm.fsync))
}

/// The channel's memory for acting as one of its users: the running bot's
/// (its locks, its store), or the channel's as configured (`database`:
/// Postgres).
pub fn memory_for(
    state_root: &Path,
    channel: &str,
    database: Option<&mnemo_pg::PgStore>,
    memories: Option<&Memories>,
) -> Result<ChannelMemory> {
    match memories.and_then(|m| m.get(channel)) {
        Some(memory) => Ok(memory.clone()),
        None => ChannelMemory::for_operator(state_root, channel, database),
    }
}

/// Runs `command` as `user` of `channel` (who must have something stored
/// in `memory`), exactly as if they had typed it; `doing` names it in
/// errors, which say where they looked.
pub async fn as_user(
    memory: &ChannelMemory,
    channel: &str,
    user: &str,
    command: &commands::SessionCommand,
    doing: &str,
) -> Result<commands::Reply> {
    let name = SafeName::of(user);
    let place = memory.store.place();
    let mut mine = memory
        .store
        .user(&name)
        .await
        .with_context(|| format!("{doing} user `{user}` of channel `{channel}` in {place}"))?;
    if mine.held().await?.count == 0 {
        bail!("nothing is stored about user `{user}` in channel `{channel}` (looked in {place})");
    }
    let caller = commands::Caller {
        user: &name,
        display_name: None,
        max_profile_chars: memory.config.ltm.max_profile_chars,
        here: None,
    };
    commands::try_execute(mine.as_mut(), caller, command, Utc::now())
        .await
        .with_context(|| format!("{doing} user `{user}` of channel `{channel}` in {place}"))
}

/// Deletes everything stored about `user` in `channel` (what `/session
/// clear all confirm` does); the line to show.
pub async fn forget(
    state_root: &Path,
    channel: &str,
    user: &str,
    database: Option<&mnemo_pg::PgStore>,
    memories: Option<&Memories>,
) -> Result<String> {
    // A linked account's memory is its home's: the person is forgotten
    // there, on every account, and the links go too.
    let people = crate::people::People::open(state_root, database);
    let account = crate::people::account_of(channel, user);
    let home = people
        .memory_of(&account)
        .await
        .context("reading the linked accounts")?;
    let forget = &commands::SessionCommand::ClearAllConfirmed;
    let raw = home.user.decode().unwrap_or_else(|| user.to_string());
    let memory = memory_for(state_root, &home.channel, database, memories)?;
    let reply = as_user(&memory, &home.channel, &raw, forget, "deleting").await?;
    let mut said = format!(
        "user `{user}` in channel `{channel}`, in {}: {}",
        memory.store.place(),
        reply.text
    );
    // The account's own memory, apart from its home's (empty unless it
    // was kept before linking).
    if home != account {
        let own = memory_for(state_root, channel, database, memories)?;
        let held = own.store.user(&account.user).await?.held().await?.count;
        if held > 0 {
            as_user(&own, channel, user, forget, "deleting").await?;
        }
    }
    let unlinked = people.forget(&home).await.context("removing the linked accounts")?;
    if unlinked > 0 {
        said.push_str(&format!(
            " Their memory was shared by {} linked accounts (kept with `{}`), now unlinked.",
            unlinked + 1,
            home.channel
        ));
    }
    tracing::info!(
        channel,
        user = %super::turn_log::user_hash(user),
        "sessions forget: everything stored about a user was deleted"
    );
    Ok(said)
}

/// The channels under `<state>/channels`, by their stored (decoded) name;
/// none if they cannot be listed.
fn channel_names(state_root: &Path) -> Vec<String> {
    mnemo_sessions::report::known_channels(state_root).unwrap_or_default()
}

/// Writes the backup to `out` (a temp file renamed into place); the line to show.
pub async fn backup(state_root: &Path, out: &Path, memories: Option<&Memories>) -> Result<String> {
    let out = std::path::absolute(out).with_context(|| format!("bad output path {}", out.display()))?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("backup");
    let partial = out.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    // Everything about every user is in there: owner-only, like the folder.
    let file = private_file(&partial).with_context(|| format!("cannot write {}", partial.display()))?;
    let mut writer = Writer {
        tar: tar::Builder::new(GzEncoder::new(file, Compression::default())),
        root: state_root.to_path_buf(),
        skip: [out.clone(), partial.clone()].into_iter().collect(),
        added: HashSet::new(),
        files: 0,
        bytes: 0,
    };
    let written = async {
        for channel in channel_names(state_root) {
            let stm = stm_for(state_root, &channel, memories)?;
            for user in report::known_users(stm.layout())? {
                let _guard = stm.lock(&user).await;
                for root in report::user_roots(stm.layout(), &user)? {
                    writer.add_tree(&root)?;
                }
            }
        }
        writer.add_tree(state_root)?;
        writer.finish(&partial, &out)
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    let (files, bytes) = written?;
    Ok(format!(
        "backup of {} written to {} ({files} files, {bytes} bytes before compression)",
        state_root.display(),
        out.display()
    ))
}

struct Writer {
    tar: tar::Builder<GzEncoder<File>>,
    root: PathBuf,
    /// The backup itself, when it is written inside the state folder.
    skip: HashSet<PathBuf>,
    /// Files and folders already in the archive.
    added: HashSet<PathBuf>,
    files: usize,
    bytes: u64,
}

impl Writer {
    /// Adds every regular file under `path` (a file or a folder) once.
    fn add_tree(&mut self, path: &Path) -> Result<()> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        if meta.is_dir() {
            // The folder itself first, so its mode (0700 for private ones)
            // comes back on restore; the root is the restore target itself.
            let relative = path.strip_prefix(&self.root).unwrap_or(path).to_path_buf();
            if !relative.as_os_str().is_empty() && self.added.insert(path.to_path_buf()) {
                let mut header = tar::Header::new_gnu();
                header.set_metadata(&meta);
                header.set_size(0);
                self.tar
                    .append_data(&mut header, &relative, std::io::empty())
                    .with_context(|| format!("cannot add {} to the backup", path.display()))?;
            }
            // Sorted by name, so a backup lists the same tree the same way.
            for child in mnemo_sessions::fsutil::list_dir(path, path)? {
                self.add_tree(&child.path())?;
            }
            return Ok(());
        }
        if !meta.is_file() || self.skipped(path) || !self.added.insert(path.to_path_buf()) {
            return Ok(());
        }
        self.files += 1;
        let mut data = Vec::new();
        match File::open(path).and_then(|mut f| f.read_to_end(&mut data)) {
            Ok(_) => {}
            // Replaced or removed since it was listed: its successor (if
            // any) is a whole file the walk reaches or not, never half.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        if append_only(path) {
            let whole = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            data.truncate(whole);
        }
        let relative = path.strip_prefix(&self.root).unwrap_or(path);
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&meta);
        header.set_size(data.len() as u64);
        self.tar
            .append_data(&mut header, relative, data.as_slice())
            .with_context(|| format!("cannot add {} to the backup", path.display()))?;
        self.bytes += data.len() as u64;
        Ok(())
    }

    fn skipped(&self, path: &Path) -> bool {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let top = path.parent() == Some(self.root.as_path());
        self.skip.contains(path)
            || name.starts_with(TEMP_PREFIX)
            || name.starts_with(".readyz-")
            || (top && name.starts_with(HANDOVER_PREFIX))
            || (top && (name == LOCK_FILE || name == SOCKET_FILE))
    }

    fn finish(mut self, partial: &Path, out: &Path) -> Result<(usize, u64)> {
        let files = self.files;
        let manifest = serde_json::json!({
            "format": 1,
            "createdAt": Utc::now().to_rfc3339(),
            "files": files,
            "bytes": self.bytes,
        })
        .to_string();
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o600);
        header.set_size(manifest.len() as u64);
        header.set_mtime(u64::try_from(Utc::now().timestamp()).unwrap_or(0));
        self.tar.append_data(&mut header, MANIFEST, manifest.as_bytes())?;
        let file = self.tar.into_inner()?.finish()?;
        file.sync_all()?;
        std::fs::rename(partial, out).with_context(|| format!("cannot move the backup to {}", out.display()))?;
        Ok((files, self.bytes))
    }
}

fn private_file(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Where a running bot writes a backup for the CLI to move into place: in
/// the state folder, the one place a hardened service may write.
pub fn handover_path(state_root: &Path) -> PathBuf {
    state_root.join(format!("{HANDOVER_PREFIX}{}.tar.gz", std::process::id()))
}

const HANDOVER_PREFIX: &str = ".backup-";

/// Files that are only appended to: a read may end inside a write.
fn append_only(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.ends_with(".jsonl") || name.ends_with(".tsv") || (name.starts_with("mnemo.log") && !name.ends_with(".gz"))
}

/// Unpacks `file` into `state_root`, which must be empty (but for the
/// instance lock) unless `force`, which first deletes what is there.
/// The caller holds the instance lock. The line to show.
pub fn restore(state_root: &Path, file: &Path, force: bool) -> Result<String> {
    let open = || -> Result<tar::Archive<flate2::read::GzDecoder<File>>> {
        let f = File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
        Ok(tar::Archive::new(flate2::read::GzDecoder::new(f)))
    };
    // First pass: a mnemo backup, every path relative and inside.
    let mut manifest = None;
    let mut files = 0usize;
    for entry in open()?.entries().context("not a .tar.gz backup")? {
        let mut entry = entry.context("the backup is damaged")?;
        let path = entry.path()?.into_owned();
        if path.is_absolute() || path.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            bail!("the backup holds an unsafe path `{}`; refusing it", path.display());
        }
        if path == Path::new(MANIFEST) {
            let mut text = String::new();
            entry.read_to_string(&mut text)?;
            manifest = Some(text);
        } else if entry.header().entry_type().is_file() {
            files += 1;
        }
    }
    if manifest.is_none() {
        bail!("{} is not a mnemo backup (no {MANIFEST} inside)", file.display());
    }
    let present: Vec<PathBuf> = mnemo_sessions::fsutil::list_dir(state_root, state_root)?
        .into_iter()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n != LOCK_FILE))
        .collect();
    if !present.is_empty() {
        if !force {
            bail!(
                "the state folder {} is not empty; restore into an empty folder (--state-dir), or pass --force to delete what is there first",
                state_root.display()
            );
        }
        for path in present {
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.with_context(|| format!("cannot delete {}", path.display()))?;
        }
    }
    let mut archive = open()?;
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.path()? == Path::new(MANIFEST) {
            continue;
        }
        entry
            .unpack_in(state_root)
            .with_context(|| format!("cannot restore into {}", state_root.display()))?;
    }
    Ok(format!(
        "restored {files} files from {} into {}",
        file.display(),
        state_root.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_cuts_the_logs_and_the_recall_index_at_their_last_newline_and_nothing_else() {
        for appended in [
            "stm/U1/messages.jsonl",
            "recall/U1/messages.tsv",
            "logs/mnemo.log",
            "logs/mnemo.log.2026-03-20",
        ] {
            assert!(append_only(Path::new(appended)), "{appended}");
        }
        for replaced in [
            "recall/U1/meta.json",
            "archive/U1/messages-1.jsonl.gz",
            "stm/U1/summary.md",
            "logs/mnemo.log.2026-03-19.gz",
        ] {
            assert!(!append_only(Path::new(replaced)), "{replaced}");
        }
    }
}
