//! Writing a [`super::segment`] file in bounded memory: a rebuild and a
//! merge of the in-memory tail both stream their messages through a
//! [`Builder`], which keeps a run of postings in memory — at most
//! [`RUN_POSTINGS`] postings and [`RUN_BYTES`] by its count — spills it as
//! a sorted run to a temp file beside the index, and at the end merges the
//! runs (and, for a tail merge, the old segment's postings, read term by
//! term) into the new file, one list at a time and, for a long list, one
//! block at a time ([`TermOut`]). What it holds besides: per message 4
//! bytes of length, 8 of key and a 4-byte slot or so of the table that
//! finds a key again (a rebuild drops a message it already has; the table
//! goes before the merge); the line offsets go to a temp file as they
//! come.
//!
//! The new file is written under a temp name and renamed over the target;
//! every temp file (runs, dictionary) is removed whatever happens.

use super::pieces::Pieces;
use super::segment::{DICT_EVERY, HEADER, KEY_EVERY, MAGIC, Segment};
use super::segmerge::{BaseTerms, Counted, RunTerms, TermOut, TermSource, bad};
use crate::fsutil::{create_new_private, open_nofollow, unique_temp_path};
use rustc_hash::FxHashMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Postings held in memory before they are spilled as a run, at most.
pub const RUN_POSTINGS: usize = 1 << 15;
/// Bytes a run may hold, by [`Builder::add`]'s count: 8 a posting (its
/// id and count, with the lists' spare room) and [`RUN_TERM_BYTES`] and
/// its length a term (its key, its two lists and the map's slot). A
/// history of numbers — a new term in every message — fills it before
/// [`RUN_POSTINGS`] (issue 40: the run was the largest part of a
/// rebuild's peak).
const RUN_BYTES: usize = 256 << 10;
const RUN_TERM_BYTES: usize = 160;
/// Read buffer of each run in the final merge.
const RUN_BUFFER: usize = 8 << 10;
/// Blocks of a list gathered in memory before its skip table is written;
/// a longer list is written as it is read (see [`TermOut`]), so a term in
/// every message costs one block, not its whole list.
const GATHERED_BLOCKS: usize = 64;

/// One term's postings in a run: ids and counts.
type RunList = (Vec<u32>, Vec<u16>);

/// Temp files removed when dropped.
struct Temps(Vec<PathBuf>);

impl Drop for Temps {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

/// Builds one segment; messages are added in the order said.
pub struct Builder<'a> {
    root: PathBuf,
    target: PathBuf,
    base: Option<&'a Segment>,
    lens: Pieces<u32>,
    /// The line offsets so far, in a temp file (with its path).
    offsets: Option<(PathBuf, BufWriter<File>)>,
    keys: Pieces<u64>,
    /// Ids + 1 by key hash (0: empty), open addressing over `keys`.
    seen: Pieces<u32>,
    total_len: u64,
    run: FxHashMap<Box<str>, RunList>,
    run_postings: usize,
    /// What the run holds, as [`RUN_BYTES`] counts it.
    run_bytes: usize,
    /// [`RUN_POSTINGS`] but in tests.
    run_limit: usize,
    /// [`GATHERED_BLOCKS`] but in tests.
    gathered_blocks: usize,
    runs: Vec<PathBuf>,
    temps: Temps,
}

