//! The final merge of a segment's writer (`segwrite`): the sorted sources
//! of terms it merges ([`TermSource`]: the spilled runs, and for a tail
//! merge the old segment's terms) and [`TermOut`], which writes one term's
//! list holding at most one block of it. Split from `segwrite` to keep
//! each file in bounds.

use super::postings::{BLOCK, Peak};
use super::segment::{SKIP, Segment, TermInfo};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;

/// A segment, run or list that does not add up.
pub(super) fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// A writer that counts the bytes through it.
pub(super) struct Counted {
    out: BufWriter<File>,
    pub(super) at: u64,
}

impl Counted {
    pub(super) fn new(file: File) -> Counted {
        Counted {
            out: BufWriter::with_capacity(1 << 16, file),
            at: 0,
        }
    }

    pub(super) fn into_file(self) -> io::Result<File> {
        self.out.into_inner().map_err(|e| e.into_error())
    }

    /// Writes `bytes` at `at`, before what was written since: flushed
    /// first, so the buffer holds nothing that would land on it later.
    fn write_back(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().write_all_at(bytes, at)
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

/// One term's postings written as the segment stores them (see
/// [`super::segment`]): a skip entry per block (first id, highest count,
/// shortest message), then the blocks (ids, then counts), cut as
/// [`super::postings::Postings`] cuts them. The skip table comes first but
/// is known only once the blocks were read: a list of at most
/// `gathered_blocks` blocks is gathered and written whole at its end; a
/// longer one is written block by block behind room left for its table,
/// which is written into that room at the end. Either way one block of
/// postings is held, plus the skip entries (10 bytes a block).
#[derive(Default)]
pub(super) struct TermOut {
    df: u32,
    seen: u32,
    /// The blocks' bytes, when gathered; `None` while streaming.
    gathered: Option<Vec<u8>>,
    skips: Vec<u8>,
    ids: Vec<u32>,
    tfs: Vec<u16>,
    whole: Option<Peak>,
}

impl TermOut {
    pub(super) fn start(&mut self, out: &mut Counted, df: u32, gathered_blocks: usize) -> io::Result<()> {
        if df == 0 {
            return Err(bad("empty postings"));
        }
        let blocks = (df as usize).div_ceil(BLOCK);
        self.df = df;
        self.seen = 0;
        self.skips.clear();
        self.whole = None;
        let mut gathered = self.gathered.take().unwrap_or_default();
        gathered.clear();
        if blocks <= gathered_blocks {
            self.gathered = Some(gathered);
        } else {
            // Room for the skip table, filled in by `end`.
            let room = [0u8; 1024];
            let mut left = blocks * SKIP as usize;
            while left > 0 {
                let n = left.min(room.len());
                out.write_all(&room[..n])?;
                left -= n;
            }
        }
        Ok(())
    }

    pub(super) fn push(
        &mut self,
        out: &mut Counted,
        ids: &[u32],
        tfs: &[u16],
        lens: &dyn Fn(u32) -> u32,
    ) -> io::Result<()> {
        for (&id, &tf) in ids.iter().zip(tfs) {
            self.ids.push(id);
            self.tfs.push(tf);
            if self.ids.len() == BLOCK {
                self.block(out, lens)?;
            }
        }
        Ok(())
    }

    /// Writes the postings held as one block.
    fn block(&mut self, out: &mut Counted, lens: &dyn Fn(u32) -> u32) -> io::Result<()> {
        let Some(&first) = self.ids.first() else {
            return Ok(());
        };
        self.seen = self
            .seen
            .checked_add(self.ids.len() as u32)
            .filter(|&n| n <= self.df)
            .ok_or_else(|| bad("more postings than counted"))?;
        let len_of = lens;
        let mut peak = Peak {
            max_tf: self.tfs[0],
            min_len: len_of(first),
        };
        for (&id, &tf) in self.ids.iter().zip(&self.tfs) {
            peak.max_tf = peak.max_tf.max(tf);
            peak.min_len = peak.min_len.min(len_of(id));
        }
        self.skips.extend_from_slice(&first.to_le_bytes());
        self.skips.extend_from_slice(&peak.max_tf.to_le_bytes());
        self.skips.extend_from_slice(&peak.min_len.to_le_bytes());
        let w = self.whole.get_or_insert(peak);
        w.max_tf = w.max_tf.max(peak.max_tf);
        w.min_len = w.min_len.min(peak.min_len);
        let mut bytes = [0u8; BLOCK * 6];
        let n = self.ids.len();
        for (i, id) in self.ids.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
        }
        for (i, tf) in self.tfs.iter().enumerate() {
            bytes[n * 4 + i * 2..n * 4 + i * 2 + 2].copy_from_slice(&tf.to_le_bytes());
        }
        match &mut self.gathered {
            Some(gathered) => gathered.extend_from_slice(&bytes[..n * 6]),
            None => out.write_all(&bytes[..n * 6])?,
        }
        self.ids.clear();
        self.tfs.clear();
        Ok(())
    }

    /// Writes what is left and the skip table (the list began at `at`);
    /// returns the peak of the whole list.
    pub(super) fn end(&mut self, out: &mut Counted, at: u64, lens: &dyn Fn(u32) -> u32) -> io::Result<Peak> {
        self.block(out, lens)?;
        if self.seen != self.df {
            return Err(bad("fewer postings than counted"));
        }
        match &self.gathered {
            Some(gathered) => {
                out.write_all(&self.skips)?;
                out.write_all(gathered)?;
            }
            None => out.write_back(&self.skips, at)?,
        }
        self.whole.ok_or_else(|| bad("empty postings"))
    }
}

/// Where a source hands a term's postings, a piece (ids, counts) at a time.
pub(super) type Sink<'s> = dyn FnMut(&[u32], &[u16]) -> io::Result<()> + 's;

/// A sorted source of terms and their postings for the final merge.
pub(super) trait TermSource {
    /// The current term, `None` when done.
    fn term(&self) -> Option<&str>;
    /// How many postings of the current term this source holds.
    fn df(&self) -> u32;
    /// Hands the current term's postings to `each`, a piece at a time
    /// (ids and counts), and moves to the next term.
    fn take(&mut self, each: &mut Sink<'_>) -> io::Result<()>;
}

/// A spilled run, read in order: per term its length, the term, its
/// postings' count, ids and counts.
pub(super) struct RunTerms {
    input: BufReader<File>,
    term: Option<(String, u32)>,
}

impl RunTerms {
    pub(super) fn new(input: BufReader<File>) -> io::Result<RunTerms> {
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
        let mut n = [0u8; 4];
        self.input.read_exact(&mut n)?;
        let term = String::from_utf8(term).map_err(|_| bad("run term"))?;
        self.term = Some((term, u32::from_le_bytes(n)));
        Ok(())
    }
}

impl TermSource for RunTerms {
    fn term(&self) -> Option<&str> {
        self.term.as_ref().map(|(t, _)| t.as_str())
    }

