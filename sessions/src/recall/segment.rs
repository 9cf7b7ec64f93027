//! A user's stored messages as a search *opens* them (format 4):
//! `recall/<user>/segment.bin` beside `messages.tsv`, read with positioned
//! reads (through the page cache) instead of loaded. A turn reads the
//! dictionary entries and postings blocks of its query's terms and the
//! lines of the few messages it returns; what stays in memory is one
//! length per message (4 bytes: scoring reads one for every document it
//! scores), every [`DICT_EVERY`]th term and every [`KEY_EVERY`]th key.
//!
//! The file, little-endian, sections in this order:
//!
//! ```text
//! header    magic "MNRSEG04", docs u32, terms u32, total_len u64, covers u64,
//!           then the start of each section below and the end (9 × u64)
//! postings  per term: a skip entry per block of 64 (first id u32,
//!           max count u16, min length u32), then each block's ids (u32)
//!           followed by its counts (u16)
//! dict      per term, sorted by bytes: len u8, term, df u32,
//!           postings offset u64, max count u16, min length u32
//! sparse    every DICT_EVERY-th dict entry: its offset u64, len u8, term
//! lens      per message: its number of terms (u32)
//! offsets   per message and one past the last: its line's byte offset
//!           in messages.tsv (u64)
//! keys      (key u64, id u32) sorted by key: the message identities
//! keysparse every KEY_EVERY-th key (u64)
//! ```
//!
//! Ids are the messages' positions in `messages.tsv` (the order said);
//! `covers` is the length of `messages.tsv` the segment indexes: lines
//! after it are the tail, indexed in memory at load and merged into a new
//! segment once there are enough ([`super::segwrite`]). The blocks and
//! their peaks are cut exactly as [`super::postings`] cuts an in-memory
//! list, so a search over an opened index walks, bounds and returns what
//! it would over the same messages loaded ([`super::bm25`]'s property
//! test). A read that fails or finds nonsense marks the segment broken:
//! the turn goes on without it, and the index is rebuilt at the next load.

use super::line::{self, key_of_message};
use super::postings::{BLOCK, Peak};
use crate::record::Role;
use chrono::{DateTime, Utc};
use rustc_hash::FxHashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub const MAGIC: &[u8; 8] = b"MNRSEG04";
/// Bytes of the header.
pub const HEADER: u64 = 8 + 4 + 4 + 8 + 8 + 9 * 8;
/// Dictionary entries per sparse entry.
pub const DICT_EVERY: usize = 32;
/// Keys per sparse key.
pub const KEY_EVERY: usize = 256;
/// Bytes of a skip entry, of a dictionary entry without its term, of a key.
pub const SKIP: u64 = 10;
pub const ENTRY: u64 = 1 + 4 + 8 + 2 + 4;
pub const KEY: u64 = 12;
/// Term infos a segment remembers between lookups before it forgets them.
const TERM_CACHE: usize = 1024;
/// Messages a segment remembers once read, likewise.
const DOC_CACHE: usize = 256;
/// Key lookups a segment remembers, likewise.
const KEY_CACHE: usize = 1024;
/// Bytes of skip tables a segment remembers, likewise (a term in every
/// other message of 10⁵ has a table of ~8 KB).
const SKIP_CACHE_BYTES: usize = 256 << 10;

/// Where a term's postings are and what bounds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermInfo {
    pub df: u32,
    pub at: u64,
    pub peak: Peak,
}

impl TermInfo {
    /// Blocks of the list (the last one may be partial).
    pub fn blocks(&self) -> usize {
        (self.df as usize).div_ceil(BLOCK)
    }

    /// Byte offset of block `b`'s ids.
    fn block_at(&self, b: usize) -> u64 {
        self.at + self.blocks() as u64 * SKIP + (b * BLOCK) as u64 * 6
    }

    /// Postings in block `b`.
    pub fn block_len(&self, b: usize) -> usize {
        (self.df as usize - b * BLOCK).min(BLOCK)
    }
}

/// A message read back from its line.
#[derive(Clone, Debug)]
pub struct Message {
    pub key: u64,
    pub ts: DateTime<Utc>,
    pub role: Role,
    pub text: String,
}