impl<'a> Builder<'a> {
    /// A builder of a new segment at `target`, beneath `root`.
    pub fn new(root: &Path, target: &Path) -> Builder<'a> {
        Builder {
            root: root.to_path_buf(),
            target: target.to_path_buf(),
            base: None,
            lens: Pieces::default(),
            offsets: None,
            keys: Pieces::default(),
            seen: Pieces::default(),
            total_len: 0,
            run: FxHashMap::default(),
            run_postings: 0,
            run_bytes: 0,
            run_limit: RUN_POSTINGS,
            gathered_blocks: GATHERED_BLOCKS,
            runs: Vec::new(),
            temps: Temps(Vec::new()),
        }
    }

    /// A builder of the segment holding `base`'s messages (of lengths
    /// `lens`) and those added after.
    pub fn over(root: &Path, target: &Path, base: &'a Segment, lens: &[u32]) -> io::Result<Builder<'a>> {
        let mut builder = Builder::new(root, target);
        let mut offsets = base.offsets().map_err(bad)?;
        offsets.pop();
        for offset in offsets {
            builder.offset(offset)?;
        }
        builder.keys = base.keys_by_id().map_err(bad)?.into_iter().collect();
        builder.reseat();
        builder.lens = lens.iter().copied().collect();
        builder.total_len = base.total_len;
        builder.base = Some(base);
        Ok(builder)
    }

    /// Spills a run every `n` postings, and gathers lists of at most
    /// `n % 4` blocks, writing longer ones as they are read (tests: many
    /// runs, and both ways of writing a list, from few messages).
    #[cfg(test)]
    pub fn spill_every(mut self, n: usize) -> Builder<'a> {
        self.run_limit = n;
        self.gathered_blocks = n % 4;
        self
    }

    /// True when a message with `key` was added already.
    pub fn has(&self, key: u64) -> bool {
        if self.seen.is_empty() {
            return false;
        }
        let mask = self.seen.len() - 1;
        let mut at = slot_of(key) & mask;
        loop {
            match self.seen.get(at).unwrap_or(0) {
                0 => return false,
                id if self.keys.get(id as usize - 1) == Some(key) => return true,
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Puts id `id` (its key in `keys`) in the table.
    fn remember(&mut self, id: u32) {
        let mask = self.seen.len() - 1;
        let mut at = slot_of(self.keys.get(id as usize).unwrap_or(0)) & mask;
        while self.seen.get(at).unwrap_or(0) != 0 {
            at = (at + 1) & mask;
        }
        self.seen.set(at, id + 1);
    }

    /// Makes the table at least 8/7 of the keys held, in a power of two
    /// (at least 1,024 slots), and fills it again.
    fn reseat(&mut self) {
        self.seen = Pieces::filled((self.keys.len() * 8 / 7 + 1).next_power_of_two().max(1024), 0);
        for id in 0..self.keys.len() as u32 {
            self.remember(id);
        }
    }

    fn offset(&mut self, offset: u64) -> io::Result<()> {
        if self.offsets.is_none() {
            let path = unique_temp_path(&self.target);
            let file = create_new_private(&self.root, &path)?;
            self.temps.0.push(path.clone());
            self.offsets = Some((path, BufWriter::with_capacity(RUN_BUFFER, file)));
        }
        match &mut self.offsets {
            Some((_, out)) => out.write_all(&offset.to_le_bytes()),
            None => Ok(()),
        }
    }

    /// Adds the next message: its key (one already added is refused: see
    /// [`Builder::has`]), the offset of its line in `messages.tsv`, its
    /// terms (repeats kept).
    pub fn add<T: AsRef<str>>(&mut self, key: u64, offset: u64, terms: &[T]) -> io::Result<()> {
        if self.has(key) {
            return Err(bad("a message added twice"));
        }
        let id = u32::try_from(self.lens.len()).map_err(|_| bad("too many messages"))?;
        let len = u32::try_from(terms.len()).unwrap_or(u32::MAX - 1).min(u32::MAX - 1);
        let mut sorted: Vec<&str> = terms.iter().map(AsRef::as_ref).collect();
        sorted.sort_unstable();
        for run in sorted.chunk_by(|a, b| a == b) {
            let n = u16::try_from(run.len()).unwrap_or(u16::MAX);
            let (ids, tfs) = match self.run.get_mut(run[0]) {
                Some(list) => list,
                None => {
                    self.run_bytes += run[0].len() + RUN_TERM_BYTES;
                    self.run.entry(run[0].into()).or_default()
                }
            };
            ids.push(id);
            tfs.push(n);
            self.run_postings += 1;
            self.run_bytes += 8;
        }
        self.lens.push(len);
        self.offset(offset)?;
        self.keys.push(key);
        if self.keys.len() * 8 > self.seen.len() * 7 {
            self.reseat();
        } else {
            self.remember(id);
        }
        self.total_len += u64::from(len);
        if self.run_postings >= self.run_limit || self.run_bytes >= RUN_BYTES {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the postings in memory as a sorted run.
    fn spill(&mut self) -> io::Result<()> {
        if self.run.is_empty() {
            return Ok(());
        }
        let path = unique_temp_path(&self.target);
        let file = create_new_private(&self.root, &path)?;
        self.temps.0.push(path.clone());
        let mut out = BufWriter::with_capacity(1 << 16, file);
        let mut terms: Vec<(Box<str>, RunList)> = self.run.drain().collect();
        terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (term, (ids, tfs)) in terms {
            write_record(&mut out, &term, &ids, &tfs)?;
        }
        out.flush()?;
        self.runs.push(path);
        self.run_postings = 0;
        self.run_bytes = 0;
        Ok(())
    }

    /// Writes the segment (indexing `messages.tsv` up to `covers` bytes)
    /// and renames it into place; synced first when `durable`.
    pub fn finish(mut self, covers: u64, durable: bool) -> io::Result<()> {
        self.spill()?;
        // Only adding needs them: the merge's memory is the runs' buffers
        // and one block.
        self.seen = Pieces::default();
        self.run = FxHashMap::default();
        if let Some((_, out)) = &mut self.offsets {
            out.flush()?;
        }
        let temp = unique_temp_path(&self.target);
        self.temps.0.push(temp.clone());
        let dict_path = unique_temp_path(&self.target);
        let dict_file = create_new_private(&self.root, &dict_path)?;
        self.temps.0.push(dict_path.clone());
        let mut out = Counted::new(create_new_private(&self.root, &temp)?);
        out.write_all(&[0u8; HEADER as usize])?;
        let mut dict = Counted::new(dict_file);
        let mut sparse: Vec<(Box<str>, u64)> = Vec::new();
        let mut terms = 0u32;
        let mut sources: Vec<Box<dyn TermSource + '_>> = Vec::new();
        if let Some(base) = self.base {
            sources.push(Box::new(BaseTerms::new(base)?));
        }
        for run in &self.runs {
            let file = open_nofollow(&self.root, run)?;
            sources.push(Box::new(RunTerms::new(BufReader::with_capacity(RUN_BUFFER, file))?));
        }
        let mut term_out = TermOut::default();
        let lens = &self.lens;
        let len_of = |id: u32| lens.get(id as usize).unwrap_or(0);
        while let Some(term) = sources.iter().filter_map(|s| s.term()).min().map(str::to_string) {
            let df: u64 = sources
                .iter()
                .filter(|s| s.term() == Some(term.as_str()))
                .map(|s| u64::from(s.df()))
                .sum();
            let df = u32::try_from(df).map_err(|_| bad("list too long"))?;
            if (terms as usize).is_multiple_of(DICT_EVERY) {
                sparse.push((term.as_str().into(), dict.at));
            }
            let at = out.at;
            term_out.start(&mut out, df, self.gathered_blocks)?;
            for source in sources.iter_mut() {
                if source.term() == Some(term.as_str()) {
                    source.take(&mut |ids, tfs| term_out.push(&mut out, ids, tfs, &len_of))?;
                }
            }
            let peak = term_out.end(&mut out, at, &len_of)?;
            let tlen = u8::try_from(term.len()).map_err(|_| bad("term too long"))?;
            dict.write_all(&[tlen])?;
            dict.write_all(term.as_bytes())?;
            dict.write_all(&df.to_le_bytes())?;
            dict.write_all(&at.to_le_bytes())?;
            dict.write_all(&peak.max_tf.to_le_bytes())?;
            dict.write_all(&peak.min_len.to_le_bytes())?;
            terms = terms.checked_add(1).ok_or_else(|| bad("too many terms"))?;
        }
        drop(sources);
        drop(term_out);
        dict.flush()?;
        let header = self.tables(&mut out, &dict_path, &sparse, terms, covers)?;
        let file = out.into_file()?;
        file.write_all_at(&header, 0)?;
        if durable {
            file.sync_data()?;
        }
        fs::rename(&temp, &self.target)
    }

    /// Writes the sections after the postings (the dictionary from its
    /// temp file, then the tables); returns the header to write at 0.
    fn tables(
        &self,
        out: &mut Counted,
        dict_path: &Path,
        sparse: &[(Box<str>, u64)],
        terms: u32,
        covers: u64,
    ) -> io::Result<Vec<u8>> {
        let dict_at = out.at;
        io::copy(&mut open_nofollow(&self.root, dict_path)?, &mut *out)?;
        let sparse_at = out.at;
        for (term, rel) in sparse {
            out.write_all(&(dict_at + rel).to_le_bytes())?;
            out.write_all(&[term.len() as u8])?;
            out.write_all(term.as_bytes())?;
        }
        let lens_at = out.at;
        for len in self.lens.iter() {
            out.write_all(&len.to_le_bytes())?;
        }
        let offsets_at = out.at;
        if let Some((path, _)) = &self.offsets {
            io::copy(&mut open_nofollow(&self.root, path)?, &mut *out)?;
        }
        out.write_all(&covers.to_le_bytes())?;
        let keys_at = out.at;
        let keysparse = self.key_table(out)?;
        let keysparse_at = out.at;
        for key in keysparse {
            out.write_all(&key.to_le_bytes())?;
        }
        let end = out.at;
        let docs = u32::try_from(self.lens.len()).map_err(|_| bad("too many messages"))?;
        let mut header = Vec::with_capacity(HEADER as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&docs.to_le_bytes());
        header.extend_from_slice(&terms.to_le_bytes());
        header.extend_from_slice(&self.total_len.to_le_bytes());
        header.extend_from_slice(&covers.to_le_bytes());
        for at in [
            HEADER,
            dict_at,
            sparse_at,
            lens_at,
            offsets_at,
            keys_at,
            keysparse_at,
            end,
            0,
        ] {
            header.extend_from_slice(&at.to_le_bytes());
        }
        Ok(header)
    }
}

impl Builder<'_> {
    /// Writes the key table — every message's key and id, by key — and
    /// returns every [`KEY_EVERY`]th key of it. Sorted a slice of the keys
    /// at a time (by their top bits: they are hashes), so it holds at most
    /// ~8,192 of them at once at 10^5 messages (a 64th at most above).
    fn key_table(&self, out: &mut Counted) -> io::Result<Vec<u64>> {
        let n = self.keys.len();
        let bits = (n / 8192).next_power_of_two().trailing_zeros().min(6);
        let slice_of = |key: u64| if bits == 0 { 0 } else { key >> (64 - bits) };
        let mut sparse = Vec::with_capacity(n / KEY_EVERY + 1);
        let mut written = 0usize;
        let mut slice: Vec<(u64, u32)> = Vec::new();
        for s in 0..1u64 << bits {
            slice.clear();
            slice.extend(self.keys.iter().zip(0u32..).filter(|(key, _)| slice_of(*key) == s));
            slice.sort_unstable();
            for &(key, id) in &slice {
                if written.is_multiple_of(KEY_EVERY) {
                    sparse.push(key);
                }
                out.write_all(&key.to_le_bytes())?;
                out.write_all(&id.to_le_bytes())?;
                written += 1;
            }
        }
        Ok(sparse)
    }
}

/// Where a key starts looking in the table (keys are hashes already).
fn slot_of(key: u64) -> usize {
    (key ^ (key >> 32)) as usize
}

fn write_record(out: &mut impl Write, term: &str, ids: &[u32], tfs: &[u16]) -> io::Result<()> {
    out.write_all(&[u8::try_from(term.len()).map_err(|_| bad("term too long"))?])?;
    out.write_all(term.as_bytes())?;
    out.write_all(&(ids.len() as u32).to_le_bytes())?;
    for id in ids {
        out.write_all(&id.to_le_bytes())?;
    }
    for tf in tfs {
        out.write_all(&tf.to_le_bytes())?;
    }
    Ok(())
}
