//! BM25 scoring of one owner's index: the exact top `limit` documents for
//! a weighted query — the same documents, scores and order as scoring
//! every document — without reading every posting of every query term.
//!
//! Document at a time, newest first (ids descending), with two bounds from
//! [`super::postings`]: each term's peak over its whole list, and each
//! block's peak over its 64 postings.
//! - *MaxScore*: terms are ordered by their bound; once the `limit`-th best
//!   score so far is at least what the weakest term and every term already
//!   only adding could give together, it no longer names candidates either:
//!   it only adds to documents the others found (looked up by galloping
//!   search in their postings).
//! - *Block-max*: before a candidate is scored, the block peaks around it
//!   bound every document from the start of those blocks up to it; if that
//!   bound cannot beat the `limit`-th best, the whole range is skipped.
//!
//! Ties go to the newer document (a later statement supersedes), so a
//! document that can only *equal* the `limit`-th best, found after it and
//! older, can be skipped: walking newest first lets a history of
//! near-identical messages be skipped block by block. Exactness: a score is
//! always summed in the query's term order, as scoring everything does; a
//! bound is summed in that same order from per-term bounds that are never
//! below the term's true contribution (float additions are monotone), so a
//! document passed over could not have entered the top — the property test
//! in `score_tests.rs` compares with scoring every document, score for
//! score.
//!
//! *Bounded*: a search walks at most [`WALK_BUDGET`] steps (a document
//! scored, or a range passed over by its bound) before it narrows. Where
//! the bounds cannot separate the candidates — a query whose words are
//! common across a long history and whose documents score alike, the
//! pathological case of dynamic pruning — an exact walk would score tens
//! of thousands of them on every turn (30 ms at 10⁶ messages:
//! BENCHMARKS.md, "Growth with history"). Past the budget only the
//! query's strongest words (highest bound first: its rarest) whose
//! postings left fit in one budget more still name candidates; the others
//! only add to them (and count as adding when MaxScore weighs whether one
//! of those words may stop naming candidates too). So the hits are exact
//! over every document newer than where the budget ran out and, older
//! than that, over the documents holding one of those words: an old
//! message found by a rare word is still found, and what is given up is
//! the choice among older documents that hold only common words, which
//! the newer ones match as well as the bounds can tell. A search costs at most two budgets whatever the
//! history (the second is checked too, and stops the walk if it runs
//! out).
//!
//! Pure CPU over [`Bm25`]; no I/O, no allocation proportional to the
//! index (a turn's queries share one [`Scratch`]).

use super::bm25::{Bm25, DEAD, Hit};
use super::listing::Listing;
use super::postings::Peak;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// Relative margin on a bound over postings whose counts differ: the
/// score is monotone in the count, but its float rounding need not be, by
/// a few units in the last place (~5·10⁻⁷); this covers them.
const SLACK: f32 = 1e-5;

/// The most steps one search walks before it narrows, and again after
/// (see the module doc): 1–2 ms at the 100–500 ns a step costs at 10⁶
/// messages. A walk takes at most a step per document, so an owner with
/// fewer documents is never cut short.
pub const WALK_BUDGET: u32 = 4096;

/// Kept between a turn's searches: the top so far and the sorted skips.
#[derive(Debug, Default)]
pub struct Scratch {
    top: BinaryHeap<Worst>,
    skip: Vec<u32>,
}

/// A hit ordered worst first (lowest score, then oldest): the heap's top
/// is the one a better document replaces.
#[derive(Debug, Clone, Copy)]
struct Worst(Hit);

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .score
            .total_cmp(&self.0.score)
            .then(other.0.doc.cmp(&self.0.doc))
    }
}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Worst {}

/// Length normalisation of one search (from the index's average length).
#[derive(Clone, Copy)]
struct Norm {
    base: f32,
    per_term: f32,
}

impl Norm {
    fn of(index: &Bm25) -> Norm {
        let avg_len = (index.live_len as f32 / index.live_docs as f32).max(1.0);
        Norm {
            base: K1 * (1.0 - B),
            per_term: K1 * B / avg_len,
        }
    }