/// One block's skip entry: its first id and its peak.
#[derive(Clone, Copy, Debug)]
pub struct Skip {
    pub first: u32,
    pub peak: Peak,
}

/// The section starts read from the header.
#[derive(Clone, Copy, Debug)]
pub struct Sections {
    pub postings: u64,
    pub dict: u64,
    pub sparse: u64,
    pub lens: u64,
    pub offsets: u64,
    pub keys: u64,
    pub keysparse: u64,
    pub end: u64,
}

/// Skip tables read (their bytes, and each by where its term's postings
/// start).
type SkipCache = (usize, FxHashMap<u64, std::sync::Arc<[Skip]>>);

/// An opened segment.
#[derive(Debug)]
pub struct Segment {
    file: File,
    /// `messages.tsv`, shared with the index's appends.
    messages: Arc<File>,
    pub docs: u32,
    pub total_len: u64,
    pub covers: u64,
    at: Sections,
    /// Every [`DICT_EVERY`]th term with its dict offset.
    sparse: Vec<(Box<str>, u64)>,
    keysparse: Vec<u64>,
    infos: Mutex<FxHashMap<Box<str>, Option<TermInfo>>>,
    docs_read: Mutex<FxHashMap<u32, Message>>,
    ids_read: Mutex<FxHashMap<u64, Option<u32>>>,
    /// Skip tables read, by term, while they hold [`SKIP_CACHE_BYTES`].
    skips_read: Mutex<SkipCache>,
    broken: AtomicBool,
}

/// A segment's cache, even if a panicking thread poisoned it: every
/// change is one map step. A `Mutex`, not a `RefCell`, so that an index
/// with a segment can be searched from several threads at once behind a
/// read lock (the channel's `_shared` index: ARCHITECTURE.md, Recall).
fn held<T>(cache: &Mutex<T>) -> MutexGuard<'_, T> {
    cache.lock().unwrap_or_else(PoisonError::into_inner)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn read(file: &File, at: u64, len: u64) -> Result<Vec<u8>, String> {
    let len = usize::try_from(len).map_err(|_| "section too large".to_string())?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, at).map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Parses one dict entry at `b[at..]`: (term, info, bytes used).
fn entry(b: &[u8], at: usize) -> Option<(&[u8], TermInfo, usize)> {
    let len = *b.get(at)? as usize;
    let rest = b.get(at + 1..at + 1 + len + (ENTRY as usize - 1))?;
    let term = &rest[..len];
    let f = &rest[len..];
    let info = TermInfo {
        df: u32_at(f, 0),
        at: u64_at(f, 4),
        peak: Peak {
            max_tf: u16_at(f, 12),
            min_len: u32_at(f, 14),
        },
    };
    Some((term, info, 1 + len + ENTRY as usize - 1))
}

