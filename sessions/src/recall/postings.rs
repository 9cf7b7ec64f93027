//! One term's postings: the documents holding it (ids ascending) with the
//! term's count in each, cut into blocks of [`BLOCK`] postings that each
//! remember the highest count and the shortest document in them, so a
//! search can bound what a whole block could add to a score without
//! reading it ([`super::score`]).
//!
//! Compact on purpose: a chat history is full of words said once (numbers,
//! names, typos), so a term held by one document is stored inline, with no
//! allocation of its own; longer lists keep ids and counts in two flat
//! arrays (6 bytes a posting) plus 8 bytes a block.

/// Postings per block.
pub const BLOCK: usize = 64;

/// What the postings of one block (or of a whole list) can add at most:
/// the highest term count and the shortest document length among them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peak {
    pub max_tf: u16,
    pub min_len: u32,
}

impl Peak {
    fn of(tf: u16, len: u32) -> Peak {
        Peak {
            max_tf: tf,
            min_len: len,
        }
    }

    pub(super) fn widen(&mut self, tf: u16, len: u32) {
        self.max_tf = self.max_tf.max(tf);
        self.min_len = self.min_len.min(len);
    }
}

/// The postings of one term, never empty.
#[derive(Clone, Debug)]
pub enum Postings {
    /// Held by one document: (id, count, its length).
    One([u32; 1], [u16; 1], u32),
    Many(Box<List>),
}

#[derive(Clone, Debug)]
pub struct List {
    ids: Vec<u32>,
    tfs: Vec<u16>,
    /// One per started block, in order.
    blocks: Vec<Peak>,
    /// Over the whole list.
    peak: Peak,
}

impl Postings {
    /// A list holding one posting: document `id` (of `len` terms) has the
    /// term `tf` times.
    pub fn new(id: u32, tf: u16, len: u32) -> Postings {
        Postings::One([id], [tf], len)
    }

    /// Appends a posting; `id` is above every id already there.
    pub fn push(&mut self, id: u32, tf: u16, len: u32) {
        match self {
            Postings::One([first], [first_tf], first_len) => {
                let mut peak = Peak::of(*first_tf, *first_len);
                peak.widen(tf, len);
                *self = Postings::Many(Box::new(List {
                    ids: vec![*first, id],
                    tfs: vec![*first_tf, tf],
                    blocks: vec![peak],
                    peak,
                }));
            }
            Postings::Many(list) => {
                if list.ids.len().is_multiple_of(BLOCK) {
                    list.blocks.push(Peak::of(tf, len));
                } else if let Some(last) = list.blocks.last_mut() {
                    last.widen(tf, len);
                }
                list.ids.push(id);
                list.tfs.push(tf);
                list.peak.widen(tf, len);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.ids().len()
    }

    /// Document ids, ascending.
    pub fn ids(&self) -> &[u32] {
        match self {
            Postings::One(id, _, _) => id,
            Postings::Many(list) => &list.ids,
        }
    }

    /// Term counts, beside [`Postings::ids`].
    pub fn tfs(&self) -> &[u16] {
        match self {
            Postings::One(_, tf, _) => tf,
            Postings::Many(list) => &list.tfs,
        }
    }

    /// The peak of the block holding position `pos`.
    pub fn block_peak(&self, pos: usize) -> Peak {
        match self {
            Postings::One(_, [tf], len) => Peak::of(*tf, *len),
            Postings::Many(list) => list.blocks[pos / BLOCK],
        }
    }

    /// The peak of the whole list.
    pub fn peak(&self) -> Peak {
        match self {
            Postings::One(_, [tf], len) => Peak::of(*tf, *len),
            Postings::Many(list) => list.peak,
        }
    }

    /// True when document `id` is in the list.
    #[cfg(test)]
    pub fn contains(&self, id: u32) -> bool {
        self.ids().binary_search(&id).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_remember_the_highest_count_and_the_shortest_document() {
        let mut list = Postings::new(0, 1, 10);
        for id in 1..(BLOCK as u32 + 3) {
            let tf = if id == 5 { 4 } else { 1 };
            let len = if id == 7 { 3 } else { 10 };
            list.push(id, tf, len);
        }
        list.push(BLOCK as u32 + 10, 9, 50);
        assert_eq!(list.len(), BLOCK + 4);
        assert_eq!(list.block_peak(0), Peak { max_tf: 4, min_len: 3 });
        assert_eq!(list.block_peak(BLOCK), Peak { max_tf: 9, min_len: 10 });
        assert_eq!(list.peak(), Peak { max_tf: 9, min_len: 3 });
        assert!(list.contains(BLOCK as u32 + 10) && !list.contains(BLOCK as u32 + 5));
        assert_eq!(list.ids().len(), list.tfs().len());
    }
}
