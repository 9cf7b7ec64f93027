//! The long-term memory index `ltm/index.json`: one entry per profile and
//! topic note (type, id, owner, path, tags, updated, text) for tag search and
//! case-insensitive text search.
//!
//! The index is derived data; the markdown files are the truth. It is
//! rebuilt when missing or corrupt, and an owner's entries are re-read when
//! they do not match that owner's files on disk (a file changed, added or
//! gone since it was indexed), always with a warning. Search results are
//! filtered to the caller's own entries plus the operator's `_shared` notes;
//! no other user's entry can come out of this module. It never writes a
//! markdown file.

use crate::frontmatter;
use crate::fsutil::atomic_write;
use crate::layout::{Layout, SHARED_TOPICS};
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::UNIX_EPOCH;

/// Bumped when the entry shape changes; an index of another version is rebuilt.
pub const VERSION: u32 = 1;

/// Characters of a file's body kept for text search.
const TEXT_CHARS: usize = 8_000;

/// Serialises read-modify-write of index files inside this process, so two
/// users' compactions cannot lose each other's update. (Another process
/// writing the same index could; the per-owner freshness check then repairs
/// it on the next search.)
static INDEX_WRITE: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Profile,
    Topic,
}

/// One indexed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// The topic's slug, or the user's encoded name for a profile.
    pub id: String,
    /// Encoded name of the owning user (the folder's name, never the
    /// frontmatter's claim); `_shared` for operator notes.
    pub owner: String,
    /// True only for notes in `ltm/topics/_shared/`: the one thing besides
    /// `owner` that lets an entry reach a caller. A user whose id encodes to
    /// `_shared` still owns a non-shared profile.
    pub shared: bool,
    /// Relative to the channel's sessions folder, `/`-separated.
    pub path: String,
    pub title: String,
    pub tags: Vec<String>,
    pub updated: Option<DateTime<Utc>>,
    /// The body (clipped), searched case-insensitively.
    pub text: String,
    /// The file's frontmatter did not parse; kept so it is not re-read on
    /// every search, never returned by one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
    /// What the file looked like when indexed, to notice it changed.
    pub stamp: Stamp,
}

/// Modification time and length of an indexed file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamp {
    pub mtime_ns: u64,
    pub len: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexFile {
    pub version: u32,
    pub entries: Vec<IndexEntry>,
}

/// A search: entries must carry every tag (case-insensitive) and contain
/// every whitespace-separated word of `text` (case-insensitive) in their
/// title, id, tags or text. An empty query matches everything visible.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub tags: Vec<String>,
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}; check the disk and the folder's permissions")]
    Write { path: PathBuf, source: io::Error },
}

/// Entries visible to `caller` that match `query`, newest first. Re-reads
/// the caller's and the shared files first if the index does not match them.
pub fn search(layout: &Layout, caller: &SafeName, query: &Query) -> Result<Vec<IndexEntry>, IndexError> {
    let _write = INDEX_WRITE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut index = load_locked(layout)?;
    let mut changed = false;
    for owner in [Owner::User(caller.clone()), Owner::Shared] {
        let on_disk = scan(layout, &owner)?;
        if stamps(index.entries.iter().filter(|e| owner.owns(e))) != stamps(on_disk.iter()) {
            tracing::warn!(index = %layout.index_path().display(), owner = %owner.name(), "index stale; re-reading that owner's files");
            replace_owner(&mut index, &owner, layout)?;
            changed = true;
        }
    }
    if changed {
        save_or_warn(layout, &index);
    }
    let tags: Vec<String> = query.tags.iter().map(|t| t.trim().to_lowercase()).collect();
    let words: Vec<String> = query.text.split_whitespace().map(str::to_lowercase).collect();
    let mut hits: Vec<IndexEntry> = index
        .entries
        .into_iter()
        .filter(|e| !e.unreadable && (e.shared || e.owner == caller.as_str()))
        .filter(|e| tags.iter().all(|t| e.tags.iter().any(|et| et.to_lowercase() == *t)))
        .filter(|e| {
            let hay = format!("{}\n{}\n{}\n{}", e.title, e.id, e.tags.join(" "), e.text).to_lowercase();
            words.iter().all(|w| hay.contains(w.as_str()))
        })
        .collect();
    hits.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| a.path.cmp(&b.path)));
    Ok(hits)
}

/// Re-reads one user's profile and topic notes into the index. Called after
/// every profile or topic write.
pub fn refresh_owner(layout: &Layout, owner: &SafeName) -> Result<(), IndexError> {
    let _write = INDEX_WRITE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut index = load_locked(layout)?;
    replace_owner(&mut index, &Owner::User(owner.clone()), layout)?;
    save(layout, &index)
}

