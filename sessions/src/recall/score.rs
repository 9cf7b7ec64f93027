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
//! below compares with scoring every document, score for score.
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

use super::bm25::{Bm25, DEAD, Doc, Hit};
use super::postings::{BLOCK, Peak, Postings};
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
    list: &'a Postings,
    ids: &'a [u32],
    tfs: &'a [u16],
    weight: f32,
    /// [`Norm::bound`] over the whole list.
    bound: f32,
    /// Postings `[0, end)` are still ahead; the current one is `end - 1`.
    end: usize,
}

impl Cursor<'_> {
    fn current(&self) -> Option<u32> {
        self.end.checked_sub(1).map(|p| self.ids[p])
    }

    /// Moves down to the newest posting at or below `doc` (galloping: the
    /// cost is the log of the distance, not of the list).
    fn seek(&mut self, doc: u32) {
        let ids = self.ids;
        let mut hi = self.end;
        if hi == 0 || ids[hi - 1] <= doc {
            return;
        }
        let mut step = 1;
        let mut lo = hi - 1;
        while lo > 0 && ids[lo - 1] > doc {
            hi = lo;
            step *= 2;
            lo = hi.saturating_sub(step);
        }
        self.end = lo + ids[lo..hi].partition_point(|&id| id <= doc);
    }
}

