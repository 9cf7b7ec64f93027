//! One user's recall index on disk, opened rather than loaded:
//! `recall/<user>/messages.tsv` (every message of the user's history, one
//! line each in the order said, with its search terms already stemmed: the
//! line format is [`super::line`]'s tab-separated fields),
//! `recall/<user>/segment.bin` (the term dictionary, postings, lengths and
//! keys of the messages of `messages.tsv` up to the byte it `covers`:
//! [`super::segment`]) and `recall/<user>/meta.json` (format version and
//! the archive batches already read). Opening reads the segment's header,
//! lengths and sparse tables, then indexes in memory the lines after what
//! it covers (the tail); once the tail holds [`merge_at`] messages it is
//! merged into a new segment ([`super::segwrite`]), like an LSM's level.
//! An index stored under the file's former name, `messages.jsonl` (from
//! when lines were JSON), is renamed in place the first time it is opened
//! (and then rebuilt: it is of an older version).
//!
//! Derived data, rebuilt from STM and the archive whenever it is missing,
//! of another version or corrupt (a segment that does not add up, or whose
//! reads fail during a turn): a broken index never fails a turn, it costs
//! one rebuild and one warning (with progress logged for a long history).
//! A crash mid-append leaves a line without its newline after what the
//! segment covers: it is cut off at the next open, and the message comes
//! back from the short-term log like any other not yet indexed.
//! Messages are added as they are appended
//! (one unsynced `write`: cheaper than the fsync'ed STM append it follows);
//! archive batches written since the last load are caught up at load. The
//! markdown sources are not stored here: [`super::sources`] re-reads them.
//! With `recall.embeddings` on, the folder also holds `vectors.bin`, owned
//! by [`super::vectors`] and loaded on first need (a rebuild here leaves it
//! alone: its keys are the same).

use super::bm25::{Bm25, Source};
use super::line::{self, key_of_message, line_of, message_key};
use super::segment::Segment;
use super::segwrite::Builder;
use super::sources::{FileSet, Spec, user_specs};
use super::tokenize::{self, QueryTermsCache};
use super::vectors::{Vectors, file_in};
use crate::archive;
use crate::fsutil::{
    FileError, atomic_write, create_new_private, open_append_nofollow, open_nofollow, read_nofollow, refuse_links,
    remove_if_exists, remove_nofollow, replace_unsynced, unique_temp_path,
};
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::Stm;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bumped when the stored shape, the key or the tokenizer changes: another
/// version is rebuilt. 2: lines carry their terms.
/// 3: lines are
/// [`super::line`]'s tab-separated fields instead of JSON. 4: a segment
/// (`segment.bin`) indexes them, opened instead of loaded.
const VERSION: u32 = 4;
const MESSAGES: &str = "messages.tsv";
const SEGMENT: &str = "segment.bin";
/// `MESSAGES` before the file was named for its tab-separated lines: state
/// folders from then are migrated by [`migrate_former_name`].
const FORMER_MESSAGES: &str = "messages.jsonl";
const META: &str = "meta.json";