    /// What a term of `weight` (IDF times query weight) found `tf` times
    /// in a document of `len` terms adds to its score.
    fn score(self, weight: f32, tf: u16, len: u32) -> f32 {
        let tf = f32::from(tf);
        weight * tf * (K1 + 1.0) / (tf + self.base + self.per_term * len as f32)
    }

    /// At least what the term adds to any posting under `peak`.
    fn bound(self, weight: f32, peak: Peak) -> f32 {
        let most = self.score(weight, peak.max_tf, peak.min_len);
        // All counts 1: only the length varies, and the rounding of the
        // score is monotone in it.
        if peak.max_tf > 1 { most * (1.0 + SLACK) } else { most }
    }
}

/// One query term's walk through its postings, from the newest down.
struct Cursor<'a> {
    term: &'a str,
    list: Listing<'a>,
    weight: f32,
    /// [`Norm::bound`] over the whole list.
    bound: f32,
    /// Postings `[0, end)` are still ahead; the current one is `end - 1`.
    end: usize,
    /// The id at `end - 1`, kept: a walk asks for it several times a step,
    /// and a stored list's id costs more than a read from memory.
    at: Option<u32>,
}

impl<'a> Cursor<'a> {
    fn new(term: &'a str, list: Listing<'a>, weight: f32, bound: f32) -> Cursor<'a> {
        let mut cursor = Cursor {
            term,
            end: list.len(),
            list,
            weight,
            bound,
            at: None,
        };
        cursor.move_to(cursor.end);
        cursor
    }

    fn current(&self) -> Option<u32> {
        self.at
    }

    fn move_to(&mut self, end: usize) {
        self.end = end;
        self.at = end.checked_sub(1).map(|p| self.list.id(p));
    }

    /// Moves down to the newest posting at or below `doc` (galloping: the
    /// cost is the log of the distance, not of the list).
    fn seek(&mut self, doc: u32) {
        if self.at.is_some_and(|at| at > doc) {
            let end = self.list.seek(self.end, doc);
            self.move_to(end);
        }
    }
}

impl Bm25 {
    /// BM25 over weighted query terms; the `limit` best live documents for
    /// which `keep` holds, best first. Asks `keep` of every document (a
    /// stored one is read back for it): for tests; a turn and `/session
    /// search` name what they skip by id ([`Bm25::search_with`]).
    #[cfg(test)]
    pub fn search(&self, query: &[(String, f32)], limit: usize, keep: impl Fn(&super::bm25::Doc) -> bool) -> Vec<Hit> {
        let skip: Vec<u32> = (0..self.lens.len() as u32)
            .filter(|&id| self.lens[id as usize] != DEAD && !keep(&self.doc(id)))
            .collect();
        self.search_with(&mut Scratch::default(), query, limit, &skip)
    }

    /// [`Bm25::search`] reusing `scratch` (one per turn), leaving out the
    /// documents `skip` names (in any order), within [`WALK_BUDGET`].
    pub fn search_with(&self, scratch: &mut Scratch, query: &[(String, f32)], limit: usize, skip: &[u32]) -> Vec<Hit> {
        let (hits, cut) = self.walk(scratch, query, limit, skip, WALK_BUDGET);
        if let Some(cut) = cut {
            tracing::debug!(
                docs = self.live_docs,
                newer = self.lens.len() - cut.at as usize - 1,
                through = cut.through.len(),
                stopped = cut.stopped.is_some(),
                "recall search reached its budget; older documents were searched through the query's rarest words only"
            );
        }
        hits
    }