impl Segment {
    /// Opens and checks the segment (its shape, not every byte: what a
    /// later read finds wrong marks it broken); the error says what is
    /// wrong. Also returns every message's length, which the caller keeps.
    pub fn open(file: File, messages: Arc<File>) -> Result<(Segment, Vec<u32>), String> {
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len < HEADER {
            return Err("segment shorter than its header".into());
        }
        let h = read(&file, 0, HEADER)?;
        if &h[..8] != MAGIC {
            return Err("segment of another format".into());
        }
        let (docs, terms) = (u32_at(&h, 8), u32_at(&h, 12));
        let (total_len, covers) = (u64_at(&h, 16), u64_at(&h, 24));
        let s: Vec<u64> = (0..9).map(|i| u64_at(&h, 32 + i * 8)).collect();
        let at = Sections {
            postings: s[0],
            dict: s[1],
            sparse: s[2],
            lens: s[3],
            offsets: s[4],
            keys: s[5],
            keysparse: s[6],
            end: s[7],
        };
        let n = u64::from(docs);
        let ordered = at.postings == HEADER && s.windows(2).take(7).all(|w| w[0] <= w[1]) && at.end == len;
        let sized = at.offsets - at.lens == 4 * n
            && at.keys - at.offsets == 8 * (n + 1)
            && at.keysparse - at.keys == KEY * n
            && at.end - at.keysparse == 8 * n.div_ceil(KEY_EVERY as u64);
        if !ordered || !sized || s[8] != 0 {
            return Err("segment sections do not add up".into());
        }
        let lens: Vec<u32> = read(&file, at.lens, 4 * n)?
            .chunks_exact(4)
            .map(|c| u32_at(c, 0))
            .collect();
        if lens.iter().map(|&l| u64::from(l)).sum::<u64>() != total_len {
            return Err("segment lengths do not add up".into());
        }
        let keysparse = read(&file, at.keysparse, at.end - at.keysparse)?
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect();
        let raw = read(&file, at.sparse, at.lens - at.sparse)?;
        let mut sparse = Vec::new();
        let mut p = 0;
        while p < raw.len() {
            let bad = || "segment dictionary index damaged".to_string();
            let off = u64_at(raw.get(p..p + 8).ok_or_else(bad)?, 0);
            let tlen = *raw.get(p + 8).ok_or_else(bad)? as usize;
            let term = std::str::from_utf8(raw.get(p + 9..p + 9 + tlen).ok_or_else(bad)?).map_err(|_| bad())?;
            if off < at.dict || off >= at.sparse {
                return Err(bad());
            }
            sparse.push((Box::from(term), off));
            p += 9 + tlen;
        }
        if sparse.len() != (terms as usize).div_ceil(DICT_EVERY) {
            return Err("segment dictionary index incomplete".into());
        }
        let last = read(&file, at.offsets + 8 * n, 8)?;
        if u64_at(&last, 0) != covers {
            return Err("segment does not end where it says".into());
        }
        let tsv_len = messages.metadata().map_err(|e| e.to_string())?.len();
        if tsv_len < covers || (covers > 0 && read(&messages, covers - 1, 1)? != b"\n") {
            return Err("segment indexes more than messages.tsv holds".into());
        }
        let segment = Segment {
            file,
            messages,
            docs,
            total_len,
            covers,
            at,
            sparse,
            keysparse,
            infos: Mutex::default(),
            docs_read: Mutex::default(),
            ids_read: Mutex::default(),
            skips_read: Mutex::default(),
            broken: AtomicBool::new(false),
        };
        Ok((segment, lens))
    }

    #[cfg(test)]
    pub fn sections(&self) -> Sections {
        self.at
    }

