//! One term's postings as a search reads them ([`Listing`]): an in-memory
//! [`Postings`], or a stored segment's list ([`super::segment`]) read a
//! few blocks at a time and joined to the in-memory tail's, with the
//! positions, blocks and peaks the one list holding both would have.

use super::postings::{BLOCK, Peak, Postings};
use super::segment::{Segment, Skip, TermInfo};
use std::cell::RefCell;

/// The postings of one term as a search reads them: an in-memory list, or
/// a stored segment's list ([`super::segment`]) joined to the in-memory
/// tail's. Positions, blocks and peaks are those of the one list holding
/// both, in order, that loading every message would have built.
pub enum Listing<'a> {
    Mem(&'a Postings),
    Joined(Box<Joined<'a>>),
}

/// A segment's list joined to the tail's. Positions below `split` (the
/// segment's full blocks) are read a block at a time, on demand; from
/// `split` on they are in `head`: the segment's last partial block and the
/// tail's postings, cut into blocks from `split` on.
pub struct Joined<'a> {
    seg: &'a Segment,
    info: TermInfo,
    split: usize,
    skips: std::sync::Arc<[Skip]>,
    head: Option<Postings>,
    peak: Peak,
    /// The disk blocks read last: the first one's number, their ids and
    /// counts.
    cache: RefCell<(usize, Vec<u32>, Vec<u16>)>,
}

/// Disk blocks read at once: the block needed and those below it (see
/// [`Segment::blocks`]).
const READ_AHEAD: usize = 16;

