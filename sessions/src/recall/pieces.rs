//! [`Pieces`]: a growable array kept in 64 KB pieces, for what a segment's
//! writer holds per message (lengths, keys, the table that finds a key).
//!
//! Why not a `Vec`: one allocation of a megabyte is mapped on its own, and
//! when it is let go the allocator raises its thresholds to its size, so
//! for the rest of the process up to twice that stays resident in the heap
//! instead of going back to the system (issue 40: a rebuild left ~2 MB
//! behind in a broker serving that user afterwards). Pieces stay under the
//! threshold, and growing copies at most one piece.

/// Bytes of one piece.
const PIECE_BYTES: usize = 64 << 10;

pub(super) struct Pieces<T> {
    /// Full pieces but the last, which grows as a `Vec` does (so a small
    /// index holds little).
    pieces: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Pieces<T> {
    fn default() -> Self {
        Pieces {
            pieces: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Pieces<T> {
    /// Items per piece (a power of two for the sizes used here).
    const PER: usize = PIECE_BYTES / std::mem::size_of::<T>();

    /// `n` items, each `value`.
    pub(super) fn filled(n: usize, value: T) -> Pieces<T> {
        let mut pieces = Vec::with_capacity(n.div_ceil(Self::PER));
        let mut left = n;
        while left > 0 {
            let here = left.min(Self::PER);
            pieces.push(vec![value; here]);
            left -= here;
        }
        Pieces { pieces, len: n }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push(&mut self, value: T) {
        if self.len.is_multiple_of(Self::PER) {
            self.pieces.push(Vec::new());
        }
        if let Some(last) = self.pieces.last_mut() {
            last.push(value);
        }
        self.len += 1;
    }

    /// Item `i`; `None` past the end.
    pub(super) fn get(&self, i: usize) -> Option<T> {
        (i < self.len).then(|| self.pieces[i / Self::PER][i % Self::PER])
    }

    /// Sets item `i` (which must be within the length).
    pub(super) fn set(&mut self, i: usize, value: T) {
        if i < self.len {
            self.pieces[i / Self::PER][i % Self::PER] = value;
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.pieces.iter().flat_map(|p| p.iter().copied())
    }
}

impl<T: Copy> FromIterator<T> for Pieces<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut pieces = Pieces::default();
        for item in items {
            pieces.push(item);
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_hold_what_a_vec_would_across_piece_boundaries() {
        let per = Pieces::<u32>::PER;
        let mut p: Pieces<u32> = (0..per as u32 * 2 + 5).collect();
        assert_eq!(p.len(), per * 2 + 5);
        assert_eq!(p.get(per), Some(per as u32));
        assert_eq!(p.get(per * 2 + 5), None);
        p.set(per * 2 + 4, 7);
        assert_eq!(p.iter().last(), Some(7));
        assert_eq!(p.iter().count(), per * 2 + 5);
        let f = Pieces::filled(per + 1, 9u64);
        assert_eq!(
            (f.len(), f.get(per), f.iter().filter(|&v| v == 9).count()),
            (per + 1, Some(9), per + 1)
        );
        assert!(Pieces::<u64>::default().is_empty());
    }
}