    /// The search itself, in at most twice `budget` steps: the hits, and
    /// where the walk was cut short (`None`: it was exact over everything).
    pub(super) fn walk(
        &self,
        scratch: &mut Scratch,
        query: &[(String, f32)],
        limit: usize,
        skip: &[u32],
        budget: u32,
    ) -> (Vec<Hit>, Option<Cut>) {
        scratch.top.clear();
        scratch.skip.clear();
        if self.live_docs == 0 || query.is_empty() || limit == 0 {
            return (Vec::new(), None);
        }
        scratch.skip.extend_from_slice(skip);
        scratch.skip.sort_unstable();
        let norm = Norm::of(self);
        let mut terms = Terms::new(self, query, norm);
        let mut floor: Option<f32> = None;
        let mut skip_end = scratch.skip.len();
        let (mut steps, mut cut) = (0, None::<Cut>);
        while let Some(doc) = terms.next_doc() {
            if steps == budget {
                // Every document newer than `doc` is decided.
                if let Some(cut) = cut.as_mut() {
                    cut.stopped = Some(doc);
                    break;
                }
                cut = Some(terms.narrow(doc, budget));
                steps = 0;
                continue;
            }
            steps += 1;
            if let Some(floor) = floor {
                // The block peaks at `doc` bound every document in
                // `[from, doc]`: skip them all if even that cannot win.
                let (bound, from) = terms.block_bound(doc, norm);
                if bound <= floor {
                    let Some(below) = from.checked_sub(1) else { break };
                    terms.seek_essential(below);
                    continue;
                }
            }
            while skip_end > 0 && scratch.skip[skip_end - 1] > doc {
                skip_end -= 1;
            }
            let skipped = skip_end > 0 && scratch.skip[skip_end - 1] == doc;
            let len = self.lens[doc as usize];
            if !skipped && len != DEAD {
                let score = terms.score(doc, len, norm);
                // Older than everything kept: it must beat the worst, not tie.
                if score > 0.0 && floor.is_none_or(|f| score > f) {
                    scratch.top.push(Worst(Hit { doc, score }));
                    if scratch.top.len() > limit {
                        scratch.top.pop();
                    }
                    if scratch.top.len() == limit
                        && let Some(worst) = scratch.top.peek()
                    {
                        floor = Some(worst.0.score);
                        terms.stop_naming_under(worst.0.score);
                    }
                }
            }
            terms.pass(doc);
        }
        let mut hits: Vec<Hit> = scratch.top.drain().map(|w| w.0).collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
        (hits, cut)
    }
}

/// The query's terms as one walk sees them (MaxScore's state): a cursor
/// per term, the order in which they stop naming candidates, and which
/// still do.
struct Terms<'a> {
    /// In query order: every score and bound is summed in this order.
    cursors: Vec<Cursor<'a>>,
    /// Weakest first: the order in which terms stop naming candidates.
    weakest: Vec<usize>,
    /// Terms that may still name a candidate; the others only add.
    essential: Vec<bool>,
    /// `weakest[passed]` stops naming candidates once the `limit`-th
    /// best reaches `stop_at`.
    passed: usize,
    stop_at: f32,
}

