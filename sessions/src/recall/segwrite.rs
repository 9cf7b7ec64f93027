//! Writing a [`super::segment`] file in bounded memory: a rebuild and a
//! merge of the in-memory tail both stream their messages through a
//! [`Builder`], which keeps the postings of at most [`RUN_POSTINGS`]
//! postings in memory, spills them as a sorted run to a temp file beside
//! the index, and at the end merges the runs (and, for a tail merge, the
//! old segment's postings, read term by term) into the new file. What it
//! holds besides: per message 4 bytes of length, 8 of key and a 4-byte
//! slot or so of the table that finds a key again (a rebuild drops a
//! message it already has); the line offsets go to a temp file as they
//! come; and one term's postings at a time.
//!
//! The new file is written under a temp name and renamed over the target;
//! every temp file (runs, dictionary) is removed whatever happens.

use super::postings::{BLOCK, Peak};
use super::segment::{DICT_EVERY, HEADER, KEY_EVERY, MAGIC, Segment, TermInfo};
use crate::fsutil::{create_new_private, open_nofollow, unique_temp_path};
use rustc_hash::FxHashMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Postings held in memory before they are spilled as a run (~0.5 MB
/// with their terms).
pub const RUN_POSTINGS: usize = 1 << 15;
/// Read buffer of each run in the final merge.
const RUN_BUFFER: usize = 8 << 10;

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
    lens: Vec<u32>,
    /// The line offsets so far, in a temp file (with its path).
    offsets: Option<(PathBuf, BufWriter<File>)>,
    keys: Vec<u64>,
    /// Ids + 1 by key hash (0: empty), open addressing over `keys`.
    seen: Vec<u32>,
    total_len: u64,
    run: FxHashMap<Box<str>, RunList>,
    run_postings: usize,
    /// [`RUN_POSTINGS`] but in tests.
    run_limit: usize,
    runs: Vec<PathBuf>,
    temps: Temps,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl<'a> Builder<'a> {
    /// A builder of a new segment at `target`, beneath `root`.
    pub fn new(root: &Path, target: &Path) -> Builder<'a> {
        Builder {
            root: root.to_path_buf(),
            target: target.to_path_buf(),
            base: None,
            lens: Vec::new(),
            offsets: None,
            keys: Vec::new(),
            seen: Vec::new(),
            total_len: 0,
            run: FxHashMap::default(),
            run_postings: 0,
            run_limit: RUN_POSTINGS,
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
        builder.keys = base.keys_by_id().map_err(bad)?;
        builder.reseat();
        builder.lens = lens.to_vec();
        builder.total_len = base.total_len;
        builder.base = Some(base);
        Ok(builder)
    }

    /// Spills a run every `n` postings (tests: many runs from few messages).
    #[cfg(test)]
    pub fn spill_every(mut self, n: usize) -> Builder<'a> {
        self.run_limit = n;
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
            match self.seen[at] {
                0 => return false,
                id if self.keys[id as usize - 1] == key => return true,
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Puts id `id` (its key in `keys`) in the table.
    fn remember(&mut self, id: u32) {
        let mask = self.seen.len() - 1;
        let mut at = slot_of(self.keys[id as usize]) & mask;
        while self.seen[at] != 0 {
            at = (at + 1) & mask;
        }
        self.seen[at] = id + 1;
    }

    /// Makes the table at least 8/7 of the keys held, in a power of two
    /// (at least 1,024 slots), and fills it again.
    fn reseat(&mut self) {
        self.seen = vec![0; (self.keys.len() * 8 / 7 + 1).next_power_of_two().max(1024)];
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
                None => self.run.entry(run[0].into()).or_default(),
            };
            ids.push(id);
            tfs.push(n);
            self.run_postings += 1;
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
        if self.run_postings >= self.run_limit {
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
        Ok(())
    }

    /// Writes the segment (indexing `messages.tsv` up to `covers` bytes)
    /// and renames it into place; synced first when `durable`.
    pub fn finish(mut self, covers: u64, durable: bool) -> io::Result<()> {
        self.spill()?;
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
        let (mut ids, mut tfs) = (Vec::new(), Vec::new());
        while let Some(term) = sources.iter().filter_map(|s| s.term()).min().map(str::to_string) {
            ids.clear();
            tfs.clear();
            for source in sources.iter_mut() {
                if source.term() == Some(term.as_str()) {
                    source.take(&mut ids, &mut tfs)?;
                }
            }
            if (terms as usize).is_multiple_of(DICT_EVERY) {
                sparse.push((term.as_str().into(), dict.at));
            }
            let at = out.at;
            let peak = write_postings(&mut out, &ids, &tfs, &self.lens)?;
            let tlen = u8::try_from(term.len()).map_err(|_| bad("term too long"))?;
            dict.write_all(&[tlen])?;
            dict.write_all(term.as_bytes())?;
            dict.write_all(
                &u32::try_from(ids.len())
                    .map_err(|_| bad("list too long"))?
                    .to_le_bytes(),
            )?;
            dict.write_all(&at.to_le_bytes())?;
            dict.write_all(&peak.max_tf.to_le_bytes())?;
            dict.write_all(&peak.min_len.to_le_bytes())?;
            terms = terms.checked_add(1).ok_or_else(|| bad("too many terms"))?;
        }
        drop(sources);
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
        for len in &self.lens {
            out.write_all(&len.to_le_bytes())?;
        }
        let offsets_at = out.at;
        if let Some((path, _)) = &self.offsets {
            io::copy(&mut open_nofollow(&self.root, path)?, &mut *out)?;
        }
        out.write_all(&covers.to_le_bytes())?;
        let keys_at = out.at;
        let mut by_key: Vec<u32> = (0..self.keys.len() as u32).collect();
        by_key.sort_unstable_by_key(|&id| self.keys[id as usize]);
        for &id in &by_key {
            out.write_all(&self.keys[id as usize].to_le_bytes())?;
            out.write_all(&id.to_le_bytes())?;
        }
        let keysparse_at = out.at;
        for &id in by_key.iter().step_by(KEY_EVERY) {
            out.write_all(&self.keys[id as usize].to_le_bytes())?;
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

/// Where a key starts looking in the table (keys are hashes already).
fn slot_of(key: u64) -> usize {
    (key ^ (key >> 32)) as usize
}

/// A writer that counts the bytes through it.
struct Counted {
    out: BufWriter<File>,
    at: u64,
}

impl Counted {
    fn new(file: File) -> Counted {
        Counted {
            out: BufWriter::with_capacity(1 << 16, file),
            at: 0,
        }
    }

    fn into_file(self) -> io::Result<File> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
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

/// One term's postings as the segment stores them (see
/// [`super::segment`]), blocks cut as [`super::postings::Postings`] cuts
/// them; returns the peak of the whole list.
fn write_postings(out: &mut impl Write, ids: &[u32], tfs: &[u16], lens: &[u32]) -> io::Result<Peak> {
    let len_of = |id: u32| lens.get(id as usize).copied().unwrap_or(0);
    let mut whole: Option<Peak> = None;
    for (block_ids, block_tfs) in ids.chunks(BLOCK).zip(tfs.chunks(BLOCK)) {
        let mut peak = Peak {
            max_tf: block_tfs[0],
            min_len: len_of(block_ids[0]),
        };
        for (&id, &tf) in block_ids.iter().zip(block_tfs) {
            peak.max_tf = peak.max_tf.max(tf);
            peak.min_len = peak.min_len.min(len_of(id));
        }
        out.write_all(&block_ids[0].to_le_bytes())?;
        out.write_all(&peak.max_tf.to_le_bytes())?;
        out.write_all(&peak.min_len.to_le_bytes())?;
        let w = whole.get_or_insert(peak);
        w.max_tf = w.max_tf.max(peak.max_tf);
        w.min_len = w.min_len.min(peak.min_len);
    }
    for (block_ids, block_tfs) in ids.chunks(BLOCK).zip(tfs.chunks(BLOCK)) {
        for id in block_ids {
            out.write_all(&id.to_le_bytes())?;
        }
        for tf in block_tfs {
            out.write_all(&tf.to_le_bytes())?;
        }
    }
    whole.ok_or_else(|| bad("empty postings"))
}

/// A sorted source of terms and their postings for the final merge.
trait TermSource {
    /// The current term, `None` when done.
    fn term(&self) -> Option<&str>;
    /// Appends the current term's postings and moves to the next term.
    fn take(&mut self, ids: &mut Vec<u32>, tfs: &mut Vec<u16>) -> io::Result<()>;
}

/// A spilled run, read in order.
struct RunTerms {
    input: BufReader<File>,
    term: Option<String>,
}

impl RunTerms {
    fn new(input: BufReader<File>) -> io::Result<RunTerms> {
        let mut run = RunTerms { input, term: None };
        run.next_term()?;
        Ok(run)
    }

    fn next_term(&mut self) -> io::Result<()> {
        let mut len = [0u8; 1];
        match self.input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                self.term = None;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let mut term = vec![0u8; len[0] as usize];
        self.input.read_exact(&mut term)?;
        self.term = Some(String::from_utf8(term).map_err(|_| bad("run term"))?);
        Ok(())
    }
}

impl TermSource for RunTerms {
    fn term(&self) -> Option<&str> {
        self.term.as_deref()
    }

    fn take(&mut self, ids: &mut Vec<u32>, tfs: &mut Vec<u16>) -> io::Result<()> {
        let mut n = [0u8; 4];
        self.input.read_exact(&mut n)?;
        let n = u32::from_le_bytes(n) as usize;
        let mut raw = vec![0u8; n * 6];
        self.input.read_exact(&mut raw)?;
        ids.extend(
            raw[..4 * n]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        tfs.extend(raw[4 * n..].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
        self.next_term()
    }
}

/// The terms of an existing segment, in order, read a dictionary piece
/// at a time.
struct BaseTerms<'a> {
    base: &'a Segment,
    piece: usize,
    pending: std::collections::VecDeque<(String, TermInfo)>,
}

impl<'a> BaseTerms<'a> {
    fn new(base: &'a Segment) -> io::Result<BaseTerms<'a>> {
        let mut terms = BaseTerms {
            base,
            piece: 0,
            pending: Default::default(),
        };
        terms.refill()?;
        Ok(terms)
    }

    fn refill(&mut self) -> io::Result<()> {
        while self.pending.is_empty() {
            match self.base.dict_piece(self.piece).map_err(bad)? {
                Some(piece) => self.pending.extend(piece),
                None => return Ok(()),
            }
            self.piece += 1;
        }
        Ok(())
    }
}

impl TermSource for BaseTerms<'_> {
    fn term(&self) -> Option<&str> {
        self.pending.front().map(|(t, _)| t.as_str())
    }

    fn take(&mut self, ids: &mut Vec<u32>, tfs: &mut Vec<u16>) -> io::Result<()> {
        if let Some((_, info)) = self.pending.pop_front() {
            let (mut bi, mut bt) = (Vec::new(), Vec::new());
            for b in 0..info.blocks() {
                self.base.block(&info, b, &mut bi, &mut bt);
                ids.extend_from_slice(&bi);
                tfs.extend_from_slice(&bt);
            }
            if self.base.is_broken() {
                return Err(bad("old segment unreadable"));
            }
        }
        self.refill()
    }
}