    /// True once a read failed or found nonsense.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    fn fail<T>(&self, what: &str) -> Option<T> {
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(%what, "recall segment unreadable; this turn searches without it, and it is rebuilt at the next load");
        }
        None
    }

    fn read(&self, at: u64, len: u64) -> Option<Vec<u8>> {
        match read(&self.file, at, len) {
            Ok(b) => Some(b),
            Err(_) => self.fail("read"),
        }
    }

    /// Where `term`'s postings are, if the segment holds it.
    pub fn term(&self, term: &str) -> Option<TermInfo> {
        if let Some(known) = held(&self.infos).get(term) {
            return *known;
        }
        let found = self.lookup(term);
        let mut infos = held(&self.infos);
        if infos.len() >= TERM_CACHE {
            infos.clear();
        }
        infos.insert(term.into(), found);
        found
    }

    fn lookup(&self, term: &str) -> Option<TermInfo> {
        let i = self.sparse.partition_point(|(t, _)| **t <= *term).checked_sub(1)?;
        let from = self.sparse[i].1;
        let to = self.sparse.get(i + 1).map_or(self.at.sparse, |s| s.1);
        let block = self.read(from, to.checked_sub(from)?)?;
        let mut p = 0;
        while p < block.len() {
            let Some((t, info, used)) = entry(&block, p) else {
                return self.fail("dictionary entry");
            };
            match t.cmp(term.as_bytes()) {
                std::cmp::Ordering::Equal => {
                    let size = info.blocks() as u64 * SKIP + u64::from(info.df) * 6;
                    let fits = info.df > 0
                        && info.df <= self.docs
                        && info.at >= self.at.postings
                        && info.at.checked_add(size).is_some_and(|end| end <= self.at.dict);
                    return if fits {
                        Some(info)
                    } else {
                        self.fail("dictionary entry")
                    };
                }
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Less => p += used,
            }
        }
        None
    }

    /// The skip entries of a term's blocks (remembered: the terms of a
    /// turn's queries come back in its other queries and the next turns).
    pub fn skips(&self, info: &TermInfo) -> std::sync::Arc<[Skip]> {
        if let Some(known) = held(&self.skips_read).1.get(&info.at) {
            return known.clone();
        }
        let skips: std::sync::Arc<[Skip]> = self.read_skips(info).into();
        let mut cache = held(&self.skips_read);
        let size = skips.len() * std::mem::size_of::<Skip>() + 64;
        if cache.0 + size > SKIP_CACHE_BYTES {
            *cache = Default::default();
        }
        if size <= SKIP_CACHE_BYTES {
            cache.0 += size;
            cache.1.insert(info.at, skips.clone());
        }
        skips
    }

    fn read_skips(&self, info: &TermInfo) -> Vec<Skip> {
        let n = info.blocks();
        let Some(raw) = self.read(info.at, n as u64 * SKIP) else {
            return Vec::new();
        };
        let skips: Vec<Skip> = raw
            .chunks_exact(SKIP as usize)
            .map(|c| Skip {
                first: u32_at(c, 0),
                peak: Peak {
                    max_tf: u16_at(c, 4),
                    min_len: u32_at(c, 6),
                },
            })
            .collect();
        let ordered = skips.windows(2).all(|w| w[0].first < w[1].first);
        if !ordered || skips.last().is_some_and(|s| s.first >= self.docs) {
            self.fail::<()>("skip table");
            return Vec::new();
        }
        skips
    }

    /// Block `b` of a term's postings into `ids` and `tfs` (cleared
    /// first); on a failed read they hold zeros, which score nothing.
    pub fn block(&self, info: &TermInfo, b: usize, ids: &mut Vec<u32>, tfs: &mut Vec<u16>) {
        self.blocks(info, b, 1, ids, tfs);
    }

    /// Blocks `from..from + count` of a term's postings, in one read (a
    /// walk goes down a list: the blocks below the one it needs are the
    /// next it will need), as [`Segment::block`].
    pub fn blocks(&self, info: &TermInfo, from: usize, count: usize, ids: &mut Vec<u32>, tfs: &mut Vec<u16>) {
        ids.clear();
        tfs.clear();
        let lens: Vec<usize> = (from..from + count).map(|b| info.block_len(b)).collect();
        let total: usize = lens.iter().sum();
        let Some(raw) = self.read(info.block_at(from), total as u64 * 6) else {
            ids.resize(total, 0);
            tfs.resize(total, 0);
            return;
        };
        let mut at = 0;
        for n in lens {
            ids.extend(raw[at..at + 4 * n].chunks_exact(4).map(|c| u32_at(c, 0)));
            tfs.extend(raw[at + 4 * n..at + 6 * n].chunks_exact(2).map(|c| u16_at(c, 0)));
            at += 6 * n;
        }
        let ordered = ids.windows(2).all(|w| w[0] < w[1]);
        if !ordered || ids.last().is_some_and(|&id| id >= self.docs) {
            self.fail::<()>("postings block");
            ids.iter_mut().for_each(|id| *id = 0);
            tfs.iter_mut().for_each(|tf| *tf = 0);
        }
    }

    /// The id of the message with `key`, if the segment holds it. The
    /// last [`KEY_CACHE`] answers are remembered: a turn asks for the keys
    /// of its recent window, which the next turn asks for again.
    pub fn id_of(&self, key: u64) -> Option<u32> {
        if let Some(&known) = held(&self.ids_read).get(&key) {
            return known;
        }
        let found = self.lookup_key(key);
        let mut cache = held(&self.ids_read);
        if cache.len() >= KEY_CACHE {
            cache.clear();
        }
        cache.insert(key, found);
        found
    }

    fn lookup_key(&self, key: u64) -> Option<u32> {
        let i = self.keysparse.partition_point(|&k| k <= key).checked_sub(1)?;
        let from = i * KEY_EVERY;
        let n = (self.docs as usize - from).min(KEY_EVERY);
        let raw = self.read(self.at.keys + from as u64 * KEY, n as u64 * KEY)?;
        let entries = |j: usize| (u64_at(&raw, j * 12), u32_at(&raw, j * 12 + 8));
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match entries(mid).0.cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let id = entries(mid).1;
                    return if id < self.docs {
                        Some(id)
                    } else {
                        self.fail("key table")
                    };
                }
            }
        }
        None
    }

    /// Message `id` read back from its line; `None` if it cannot be read (the segment is then broken). The last
    /// [`DOC_CACHE`] read are remembered: a turn asks for the same few
    /// (a hit, its neighbours, its day, its item) several times.
    pub fn doc(&self, id: u32) -> Option<Message> {
        if let Some(doc) = held(&self.docs_read).get(&id) {
            return Some(doc.clone());
        }
        let doc = self.read_doc(id)?;
        let mut cache = held(&self.docs_read);
        if cache.len() >= DOC_CACHE {
            cache.clear();
        }
        cache.insert(id, doc.clone());
        Some(doc)
    }

    fn read_doc(&self, id: u32) -> Option<Message> {
        let at = self.read(self.at.offsets + 8 * u64::from(id), 16)?;
        let (from, to) = (u64_at(&at, 0), u64_at(&at, 8));
        if to <= from || to > self.covers {
            return self.fail("message offsets");
        }
        let raw = match read(&self.messages, from, to - from) {
            Ok(raw) => raw,
            Err(_) => return self.fail("messages.tsv"),
        };
        let Some(stored) = raw.strip_suffix(b"\n").and_then(|l| line::decode(l).ok()) else {
            return self.fail("messages.tsv line");
        };
        Some(Message {
            key: key_of_message(stored.ts, stored.role, &stored.msg_id, &stored.text),
            ts: stored.ts,
            role: stored.role,
            text: stored.text,
        })
    }

    /// The dictionary entries under sparse entry `i` (at most
    /// [`DICT_EVERY`], in order), `None` past the last: a merge reads the
    /// dictionary this way, a piece at a time.
    pub fn dict_piece(&self, i: usize) -> Result<Option<Vec<(String, TermInfo)>>, String> {
        let Some((_, from)) = self.sparse.get(i) else {
            return Ok(None);
        };
        let to = self.sparse.get(i + 1).map_or(self.at.sparse, |s| s.1);
        let block = read(&self.file, *from, to - from)?;
        let mut out = Vec::with_capacity(DICT_EVERY);
        let mut p = 0;
        while p < block.len() {
            let (t, info, used) = entry(&block, p).ok_or("dictionary entry damaged")?;
            out.push((std::str::from_utf8(t).map_err(|_| "term not UTF-8")?.to_string(), info));
            p += used;
        }
        Ok(Some(out))
    }

    /// Reads a whole section's `u64`s (the offsets, for a merge).
    pub fn offsets(&self) -> Result<Vec<u64>, String> {
        let n = u64::from(self.docs) + 1;
        Ok(read(&self.file, self.at.offsets, 8 * n)?
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect())
    }

    /// Every message's key by id (for a merge).
    pub fn keys_by_id(&self) -> Result<Vec<u64>, String> {
        let raw = read(&self.file, self.at.keys, KEY * u64::from(self.docs))?;
        let mut keys = vec![0u64; self.docs as usize];
        for c in raw.chunks_exact(KEY as usize) {
            let id = u32_at(c, 8) as usize;
            *keys.get_mut(id).ok_or("key table damaged")? = u64_at(c, 0);
        }
        Ok(keys)
    }

    /// Bytes this segment keeps in memory (its sparse tables), for the
    /// cache's budget.
    pub fn resident_bytes(&self) -> usize {
        let docs: usize = held(&self.docs_read).values().map(|d| d.text.len() + 96).sum();
        let caches = docs + held(&self.ids_read).len() * 24 + held(&self.skips_read).0;
        self.sparse.iter().map(|(t, _)| t.len() + 32).sum::<usize>() + self.keysparse.len() * 8 + caches + 1024
    }
}

#[cfg(test)]
#[path = "segment_tests.rs"]
mod tests;