impl<'a> Listing<'a> {
    /// `info`'s list in `seg` joined to `tail` (ids above every id in the
    /// segment); `lens` gives every document's length.
    pub fn joined(seg: &'a Segment, info: TermInfo, tail: Option<&Postings>, lens: &[u32]) -> Listing<'a> {
        let skips = seg.skips(&info);
        let df = info.df as usize;
        // Never past the skip entries read (none when the read failed: the
        // segment is then broken, and this list only has to be safe).
        let split = (df / BLOCK).min(skips.len()) * BLOCK;
        let mut head: Option<Postings> = None;
        let mut push = |id: u32, tf: u16| {
            let len = lens.get(id as usize).copied().unwrap_or(0);
            match head.as_mut() {
                Some(h) => h.push(id, tf, len),
                None => head = Some(Postings::new(id, tf, len)),
            }
        };
        if split < df {
            let (mut ids, mut tfs) = (Vec::new(), Vec::new());
            seg.block(&info, split / BLOCK, &mut ids, &mut tfs);
            for (&id, &tf) in ids.iter().zip(&tfs) {
                push(id, tf);
            }
        }
        if let Some(tail) = tail {
            for (&id, &tf) in tail.ids().iter().zip(tail.tfs()) {
                push(id, tf);
            }
        }
        // The segment's whole list, widened by the tail's.
        let mut peak = info.peak;
        if let Some(tail) = tail.map(Postings::peak) {
            peak.widen(tail.max_tf, tail.min_len);
        }
        Listing::Joined(Box::new(Joined {
            seg,
            info,
            split,
            skips,
            head,
            peak,
            cache: RefCell::new((usize::MAX, Vec::new(), Vec::new())),
        }))
    }

    pub fn len(&self) -> usize {
        match self {
            Listing::Mem(p) => p.len(),
            Listing::Joined(j) => j.split + j.head.as_ref().map_or(0, Postings::len),
        }
    }

    /// The id at position `pos`.
    pub fn id(&self, pos: usize) -> u32 {
        match self {
            Listing::Mem(p) => p.ids()[pos],
            Listing::Joined(j) => j.at(pos, |ids, _, i| ids[i], |h, i| h.ids()[i]),
        }
    }

    /// The count at position `pos`.
    pub fn tf(&self, pos: usize) -> u16 {
        match self {
            Listing::Mem(p) => p.tfs()[pos],
            Listing::Joined(j) => j.at(pos, |_, tfs, i| tfs[i], |h, i| h.tfs()[i]),
        }
    }

    /// The first id of the block holding position `pos`.
    pub fn block_first(&self, pos: usize) -> u32 {
        match self {
            Listing::Joined(j) if pos < j.split => j.skips.get(pos / BLOCK).map_or(0, |s| s.first),
            _ => self.id(pos / BLOCK * BLOCK),
        }
    }

    /// The peak of the block holding position `pos`.
    pub fn block_peak(&self, pos: usize) -> Peak {
        match self {
            Listing::Mem(p) => p.block_peak(pos),
            Listing::Joined(j) if pos < j.split => j.skips.get(pos / BLOCK).map_or(j.peak, |s| s.peak),
            Listing::Joined(j) => j.head.as_ref().map_or(j.peak, |h| h.block_peak(pos - j.split)),
        }
    }

    /// The peak of the whole list.
    pub fn peak(&self) -> Peak {
        match self {
            Listing::Mem(p) => p.peak(),
            Listing::Joined(j) => j.peak,
        }
    }

    /// How many of the postings `[0, end)` have an id at or below `doc`.
    pub fn seek(&self, end: usize, doc: u32) -> usize {
        if end == 0 || self.id(end - 1) <= doc {
            return end;
        }
        match self {
            Listing::Mem(p) => gallop(p.ids(), end, doc),
            Listing::Joined(j) => {
                if end > j.split
                    && let Some(head) = &j.head
                    && head.ids()[0] <= doc
                {
                    return j.split + gallop(head.ids(), end - j.split, doc);
                }
                // Within the disk blocks: the last block starting at or
                // below `doc`, then within it.
                let Some(b) = j
                    .skips
                    .get(..j.split / BLOCK)
                    .unwrap_or(&[])
                    .partition_point(|s| s.first <= doc)
                    .checked_sub(1)
                else {
                    return 0;
                };
                let from = b * BLOCK;
                let mut lo = from;
                let mut hi = (from + BLOCK).min(end);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if self.id(mid) <= doc {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }

    /// True when document `id` is in the list. Asked of hits anywhere in
    /// the history (a turn's neighbours): a stored list reads the one
    /// block that could hold `id`, not a window of them.
    pub fn contains(&self, id: u32) -> bool {
        let Listing::Joined(j) = self else {
            let end = self.len();
            let at = self.seek(end, id);
            return at > 0 && self.id(at - 1) == id;
        };
        if let Some(head) = &j.head
            && head.ids().first().is_some_and(|&first| first <= id)
        {
            return head.ids().binary_search(&id).is_ok();
        }
        let skips = j.skips.get(..j.split / BLOCK).unwrap_or(&[]);
        let Some(b) = skips.partition_point(|s| s.first <= id).checked_sub(1) else {
            return false;
        };
        if skips[b].first == id {
            return true;
        }
        {
            let cache = j.cache.borrow();
            let held = cache.1.len() / BLOCK;
            if b >= cache.0 && b < cache.0 + held {
                let from = (b - cache.0) * BLOCK;
                return cache.1[from..from + BLOCK].binary_search(&id).is_ok();
            }
        }
        let (mut ids, mut tfs) = (Vec::new(), Vec::new());
        j.seg.block(&j.info, b, &mut ids, &mut tfs);
        ids.binary_search(&id).is_ok()
    }
}

impl Joined<'_> {
    fn at<T>(&self, pos: usize, disk: impl Fn(&[u32], &[u16], usize) -> T, mem: impl Fn(&Postings, usize) -> T) -> T {
        if pos >= self.split
            && let Some(head) = &self.head
        {
            return mem(head, pos - self.split);
        }
        let b = pos / BLOCK;
        let mut cache = self.cache.borrow_mut();
        let held = cache.1.len() / BLOCK;
        if b < cache.0 || b >= cache.0 + held {
            let from = (b + 1).saturating_sub(READ_AHEAD);
            let (_, ids, tfs) = &mut *cache;
            self.seg.blocks(&self.info, from, b + 1 - from, ids, tfs);
            cache.0 = from;
        }
        let i = pos - cache.0 * BLOCK;
        disk(&cache.1, &cache.2, i)
    }
}

/// With `ids[end - 1] > doc`: how many of `ids[..end]` are at or below
/// `doc`, galloping down from `end` (the cost is the log of the distance,
/// not of the list).
fn gallop(ids: &[u32], end: usize, doc: u32) -> usize {
    let mut hi = end;
    let mut step = 1;
    let mut lo = hi - 1;
    while lo > 0 && ids[lo - 1] > doc {
        hi = lo;
        step *= 2;
        lo = hi.saturating_sub(step);
    }
    lo + ids[lo..hi].partition_point(|&id| id <= doc)
}