/// One of the files above in a recall folder (`Layout::recall_dir`).
#[allow(
    clippy::disallowed_methods,
    reason = "the recall store names the files of its own folder"
)]
fn in_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error(transparent)]
    Stm(#[from] crate::stm::StmError),
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Meta {
    version: u32,
    /// File names of the archive batches whose records are in
    /// `messages.tsv`.
    archives: Vec<String>,
}

impl Meta {
    /// Whether the index must survive a crash: only the archive batches it
    /// lists are not caught up at load (STM records always are), so without
    /// any a crash costs at most a rebuild, and a new user's first turn does
    /// not wait for three fsyncs.
    fn needs_durability(&self) -> bool {
        !self.archives.is_empty()
    }
}

/// Messages between two progress lines of a rebuild at load.
const PROGRESS_EVERY: u64 = 100_000;

/// Tail messages that make a new segment: an eighth of the segment's,
/// within 1,024 and 8,192 (so a merge rewrites at most ~9 times what it
/// adds, and the tail in memory stays small).
pub fn merge_at(base: u32) -> usize {
    (base as usize / 8).clamp(1024, 8192)
}

/// A user's index, opened.
#[derive(Debug)]
pub struct UserIndex {
    pub bm25: Bm25,
    pub files: FileSet,
    /// Appends go here; `None` when the folder cannot be written (the index
    /// then lives in memory only, and is rebuilt at the next load).
    log: Option<Arc<File>>,
    dir: PathBuf,
    /// The state root, below which nothing is touched through a link.
    root: PathBuf,
    /// Dense vectors (`vectors.bin`), loaded on first use: only with
    /// `recall.embeddings` on.
    vectors: Option<Vectors>,
    /// The query terms of texts recent turns met (see [`QueryTermsCache`]).
    pub query_terms: QueryTermsCache,
    /// The user's markdown sources, whose paths every turn checks: built
    /// once, not for every turn.
    specs: Vec<Spec>,
    /// The length of `messages.tsv` (where the next line goes) and where
    /// each of the tail's messages' lines starts.
    log_len: u64,
    tail_offsets: Vec<u64>,
    /// Whether a new segment is synced before it replaces the old (see
    /// [`Meta::needs_durability`]).
    durable: bool,
}

impl UserIndex {
    /// Loads the user's index, catching up on archive batches and STM
    /// records it lacks, or rebuilds it (with one warning) if it is not
    /// usable. Never fails: if even the rebuild cannot be stored, the index
    /// is built in memory from the files.
    pub fn open(stm: &Stm, user: &SafeName) -> UserIndex {
        let dir = stm.layout().recall_dir(user);
        let loaded = match migrate_former_name(stm.layout().state_root(), &dir) {
            Ok(()) => load(stm, user, &dir),
            Err(e) => Err(Stale::Broken(format!(
                "{FORMER_MESSAGES} not renamed to {MESSAGES}: {e}"
            ))),
        };
        match loaded {
            Ok(index) => return index,
            Err(Stale::Missing) => {}
            Err(Stale::Broken(reason)) => {
                tracing::warn!(user = %user.log_id(), index = %dir.display(), %reason, "recall index unusable; rebuilding it from the user's files")
            }
        }
        let mut logged = 0;
        let mut progress = |written: u64| {
            if written >= logged + PROGRESS_EVERY {
                logged = written;
                tracing::info!(user = %user.log_id(), messages = written, "rebuilding the recall index");
            }
        };
        match rebuild(stm, user, &mut progress)
            .map_err(|e| Stale::Broken(e.to_string()))
            .and_then(|_| load(stm, user, &dir))
        {
            Ok(index) => index,
            Err(e) => {
                let reason = match e {
                    Stale::Missing => "missing right after the rebuild".to_string(),
                    Stale::Broken(reason) => reason,
                };
                tracing::warn!(user = %user.log_id(), index = %dir.display(), %reason, "recall index cannot be stored; searching from memory this time");
                in_memory(stm, user, dir)
            }
        }
    }

    /// Indexes one message (once: a repeat is ignored) and appends it to
    /// the stored log. A failed write is logged and forces a rebuild at the
    /// next load, so nothing is silently missing.
    pub fn add_record(&mut self, record: &Record) {
        let key = message_key(record);
        if self.bm25.contains(key) {
            return;
        }
        let mut line = Vec::with_capacity(record.text.len() * 2 + 64);
        let terms = line_of(record, &mut line);
        self.bm25.add_terms(
            key,
            record.ts,
            Source::of_role(record.role),
            record.text.clone(),
            &terms,
        );
        let Some(log) = self.log.as_deref() else { return };
        if let Err(e) = (&*log).write_all(&line) {
            tracing::warn!(index = %self.dir.display(), error = %e, "recall index append failed; it will be rebuilt at the next load");
            self.log = None;
            let _ = remove_nofollow(&self.root, &in_dir(&self.dir, META));
            return;
        }
        self.tail_offsets.push(self.log_len);
        self.log_len += line.len() as u64;
        if self.bm25.tail_len() >= merge_at(self.bm25.base()) {
            self.merge_tail();
        }
    }

    /// Writes the segment and the tail's messages as one new segment and
    /// stands the index on it (the tail keeps the markdown sources). A
    /// failure is logged and changes nothing: the tail stays in memory and
    /// the merge is tried again at the next open.
    fn merge_tail(&mut self) {
        if self.log.is_none() || self.tail_offsets.len() != self.bm25.tail_len() {
            return;
        }
        let merged = (|| -> Result<(Segment, Vec<u32>), String> {
            let target = in_dir(&self.dir, SEGMENT);
            let mut builder = match self.bm25.segment() {
                Some(seg) => Builder::over(&self.root, &target, seg, &self.bm25.lens[..self.bm25.base() as usize])
                    .map_err(|e| e.to_string())?,
                None => Builder::new(&self.root, &target),
            };
            for (doc, &offset) in self.bm25.tail_messages().zip(&self.tail_offsets) {
                builder
                    .add(doc.key, offset, &tokenize::terms(&doc.text))
                    .map_err(|e| e.to_string())?;
            }
            builder.finish(self.log_len, self.durable).map_err(|e| e.to_string())?;
            open_segment(&self.root, &self.dir, self.log.clone())
        })();
        match merged {
            Ok(seg) => {
                self.bm25.rebase(Some(seg));
                self.tail_offsets.clear();
            }
            Err(reason) => {
                tracing::warn!(index = %self.dir.display(), %reason, "recall tail not merged into a new segment; it stays in memory")
            }
        }
    }

    /// True when the stored index turned out unreadable during a search:
    /// it is dropped (see [`UserIndex::discard`]) and rebuilt at the next
    /// open.
    pub fn is_broken(&self) -> bool {
        self.bm25.is_broken()
    }

    /// Marks the stored index for a rebuild at the next open (its meta
    /// removed), with a warning.
    pub fn discard(self) {
        tracing::warn!(index = %self.dir.display(), "recall index unreadable; it is rebuilt at the next use");
        let _ = remove_nofollow(&self.root, &in_dir(&self.dir, META));
    }

    /// Bytes this index keeps in memory, roughly (for the cache's budget).
    pub fn resident_bytes(&self) -> usize {
        self.bm25.resident_bytes()
            + self.tail_offsets.capacity() * 8
            + self.vectors.as_ref().map_or(0, Vectors::resident_bytes)
    }

    /// The BM25 index and the vectors (loaded from `vectors.bin` on first
    /// use; in memory only when the folder cannot be written).
    pub fn with_vectors(&mut self) -> (&Bm25, &mut Vectors) {
        let stored = self.log.is_some();
        let (root, dir) = (&self.root, &self.dir);
        let vectors = self.vectors.get_or_insert_with(|| {
            if stored {
                Vectors::load(file_in(root, dir))
            } else {
                Vectors::in_memory()
            }
        });
        (&self.bm25, vectors)
    }

    /// Deletes the stored vectors (they are computed again).
    pub fn drop_vectors(&mut self) {
        self.vectors = None;
        let file = file_in(&self.root, &self.dir);
        let _ = remove_nofollow(&file.root, &file.path);
    }

    /// Brings the markdown sources up to date (see [`super::sources`]).
    pub fn refresh_files(&mut self) {
        self.files.refresh(&mut self.bm25, &self.specs);
    }
}

enum Stale {
    Missing,
    Broken(String),
}

/// Renames an index stored under [`FORMER_MESSAGES`] to [`MESSAGES`] in the
/// same folder (atomic), so the load that follows reads it as it is. Does
/// nothing when the new name exists or the former one does not. An error
/// leaves the folder as it was; the caller rebuilds, as for any unusable
/// index (derived data: nothing is lost).
fn migrate_former_name(root: &Path, dir: &Path) -> io::Result<()> {
    let (former, current) = (in_dir(dir, FORMER_MESSAGES), in_dir(dir, MESSAGES));
    if exists(&current)? || !exists(&former)? {
        return Ok(());
    }
    // Never through a linked folder; a link at the former name is renamed,
    // not followed, and the load refuses it.
    refuse_links(root, dir)?;
    match fs::rename(&former, &current) {
        Ok(()) => {
            tracing::info!(index = %dir.display(), "recall index renamed from {FORMER_MESSAGES} to {MESSAGES}");
            Ok(())
        }
        // Another opener of the same folder renamed it first.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether something (a file, a folder, a link) is at `path`.
fn exists(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn load(stm: &Stm, user: &SafeName, dir: &Path) -> Result<UserIndex, Stale> {
    let meta_path = in_dir(dir, META);
    let root = stm.layout().state_root();
    let meta: Meta = match read_nofollow(root, &meta_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Stale::Broken(format!("meta.json: {e}")))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Stale::Missing),
        Err(e) => return Err(Stale::Broken(format!("meta.json: {e}"))),
    };
    if meta.version != VERSION {
        return Err(Stale::Broken(format!(
            "version {} (this build uses {VERSION})",
            meta.version
        )));
    }
    let on_disk = archive_names(stm, user).map_err(|e| Stale::Broken(e.to_string()))?;
    // By set: a long history has tens of thousands of batches.
    let present: HashSet<&String> = on_disk.iter().collect();
    if let Some(gone) = meta.archives.iter().find(|n| !present.contains(n)) {
        return Err(Stale::Broken(format!("archive batch {gone} is gone")));
    }
    let messages_path = in_dir(dir, MESSAGES);
    // One handle appends lines and reads them back for the segment (an
    // open index costs two descriptors: this and the segment's); read
    // only when the folder cannot be written.
    let log = open_append_nofollow(root, &messages_path).map(Arc::new).ok();
    let (seg, lens) = open_segment(root, dir, log.clone()).map_err(Stale::Broken)?;
    let covers = seg.covers;
    let mut index = UserIndex {
        bm25: Bm25::over(seg, lens),
        files: FileSet::default(),
        log: None,
        dir: dir.to_path_buf(),
        root: root.to_path_buf(),
        vectors: None,
        query_terms: QueryTermsCache::default(),
        specs: user_specs(stm.layout(), user),
        log_len: covers,
        tail_offsets: Vec::new(),
        durable: meta.needs_durability(),
    };
    let torn = read_tail(&mut index, root, &messages_path, covers)?;
    index.log = log;
    if let Some(log) = &index.log
        && torn
    {
        // The line a crash cut short: its message is in the short-term
        // log or its archive batch, and is caught up below.
        log.set_len(index.log_len)
            .map_err(|e| Stale::Broken(format!("{MESSAGES}: {e}")))?;
    }
    // Catch up: batches archived since the last load, then the live log.
    let known: HashSet<&String> = meta.archives.iter().collect();
    let fresh: Vec<&String> = on_disk.iter().filter(|n| !known.contains(n)).collect();
    for name in &fresh {
        let records = archive::read_batch(stm.layout(), &stm.layout().archive_batch_path(user, name))
            .map_err(|e| Stale::Broken(e.to_string()))?;
        for record in &records {
            index.add_record(record);
        }
    }
    let live = stm.read_all(user).map_err(|e| Stale::Broken(e.to_string()))?;
    for record in &live.records {
        index.add_record(record);
    }
    if index.bm25.tail_len() >= merge_at(index.bm25.base()) {
        index.merge_tail();
    }
    if !fresh.is_empty() && index.log.is_some() {
        let meta = Meta {
            version: VERSION,
            archives: on_disk,
        };
        if let Err(e) = write_meta(root, dir, &meta) {
            tracing::warn!(index = %dir.display(), error = %e, "recall index meta not updated; the catch-up repeats at the next load");
        }
    }
    index.refresh_files();
    Ok(index)
}

/// Opens the folder's segment (and `messages.tsv`, which it reads
/// messages from); the error says what is wrong.
fn open_segment(root: &Path, dir: &Path, messages: Option<Arc<File>>) -> Result<(Segment, Vec<u32>), String> {
    let file = open_nofollow(root, &in_dir(dir, SEGMENT)).map_err(|e| format!("{SEGMENT}: {e}"))?;
    let messages = match messages {
        Some(log) => log,
        None => Arc::new(open_nofollow(root, &in_dir(dir, MESSAGES)).map_err(|e| format!("{MESSAGES}: {e}"))?),
    };
    Segment::open(file, messages).map_err(|e| format!("{SEGMENT}: {e}"))
}

/// Indexes in memory the lines of `messages.tsv` after the segment's
/// `covers` bytes (one line in memory at a time); true when the last one
/// was cut short by a crash (`index.log_len` then ends before it).
fn read_tail(index: &mut UserIndex, root: &Path, path: &Path, covers: u64) -> Result<bool, Stale> {
    let broken = |e: io::Error| Stale::Broken(format!("{MESSAGES}: {e}"));
    let mut file = open_nofollow(root, path).map_err(broken)?;
    io::Seek::seek(&mut file, io::SeekFrom::Start(covers)).map_err(broken)?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::new();
    let mut offset = covers;
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(broken)?;
        if read == 0 {
            return Ok(false);
        }
        let Some(line) = buf.strip_suffix(b"\n") else {
            return Ok(true);
        };
        let at = offset;
        offset += read as u64;
        index.log_len = offset;
        if line.is_empty() {
            continue;
        }
        let stored = line::decode(line).map_err(|e| Stale::Broken(format!("{MESSAGES} at byte {at}: {e}")))?;
        let terms: Vec<&str> = stored.terms.split(' ').filter(|t| !t.is_empty()).collect();
        let key = key_of_message(stored.ts, stored.role, &stored.msg_id, &stored.text);
        if !index.bm25.contains(key) {
            index
                .bm25
                .add_terms(key, stored.ts, Source::of_role(stored.role), stored.text, &terms);
            index.tail_offsets.push(at);
        }
    }
}

/// Built from the files, stored nowhere: the last resort when the index
/// folder cannot be written.
fn in_memory(stm: &Stm, user: &SafeName, dir: PathBuf) -> UserIndex {
    let mut index = UserIndex {
        bm25: Bm25::default(),
        files: FileSet::default(),
        log: None,
        dir,
        root: stm.layout().state_root().to_path_buf(),
        vectors: None,
        query_terms: QueryTermsCache::default(),
        specs: user_specs(stm.layout(), user),
        log_len: 0,
        tail_offsets: Vec::new(),
        durable: false,
    };
    let mut add = |records: Vec<Record>| {
        for record in &records {
            index.add_record(record);
        }
    };
    match archive::read_all(stm.layout(), user) {
        Ok(records) => add(records),
        Err(e) => tracing::warn!(user = %user.log_id(), error = %e, "archive unreadable; recall works without it"),
    }
    match stm.read_all(user) {
        Ok(live) => add(live.records),
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "short-term log unreadable; recall works without it")
        }
    }
    index.refresh_files();
    index
}