impl Bm25 {
    /// BM25 over weighted query terms; the `limit` best live documents for
    /// which `keep` holds, best first. Asks `keep` of every document: for
    /// `/session search` and tests; a turn names what it skips by id
    /// ([`Bm25::search_with`]).
    pub fn search(&self, query: &[(String, f32)], limit: usize, keep: impl Fn(&Doc) -> bool) -> Vec<Hit> {
        let skip: Vec<u32> = (0..self.lens.len() as u32)
            .filter(|&id| self.lens[id as usize] != DEAD && !keep(self.doc(id)))
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
    fn walk(
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
        // In query order: every score and bound is summed in this order.
        let mut terms: Vec<Cursor> = query
            .iter()
            .filter_map(|(term, weight)| {
                let list = self.postings.get(term.as_str())?;
                let weight = self.idf(term) * weight;
                (weight > 0.0).then(|| Cursor {
                    term: term.as_str(),
                    list,
                    ids: list.ids(),
                    tfs: list.tfs(),
                    weight,
                    bound: norm.bound(weight, list.peak()),
                    end: list.len(),
                })
            })
            .collect();
        // Weakest first: the order in which terms stop naming candidates.
        let mut weakest: Vec<usize> = (0..terms.len()).collect();
        weakest.sort_by(|&a, &b| terms[a].bound.total_cmp(&terms[b].bound).then(a.cmp(&b)));
        // Terms that may still name a candidate; the others only add.
        let mut essential = vec![true; terms.len()];
        // `weakest[passed]` stops naming candidates once the `limit`-th
        // best reaches `stop_at`.
        let (mut passed, mut stop_at) = next_to_stop(&terms, &essential, &weakest, 0);
        let mut floor: Option<f32> = None;
        let mut skip_end = scratch.skip.len();
        // The newest document an essential term still holds is next.
        let next = |terms: &[Cursor], essential: &[bool]| {
            terms
                .iter()
                .zip(essential)
                .filter(|(_, e)| **e)
                .filter_map(|(c, _)| c.current())
                .max()
        };
        let (mut steps, mut cut) = (0, None::<Cut>);
        while let Some(doc) = next(&terms, &essential) {
            if steps == budget {
                // Every document newer than `doc` is decided.
                if let Some(cut) = cut.as_mut() {
                    cut.stopped = Some(doc);
                    break;
                }
                // From here on only the strongest words whose postings
                // left fit in a budget anew still name candidates (the
                // others add to them).
                let (mut through, mut left) = (Vec::new(), 0usize);
                for &t in weakest.iter().rev().filter(|&&t| essential[t]) {
                    let ahead = terms[t].end;
                    if ahead > 0 && left + ahead <= budget as usize {
                        left += ahead;
                        through.push(t);
                    }
                }
                for (t, essential) in essential.iter_mut().enumerate() {
                    *essential &= through.contains(&t);
                }
                (passed, stop_at) = next_to_stop(&terms, &essential, &weakest, passed);
                cut = Some(Cut {
                    at: doc,
                    through: through.iter().map(|&t| terms[t].term.to_string()).collect(),
                    stopped: None,
                });
                steps = 0;
                continue;
            }
            steps += 1;
            if let Some(floor) = floor {
                // The block peaks at `doc` bound every document in
                // `[from, doc]`: skip them all if even that cannot win.
                let (mut bound, mut from) = (0f32, 0u32);
                for (cursor, essential) in terms.iter().zip(&essential) {
                    bound += if !essential {
                        cursor.bound
                    } else {
                        match cursor.current() {
                            Some(at) if at == doc => {
                                let pos = cursor.end - 1;
                                from = from.max(cursor.ids[pos / BLOCK * BLOCK]);
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
                if bound <= floor {
                    let Some(below) = from.checked_sub(1) else { break };
                    for (cursor, _) in terms.iter_mut().zip(&essential).filter(|(_, e)| **e) {
                        cursor.seek(below);
                    }
                    continue;
                }
            }
            while skip_end > 0 && scratch.skip[skip_end - 1] > doc {
                skip_end -= 1;
            }
            let skipped = skip_end > 0 && scratch.skip[skip_end - 1] == doc;
            let len = self.lens[doc as usize];
            if !skipped && len != DEAD {
                let mut score = 0f32;
                for (cursor, essential) in terms.iter_mut().zip(&essential) {
                    if !essential {
                        cursor.seek(doc);
                    }
                    if cursor.current() == Some(doc) {
                        score += norm.score(cursor.weight, cursor.tfs[cursor.end - 1], len);
                    }
                }
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
                        while stop_at <= worst.0.score {
                            essential[weakest[passed]] = false;
                            (passed, stop_at) = next_to_stop(&terms, &essential, &weakest, passed + 1);
                        }
                    }
                }
            }
            for (cursor, _) in terms.iter_mut().zip(&essential).filter(|(_, e)| **e) {
                if cursor.current() == Some(doc) {
                    cursor.end -= 1;
                }
            }
        }
        let mut hits: Vec<Hit> = scratch.top.drain().map(|w| w.0).collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
        (hits, cut)
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
struct Cut {
    at: u32,
    through: Vec<String>,
    stopped: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::bm25::Source;
    use crate::recall::bm25::tests::at;
    use proptest::prelude::*;

    /// The oracle: every live document not skipped, scored term by term in
    /// query order, best first (ties to the newer), the first `limit`.
    fn exhaustive(index: &Bm25, query: &[(String, f32)], limit: usize, skip: &[u32]) -> Vec<Hit> {
        exhaustive_within(index, query, limit, skip, None)
    }

    /// [`exhaustive`] over the documents a walk `cut` there looked at (all
    /// with `None`): what it must return.
    fn exhaustive_within(
        index: &Bm25,
        query: &[(String, f32)],
        limit: usize,
        skip: &[u32],
        cut: Option<&Cut>,
    ) -> Vec<Hit> {
        let norm = Norm::of(index);
        let looked_at = |id: u32| {
            let Some(cut) = cut else { return true };
            let holds = |term: &String| {
                index
                    .postings
                    .get(term.as_str())
                    .is_some_and(|list| list.ids().binary_search(&id).is_ok())
            };
            id > cut.at || (cut.through.iter().any(holds) && cut.stopped.is_none_or(|s| id > s))
        };
        let mut all: Vec<Hit> = (0..index.lens.len() as u32)
            .filter(|&id| index.lens[id as usize] != DEAD && !skip.contains(&id) && looked_at(id))
            .map(|id| {
                let mut score = 0f32;
                for (term, weight) in query {
                    let weight = index.idf(term) * weight;
                    let Some(list) = index.postings.get(term.as_str()) else {
                        continue;
                    };
                    if weight <= 0.0 {
                        continue;
                    }
                    if let Ok(pos) = list.ids().binary_search(&id) {
                        score += norm.score(weight, list.tfs()[pos], index.lens[id as usize]);
                    }
                }
                Hit { doc: id, score }
            })
            .filter(|h| h.score > 0.0)
            .collect();
        all.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
        all.truncate(limit);
        all
    }

    fn q(text: &str) -> Vec<(String, f32)> {
        text.split(' ').map(|t| (t.to_string(), 1.0)).collect()
    }

    #[test]
    fn among_equal_scores_the_newest_documents_win() {
        let mut index = Bm25::default();
        for k in 0..3000u64 {
            index.add(k, at(1), Source::User, format!("build failed again step{}", k % 3));
        }
        let hits = index.search(&q("build"), 24, |_| true);
        let ids: Vec<u32> = hits.iter().map(|h| h.doc).collect();
        assert_eq!(ids, (2976..3000).rev().collect::<Vec<u32>>());
        assert_eq!(hits, exhaustive(&index, &q("build"), 24, &[]));
    }

    #[test]
    fn a_common_word_still_finds_documents_holding_only_it() {
        let mut index = Bm25::default();
        for k in 0..3000u64 {
            index.add(k, at(1), Source::User, format!("common filler{}", k % 50));
        }
        index.add(5000, at(2), Source::User, "rare thing".into());
        index.add(5001, at(2), Source::User, "rare common".into());
        let hits = index.search(&q("rare common"), 24, |_| true);
        let keys: Vec<u64> = hits.iter().take(2).map(|h| index.doc(h.doc).key).collect();
        assert_eq!(keys, [5001, 5000]);
        assert_eq!(hits.len(), 24);
        assert_eq!(hits, exhaustive(&index, &q("rare common"), 24, &[]));
    }

    /// Builds the index of `docs` (word numbers), removes some, and
    /// compares the pruned search within `budget` with [`exhaustive`] over
    /// what it looked at, bit for bit.
    fn same_as_exhaustive(
        docs: &[Vec<usize>],
        word: impl Fn(usize) -> String,
        removed: &[prop::sample::Index],
        skipped: &[prop::sample::Index],
        query: &[(usize, f32)],
        limit: usize,
        budget: u32,
    ) -> Result<(), TestCaseError> {
        let mut index = Bm25::default();
        for (k, words) in docs.iter().enumerate() {
            let text = words.iter().map(|&n| word(n)).collect::<Vec<_>>().join(" ");
            index.add(k as u64, at(1), Source::User, text);
        }
        for r in removed {
            index.remove(r.index(docs.len()) as u64);
        }
        let query: Vec<(String, f32)> = query.iter().map(|&(n, w)| (word(n), w)).collect();
        let bound = index.id_bound() as usize;
        let skip: Vec<u32> = skipped.iter().map(|s| s.index(bound) as u32).collect();
        let mut scratch = Scratch::default();
        // Twice with one scratch: a reused scratch must start clean.
        for _ in 0..2 {
            let (fast, cut) = index.walk(&mut scratch, &query, limit, &skip, budget);
            let slow = exhaustive_within(&index, &query, limit, &skip, cut.as_ref());
            let bits = |hits: &[Hit]| hits.iter().map(|h| (h.doc, h.score.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&fast), bits(&slow));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn pruned_search_returns_exactly_what_scoring_everything_returns(
            docs in prop::collection::vec(prop::collection::vec(0usize..40, 1..12), 1..400),
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
            skipped in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            query in prop::collection::vec((0usize..40, prop_oneof![Just(0.2f32), Just(1.0), 0.1f32..1.0]), 1..8),
            limit in 1usize..30,
            // Mostly more than any walk here takes; else a walk cut short,
            // which must be exact over the documents it looked at.
            budget in prop_oneof![3 => Just(WALK_BUDGET), 1 => 0u32..300],
        ) {
            // A skewed vocabulary: low word numbers are common.
            same_as_exhaustive(&docs, |n| format!("w{}", n * n / 40), &removed, &skipped, &query, limit, budget)?;
        }

        #[test]
        fn pruned_search_breaks_ties_like_scoring_everything(
            docs in prop::collection::vec(prop::collection::vec(0usize..5, 1..4), 1..500),
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
            skipped in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            query in prop::collection::vec((0usize..5, Just(1.0f32)), 1..4),
            limit in 1usize..40,
        ) {
            // Five words, one to three a document: most scores are equal.
            same_as_exhaustive(&docs, |n| format!("w{n}"), &removed, &skipped, &query, limit, WALK_BUDGET)?;
        }
    }

    /// The bench's seeded history, in small: the documents holding both
    /// `build` and `s1` all score alike, and the shorter ones holding `s1`
    /// alone lift every block's bound past that tie, so no bound separates
    /// the candidates.
    fn add_look_alikes(index: &mut Bm25, keys: std::ops::Range<u64>) {
        for k in keys {
            let text = if k % 2 == 0 {
                format!("why did the build fail on step s{}", k % 3)
            } else {
                format!("step s{} rebuilt", k % 3)
            };
            index.add(k, at(1), Source::User, text);
        }
    }

    #[test]
    fn past_the_budget_the_rarest_word_still_finds_the_oldest_document() {
        let mut index = Bm25::default();
        index.add(0, at(1), Source::User, "my dentist is doctor felix".into());
        add_look_alikes(&mut index, 1..40_000);
        let query = q("build s1 felix");
        let (hits, cut) = index.walk(&mut Scratch::default(), &query, 24, &[], WALK_BUDGET);
        let cut = cut.expect("the walk reaches its budget");
        assert_eq!(cut.through, ["felix"]);
        assert_eq!(cut.stopped, None, "felix's one posting is well within a second budget");
        assert_eq!(
            hits[0].doc, 0,
            "the oldest document, the only one with the rarest word, ranks first"
        );
        assert_eq!(hits, exhaustive_within(&index, &query, 24, &[], Some(&cut)));
    }

    #[test]
    fn past_the_budget_a_weak_word_names_candidates_while_a_left_out_word_could_lift_them() {
        // `build` is common and bounds higher than `felix`, so `felix`
        // alone of the two fits the second budget and names candidates past
        // the cut. Once the newer `felix build` scores, `felix`'s bound
        // alone cannot beat it, but with `build`'s beside it can: the
        // shorter, older `felix build` must be found. (`felix`'s bound lies
        // between a long `build` document's score and `build`'s bound, so
        // neither word stops naming candidates before the cut.)
        let mut index = Bm25::default();
        index.add(0, at(1), Source::User, "felix build".into());
        index.add(1, at(1), Source::User, "felix build pad pad pad".into());
        for k in 2..1000 {
            let text = if k % 2 == 0 {
                "build pad pad pad pad pad pad pad pad pad"
            } else {
                "pad"
            };
            index.add(k, at(1), Source::User, text.into());
        }
        let query = vec![("felix".to_string(), 0.09), ("build".to_string(), 1.0)];
        let (hits, cut) = index.walk(&mut Scratch::default(), &query, 1, &[], 2);
        let cut = cut.expect("the walk reaches its budget");
        assert_eq!(
            (cut.through.as_slice(), cut.stopped),
            (&["felix".to_string()][..], None)
        );
        assert_eq!(hits, exhaustive_within(&index, &query, 1, &[], Some(&cut)));
        assert_eq!(hits[0].doc, 0, "the shorter `felix build` scores higher");
    }

    #[test]
    fn a_history_of_look_alikes_costs_a_search_no_more_than_its_budget() {
        let mut index = Bm25::default();
        add_look_alikes(&mut index, 0..40_000);
        let query = q("build s1");
        let (hits, cut) = index.walk(&mut Scratch::default(), &query, 24, &[], WALK_BUDGET);
        let cut = cut.expect("the walk reaches its budget");
        // One word was naming candidates by then (`build` only adds), and
        // its postings left do not fit another budget: the walk ends.
        assert!(cut.through.is_empty(), "{cut:?}");
        assert_eq!(hits, exhaustive_within(&index, &query, 24, &[], Some(&cut)));
        // The best are found all the same: the newest documents holding both words.
        assert_eq!(hits.len(), 24);
        assert!(
            hits.iter()
                .all(|h| index.doc(h.doc).text.contains("build") && index.doc(h.doc).text.contains("s1"))
        );
    }
}