/// Drops every entry of `owner` (`/session clear all`). Delete the files
/// first: entries of files still on disk come back on the next search.
pub fn remove_owner(layout: &Layout, owner: &SafeName) -> Result<(), IndexError> {
    let _write = INDEX_WRITE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut index = load_locked(layout)?;
    let owner = Owner::User(owner.clone());
    index.entries.retain(|e| !owner.owns(e));
    save(layout, &index)
}

/// Rebuilds the whole index from the markdown files and saves it (for
/// `mnemo sessions maintain`; searches rebuild on their own).
pub fn rebuild(layout: &Layout) -> Result<IndexFile, IndexError> {
    let _write = INDEX_WRITE.lock().unwrap_or_else(PoisonError::into_inner);
    let index = read_all_owners(layout)?;
    save(layout, &index)?;
    Ok(index)
}

/// The index as stored, rebuilt (with a warning) if missing, unreadable
/// JSON, or of another version.
pub fn load(layout: &Layout) -> Result<IndexFile, IndexError> {
    let _write = INDEX_WRITE.lock().unwrap_or_else(PoisonError::into_inner);
    load_locked(layout)
}

fn load_locked(layout: &Layout) -> Result<IndexFile, IndexError> {
    let path = layout.index_path();
    let bytes = match crate::fsutil::read_nofollow(layout.state_root(), &path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Normal on a fresh install: nothing to warn the operator about.
            tracing::debug!(index = %path.display(), "no index yet; building it from the markdown files");
            return rebuild_locked(layout);
        }
        Err(source) => return Err(IndexError::Read { path, source }),
    };
    match serde_json::from_slice::<IndexFile>(&bytes) {
        Ok(index) if index.version == VERSION => Ok(index),
        Ok(index) => {
            tracing::warn!(index = %path.display(), version = index.version, "index of another version; rebuilding it");
            rebuild_locked(layout)
        }
        Err(e) => {
            tracing::warn!(index = %path.display(), error = %e, "index corrupt; rebuilding it from the markdown files");
            rebuild_locked(layout)
        }
    }
}

fn rebuild_locked(layout: &Layout) -> Result<IndexFile, IndexError> {
    let index = read_all_owners(layout)?;
    save_or_warn(layout, &index);
    Ok(index)
}

fn read_all_owners(layout: &Layout) -> Result<IndexFile, IndexError> {
    let mut owners = vec![Owner::Shared];
    for name in md_stems(&layout.profiles_dir())? {
        owners.push(Owner::User(name));
    }
    for dir in subdirs(&layout.topics_root())? {
        if dir.as_str() != SHARED_TOPICS {
            owners.push(Owner::User(dir));
        }
    }
    owners.sort_by(|a, b| a.name().cmp(b.name()));
    owners.dedup_by(|a, b| a.name() == b.name() && a.is_shared() == b.is_shared());
    let mut index = IndexFile {
        version: VERSION,
        entries: Vec::new(),
    };
    for owner in &owners {
        index.entries.extend(read_entries(layout, owner)?);
    }
    Ok(index)
}

fn replace_owner(index: &mut IndexFile, owner: &Owner, layout: &Layout) -> Result<(), IndexError> {
    index.entries.retain(|e| !owner.owns(e));
    index.entries.extend(read_entries(layout, owner)?);
    Ok(())
}

/// Searching must not fail because the derived index cannot be stored
/// (read-only disk, full disk): the fresh entries are used anyway.
fn save_or_warn(layout: &Layout, index: &IndexFile) {
    if let Err(e) = save(layout, index) {
        tracing::warn!(error = %e, "index not saved; searching from the markdown files read just now");
    }
}

fn save(layout: &Layout, index: &IndexFile) -> Result<(), IndexError> {
    let path = layout.index_path();
    // Plain data with string keys: serialising cannot fail.
    let json = serde_json::to_vec_pretty(index).unwrap_or_default();
    atomic_write(layout.state_root(), &path, &json).map_err(|source| IndexError::Write { path, source })
}

/// Whose files an entry describes.
#[derive(Clone, Debug)]
enum Owner {
    User(SafeName),
    Shared,
}

impl Owner {
    fn owns(&self, e: &IndexEntry) -> bool {
        match self {
            Owner::User(u) => !e.shared && e.owner == u.as_str(),
            Owner::Shared => e.shared,
        }
    }

    fn name(&self) -> &str {
        match self {
            Owner::User(u) => u.as_str(),
            Owner::Shared => SHARED_TOPICS,
        }
    }

    fn is_shared(&self) -> bool {
        matches!(self, Owner::Shared)
    }
}

/// A file of an owner on disk: kind, id, path, stamp.
struct FileRef {
    kind: EntryKind,
    id: SafeName,
    path: PathBuf,
    stamp: Stamp,
}