    fn df(&self) -> u32 {
        self.term.as_ref().map_or(0, |(_, n)| *n)
    }

    fn take(&mut self, each: &mut Sink<'_>) -> io::Result<()> {
        // A run holds at most `RUN_POSTINGS` postings: read whole, and let
        // go before the next source's are read.
        let n = self.df() as usize;
        let mut raw = vec![0u8; n * 6];
        self.input.read_exact(&mut raw)?;
        let ids: Vec<u32> = raw[..4 * n]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let tfs: Vec<u16> = raw[4 * n..]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        drop(raw);
        each(&ids, &tfs)?;
        self.next_term()
    }
}

/// The terms of an existing segment, in order, read a dictionary piece
/// at a time.
pub(super) struct BaseTerms<'a> {
    base: &'a Segment,
    piece: usize,
    pending: std::collections::VecDeque<(String, TermInfo)>,
}

impl<'a> BaseTerms<'a> {
    pub(super) fn new(base: &'a Segment) -> io::Result<BaseTerms<'a>> {
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

    fn df(&self) -> u32 {
        self.pending.front().map_or(0, |(_, info)| info.df)
    }

    fn take(&mut self, each: &mut Sink<'_>) -> io::Result<()> {
        if let Some((_, info)) = self.pending.pop_front() {
            let (mut ids, mut tfs) = (Vec::new(), Vec::new());
            for b in 0..info.blocks() {
                self.base.block(&info, b, &mut ids, &mut tfs);
                if self.base.is_broken() {
                    return Err(bad("old segment unreadable"));
                }
                each(&ids, &tfs)?;
            }
        }
        self.refill()
    }
}