impl<'a> Terms<'a> {
    /// The cursors of the query's terms that `index` holds with a weight
    /// above 0, each at its newest posting; every term names candidates.
    fn new(index: &'a Bm25, query: &'a [(String, f32)], norm: Norm) -> Terms<'a> {
        let cursors: Vec<Cursor> = query
            .iter()
            .filter_map(|(term, weight)| {
                let weight = index.idf(term) * weight;
                if weight <= 0.0 {
                    return None;
                }
                let list = index.listing(term)?;
                let bound = norm.bound(weight, list.peak());
                Some(Cursor::new(term.as_str(), list, weight, bound))
            })
            .collect();
        let mut weakest: Vec<usize> = (0..cursors.len()).collect();
        weakest.sort_by(|&a, &b| cursors[a].bound.total_cmp(&cursors[b].bound).then(a.cmp(&b)));
        let essential = vec![true; cursors.len()];
        let (passed, stop_at) = next_to_stop(&cursors, &essential, &weakest, 0);
        Terms {
            cursors,
            weakest,
            essential,
            passed,
            stop_at,
        }
    }

    /// The newest document an essential term still holds: the next one.
    fn next_doc(&self) -> Option<u32> {
        self.cursors
            .iter()
            .zip(&self.essential)
            .filter(|(_, e)| **e)
            .filter_map(|(c, _)| c.current())
            .max()
    }

    /// The budget ran out at `doc`: from here on only the strongest words
    /// whose postings left fit in a budget anew still name candidates (the
    /// others add to them).
    fn narrow(&mut self, doc: u32, budget: u32) -> Cut {
        let (mut through, mut left) = (Vec::new(), 0usize);
        for &t in self.weakest.iter().rev().filter(|&&t| self.essential[t]) {
            let ahead = self.cursors[t].end;
            if ahead > 0 && left + ahead <= budget as usize {
                left += ahead;
                through.push(t);
            }
        }
        for (t, essential) in self.essential.iter_mut().enumerate() {
            *essential &= through.contains(&t);
        }
        (self.passed, self.stop_at) = next_to_stop(&self.cursors, &self.essential, &self.weakest, self.passed);
        Cut {
            at: doc,
            through: through.iter().map(|&t| self.cursors[t].term.to_string()).collect(),
            stopped: None,
        }
    }

    /// At least the score of every document in `[from, doc]`, from the
    /// block peaks of the essential terms at `doc` and the whole-list bound
    /// of the adding ones; and `from`.
    fn block_bound(&self, doc: u32, norm: Norm) -> (f32, u32) {
        let (mut bound, mut from) = (0f32, 0u32);
        for (cursor, essential) in self.cursors.iter().zip(&self.essential) {
            bound += if !essential {
                cursor.bound
            } else {
                match cursor.current() {
                    Some(at) if at == doc => {
                        let pos = cursor.end - 1;
                        from = from.max(cursor.list.block_first(pos));
                        norm.bound(cursor.weight, cursor.list.block_peak(pos))
                    }
                    Some(at) => {
                        from = from.max(at + 1);
                        0.0
                    }
                    None => 0.0,
                }
            };
        }
        (bound, from)
    }

    /// Moves every essential term down to `below` or older.
    fn seek_essential(&mut self, below: u32) {
        for (cursor, _) in self.cursors.iter_mut().zip(&self.essential).filter(|(_, e)| **e) {
            cursor.seek(below);
        }
    }

    /// `doc`'s score, summed in query order (the adding terms are moved to
    /// it first).
    fn score(&mut self, doc: u32, len: u32, norm: Norm) -> f32 {
        let mut score = 0f32;
        for (cursor, essential) in self.cursors.iter_mut().zip(&self.essential) {
            if !essential {
                cursor.seek(doc);
            }
            if cursor.current() == Some(doc) {
                score += norm.score(cursor.weight, cursor.list.tf(cursor.end - 1), len);
            }
        }
        score
    }

    /// The `limit`-th best is now `worst`: the terms that could not lift a
    /// document past it on their own stop naming candidates.
    fn stop_naming_under(&mut self, worst: f32) {
        while self.stop_at <= worst {
            self.essential[self.weakest[self.passed]] = false;
            (self.passed, self.stop_at) = next_to_stop(&self.cursors, &self.essential, &self.weakest, self.passed + 1);
        }
    }

    /// `doc` is decided: the essential terms move past it.
    fn pass(&mut self, doc: u32) {
        for (cursor, _) in self.cursors.iter_mut().zip(&self.essential).filter(|(_, e)| **e) {
            if cursor.current() == Some(doc) {
                cursor.move_to(cursor.end - 1);
            }
        }
    }
}

/// The first of `weakest[from..]` that still names candidates, and what a
/// document holding none of the terms that would name them once it stopped
/// could score at most: its bound and every adding term's, summed in query
/// order as a score is. Every adding term counts, not just the weaker
/// ones: past a cut the words left out of `through` only add too, and a
/// document holding one of them beside a `through` word is a candidate
/// still. `(terms.len(), ∞)` when no term is left to stop.
fn next_to_stop(terms: &[Cursor], essential: &[bool], weakest: &[usize], from: usize) -> (usize, f32) {
    let Some(at) = (from..weakest.len()).find(|&p| essential[weakest[p]]) else {
        return (weakest.len(), f32::INFINITY);
    };
    let bound = terms
        .iter()
        .zip(essential)
        .enumerate()
        .filter(|&(t, (_, e))| !*e || t == weakest[at])
        .map(|(_, (c, _))| c.bound)
        .fold(0.0, |a, b| a + b);
    (at, bound)
}

/// Where a walk reached its budget (see the module doc). Documents newer
/// than `at` were all looked at; from `at` down only those holding one of
/// the words `through` were candidates, down to `stopped` if the budget
/// ran out again.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cut {
    at: u32,
    through: Vec<String>,
    stopped: Option<u32>,
}

#[cfg(test)]
#[path = "score_tests.rs"]
mod tests;