/// The owner's files as they are now (metadata only).
fn scan(layout: &Layout, owner: &Owner) -> Result<Vec<FileRef>, IndexError> {
    let mut files = Vec::new();
    let topics_dir = match owner {
        Owner::User(user) => {
            let path = layout.profile_path(user);
            if let Some(stamp) = stamp_of(&path)? {
                files.push(FileRef {
                    kind: EntryKind::Profile,
                    id: user.clone(),
                    path,
                    stamp,
                });
            }
            layout.user_topics_dir(user)
        }
        Owner::Shared => Some(layout.shared_topics_dir()),
    };
    if let Some(dir) = topics_dir {
        for slug in md_stems(&dir)? {
            let path = dir.join(format!("{slug}.md"));
            if let Some(stamp) = stamp_of(&path)? {
                files.push(FileRef {
                    kind: EntryKind::Topic,
                    id: slug,
                    path,
                    stamp,
                });
            }
        }
    }
    Ok(files)
}

fn stamps<'a, T: HasStamp + 'a>(items: impl Iterator<Item = &'a T>) -> Vec<(String, Stamp)> {
    let mut out: Vec<(String, Stamp)> = items.map(|i| (i.rel_key(), i.stamp())).collect();
    out.sort();
    out
}

trait HasStamp {
    fn rel_key(&self) -> String;
    fn stamp(&self) -> Stamp;
}

impl HasStamp for IndexEntry {
    fn rel_key(&self) -> String {
        format!("{:?}/{}", self.kind, self.id)
    }
    fn stamp(&self) -> Stamp {
        self.stamp
    }
}

impl HasStamp for FileRef {
    fn rel_key(&self) -> String {
        format!("{:?}/{}", self.kind, self.id)
    }
    fn stamp(&self) -> Stamp {
        self.stamp
    }
}

/// Reads the owner's files into entries. A file that does not parse is
/// indexed as unreadable (and warned about) rather than failing the index.
fn read_entries(layout: &Layout, owner: &Owner) -> Result<Vec<IndexEntry>, IndexError> {
    #[derive(Deserialize)]
    struct Loose {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default)]
        updated: Option<DateTime<Utc>>,
    }
    let mut out = Vec::new();
    for file in scan(layout, owner)? {
        let text = match crate::fsutil::read_to_string_nofollow(layout.state_root(), &file.path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(IndexError::Read {
                    path: file.path,
                    source,
                });
            }
        };
        let rel = file.path.strip_prefix(layout.root()).unwrap_or(&file.path);
        let mut entry = IndexEntry {
            kind: file.kind,
            id: file.id.to_string(),
            owner: owner.name().to_string(),
            shared: owner.is_shared(),
            path: rel.to_string_lossy().replace('\\', "/"),
            title: file.id.decode().unwrap_or_else(|| file.id.to_string()),
            tags: Vec::new(),
            updated: None,
            text: String::new(),
            unreadable: false,
            stamp: file.stamp,
        };
        match frontmatter::parse::<Loose>(&file.path, &text) {
            Ok(doc) => {
                entry.title = doc.meta.title.filter(|t| !t.is_empty()).unwrap_or(entry.title);
                entry.tags = doc.meta.tags;
                entry.updated = doc.meta.updated;
                entry.text = doc.body.chars().take(TEXT_CHARS).collect();
            }
            Err(e) => {
                tracing::warn!(error = %e, "not indexed: fix the file's frontmatter");
                entry.unreadable = true;
            }
        }
        out.push(entry);
    }
    Ok(out)
}

fn stamp_of(path: &Path) -> Result<Option<Stamp>, IndexError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            Ok(Some(Stamp {
                mtime_ns,
                len: meta.len(),
            }))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(IndexError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// `<name>.md` files of a folder whose stem is a valid encoded name (temp
/// files and strays are skipped).
fn md_stems(dir: &Path) -> Result<Vec<SafeName>, IndexError> {
    Ok(list(dir)?
        .into_iter()
        .filter(|(_, is_dir)| !is_dir)
        .filter_map(|(name, _)| name.strip_suffix(".md").and_then(SafeName::from_encoded))
        .collect())
}

fn subdirs(dir: &Path) -> Result<Vec<SafeName>, IndexError> {
    Ok(list(dir)?
        .into_iter()
        .filter(|(_, is_dir)| *is_dir)
        .filter_map(|(name, _)| SafeName::from_encoded(&name))
        .collect())
}

fn list(dir: &Path) -> Result<Vec<(String, bool)>, IndexError> {
    let read_err = |source| IndexError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(read_err(source)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        let is_dir = entry.file_type().map_err(read_err)?.is_dir();
        if let Ok(name) = entry.file_name().into_string() {
            out.push((name, is_dir));
        }
    }
    out.sort();
    Ok(out)
}