fn archive_names(stm: &Stm, user: &SafeName) -> Result<Vec<String>, archive::ArchiveError> {
    Ok(archive::files(stm.layout(), user)?
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .collect())
}

/// Rewrites the user's stored index from the archive (batch by batch, in
/// the order said) and the live log, calling `progress` with the number of
/// messages written so far after each batch: `messages.tsv` and its
/// segment, both streamed (one batch in memory, ~20 bytes a message, and
/// the segment's bounded runs: [`super::segwrite`]). Returns the number of
/// messages.
pub fn rebuild(stm: &Stm, user: &SafeName, progress: &mut dyn FnMut(u64)) -> Result<u64, RecallError> {
    let root = stm.layout().state_root();
    let dir = stm.layout().recall_dir(user);
    let target = in_dir(&dir, MESSAGES);
    let seg_target = in_dir(&dir, SEGMENT);
    let temp = unique_temp_path(&target);
    let seg_temp = unique_temp_path(&seg_target);
    let result = (|| {
        let file = create_new_private(root, &temp).map_err(FileError::with("create", &temp))?;
        let mut out = BufWriter::new(file);
        let mut segment = Builder::new(root, &seg_temp);
        let (mut written, mut bytes) = (0u64, 0u64);
        let mut line = Vec::new();
        let mut write = |records: &[Record], out: &mut BufWriter<File>| -> Result<u64, RecallError> {
            for record in records {
                let key = message_key(record);
                if !segment.has(key) {
                    line.clear();
                    let terms = line_of(record, &mut line);
                    out.write_all(&line).map_err(FileError::with("write", &temp))?;
                    segment
                        .add(key, bytes, &terms)
                        .map_err(FileError::with("write", &seg_temp))?;
                    bytes += line.len() as u64;
                    written += 1;
                }
            }
            Ok(written)
        };
        let names = archive_names(stm, user)?;
        for name in &names {
            let so_far = write(
                &archive::read_batch(stm.layout(), &stm.layout().archive_batch_path(user, name))?,
                &mut out,
            )?;
            progress(so_far);
        }
        let written = write(&stm.read_all(user)?.records, &mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| FileError::with("write", &temp)(e.into_error()))?;
        let meta = Meta {
            version: VERSION,
            archives: names,
        };
        if meta.needs_durability() {
            file.sync_data().map_err(FileError::with("sync", &temp))?;
        }
        segment
            .finish(bytes, meta.needs_durability())
            .map_err(FileError::with("write", &seg_temp))?;
        // No meta while the two files are replaced: a crash in between
        // leaves a folder that is rebuilt, never a segment of other lines.
        remove_if_exists(root, &in_dir(&dir, META))?;
        fs::rename(&temp, &target).map_err(FileError::with("rename", &target))?;
        fs::rename(&seg_temp, &seg_target).map_err(FileError::with("rename", &seg_target))?;
        write_meta(root, &dir, &meta)?;
        // An index under the former name (`mnemo sessions reindex` before
        // any open migrated it) is stale now; the rebuild stands either way.
        if let Err(e) = remove_if_exists(root, &in_dir(&dir, FORMER_MESSAGES)) {
            tracing::warn!(index = %dir.display(), error = %e, "the recall index's former file is left behind");
        }
        Ok(written)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
        let _ = fs::remove_file(&seg_temp);
    }
    result
}

/// Replaces `meta.json` atomically; fsynced only when the meta needs it
/// (see [`Meta::needs_durability`]).
fn write_meta(root: &Path, dir: &Path, meta: &Meta) -> Result<(), RecallError> {
    let path = in_dir(dir, META);
    // Plain data with string keys: serialising cannot fail.
    let json = serde_json::to_vec(meta).unwrap_or_default();
    let write = if meta.needs_durability() {
        atomic_write
    } else {
        replace_unsynced
    };
    Ok(write(root, &path, &json).map_err(FileError::with("write", &path))?)
}
