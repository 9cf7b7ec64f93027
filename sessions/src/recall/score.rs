//! BM25 scoring of one owner's index: the exact top `limit` documents for
//! a weighted query, without walking every posting of every common word.
//!
//! Terms are scored heaviest first (highest upper bound first). Once the
//! best that the remaining terms could still add to a document is below
//! the `limit`-th best score so far (MaxScore), no unseen document can
//! enter the top any more: the remaining terms only update the candidates
//! that still could, each found by a binary search in the term's postings
//! instead of a walk of all of them. Up to there the result is the same as
//! scoring everything. One shortcut is not exact: a very common term (see
//! [`COMMON_SHARE`]) is never walked, only added to what rarer terms found
//! (when every term is common, the rarest is walked) — a document holding
//! only common query words is not a useful hit, and walking those lists
//! was most of a turn's cost. The score array lives in a [`Scratch`]
//! reused across a turn's queries, so a query costs what it touches, not
//! the size of the index.
//!
//! Pure CPU over [`Bm25`]; no I/O, no allocation proportional to the
//! index beyond the scratch.

use super::bm25::{Bm25, DEAD, Doc, Hit};

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// A term in more than one document in this many (and in more than
/// [`COMMON_MIN`]) is common: its postings are not walked, it only adds to
/// documents the rarer terms found. Such a term says little about a
/// document (IDF under ~3) and costs the most to walk.
const COMMON_SHARE: usize = 20;
/// Below this many postings a term is always walked: small indexes are
/// scored exactly.
const COMMON_MIN: usize = 1024;

/// Score array and the list of what it touched, kept between searches
/// (all zero between them).
#[derive(Debug, Default)]
pub struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
    candidates: Vec<u32>,
    ranked: Vec<f32>,
}

impl Scratch {
    /// Zeroes what the last search touched.
    fn reset(&mut self, docs: usize) {
        for id in self.touched.drain(..) {
            self.scores[id as usize] = 0.0;
        }
        if self.scores.len() < docs {
            self.scores.resize(docs, 0.0);
        }
        self.candidates.clear();
    }
}

/// The `limit`-th best of `scores` at `ids` (excluded documents score
/// `-inf`), or 0 when fewer than `limit` qualify; `ranked` is scratch.
fn threshold(scores: &[f32], ids: &[u32], ranked: &mut Vec<f32>, limit: usize) -> f32 {
    ranked.clear();
    ranked.extend(ids.iter().map(|&id| scores[id as usize]).filter(|s| *s > 0.0));
    if ranked.len() < limit {
        return 0.0;
    }
    let (_, nth, _) = ranked.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
    *nth
}

/// The first position at or after `from` whose document is not below
/// `id` (`list` ascending): an exponential then binary search, so walking
/// sorted candidates costs the log of the gaps, not of the whole list.
fn gallop(list: &[(u32, u16)], from: usize, id: u32) -> usize {
    let (mut lo, mut hi, mut step) = (from, from, 1);
    while hi < list.len() && list[hi].0 < id {
        lo = hi + 1;
        hi = from + step;
        step *= 2;
    }
    let hi = hi.min(list.len());
    lo + list[lo..hi].partition_point(|p| p.0 < id)
}

impl Bm25 {
    /// BM25 over weighted query terms; the `limit` best live documents for
    /// which `keep` holds, best first.
    pub fn search(&self, query: &[(String, f32)], limit: usize, keep: impl Fn(&Doc) -> bool) -> Vec<Hit> {
        self.search_with(&mut Scratch::default(), query, limit, keep)
    }

    /// [`Bm25::search`] reusing `scratch` (one per turn).
    pub fn search_with(
        &self,
        scratch: &mut Scratch,
        query: &[(String, f32)],
        limit: usize,
        keep: impl Fn(&Doc) -> bool,
    ) -> Vec<Hit> {
        scratch.reset(self.lens.len());
        if self.live_docs == 0 || query.is_empty() || limit == 0 {
            return Vec::new();
        }
        let avg_len = (self.live_len as f32 / self.live_docs as f32).max(1.0);
        let (norm_base, norm_per_term) = (K1 * (1.0 - B), K1 * B / avg_len);
        // Each term's postings and weight; the weight times (K1 + 1) bounds
        // what the term can add to one document.
        let mut terms: Vec<(&[(u32, u16)], f32)> = query
            .iter()
            .filter_map(|(term, weight)| {
                let list = self.postings.get(term)?;
                let weight = self.idf(term) * weight;
                (weight > 0.0).then_some((list.as_slice(), weight))
            })
            .collect();
        // Rare terms are walked, heaviest first; common ones (or all but the
        // rarest, if every term is common) only score the candidates.
        let cap = (self.lens.len() / COMMON_SHARE).max(COMMON_MIN);
        let rarest = terms.iter().map(|(l, _)| l.len()).min().unwrap_or(0);
        terms.sort_by(|a, b| {
            let common = |t: &(&[(u32, u16)], f32)| t.0.len() > cap.max(rarest);
            common(a).cmp(&common(b)).then(b.1.total_cmp(&a.1))
        });
        let walked = terms.iter().take_while(|t| t.0.len() <= cap.max(rarest)).count();
        // What the terms from each one on can still add, summed from the
        // end so that after the last term it is exactly zero.
        let mut remaining = vec![0f32; terms.len() + 1];
        for i in (0..terms.len()).rev() {
            remaining[i] = remaining[i + 1] + terms[i].1 * (K1 + 1.0);
        }
        let term_score = |weight: f32, tf: u16, len: u32| {
            let tf = f32::from(tf);
            weight * tf * (K1 + 1.0) / (tf + norm_base + norm_per_term * len as f32)
        };
        let mut pruning = false;
        let mut best = 0f32;
        for (i, (list, weight)) in terms.into_iter().enumerate() {
            if !pruning && i >= walked {
                // From here on, only what the walked terms found can gain.
                pruning = true;
                let Scratch {
                    scores,
                    touched,
                    candidates,
                    ranked,
                } = &mut *scratch;
                let floor = threshold(scores, touched, ranked, limit);
                let rest = remaining[i];
                candidates.extend(
                    touched
                        .iter()
                        .filter(|&&id| scores[id as usize] > 0.0 && scores[id as usize] + rest >= floor),
                );
                candidates.sort_unstable();
            }
            let rest = remaining[i + 1];
            if !pruning {
                // Essential term: every document it names may enter the top.
                for &(id, tf) in list {
                    let len = self.lens[id as usize];
                    if len == DEAD {
                        continue;
                    }
                    let score = &mut scratch.scores[id as usize];
                    if *score == 0.0 {
                        scratch.touched.push(id);
                        if !keep(self.doc(id)) {
                            *score = f32::NEG_INFINITY;
                            continue;
                        }
                    }
                    *score += term_score(weight, tf, len);
                    best = best.max(*score);
                }
                // The k-th best can only stop unseen documents if what is
                // left is below the best so far; only then is it worth
                // computing.
                if rest >= best {
                    continue;
                }
                let Scratch {
                    scores,
                    touched,
                    candidates,
                    ranked,
                } = &mut *scratch;
                let floor = threshold(scores, touched, ranked, limit);
                if rest < floor {
                    pruning = true;
                    candidates.extend(touched.iter().filter(|&&id| scores[id as usize] + rest >= floor));
                    candidates.sort_unstable();
                }
                continue;
            }
            // Non-essential term: only the candidates left can still gain.
            let mut from = 0;
            for &id in &scratch.candidates {
                from = gallop(list, from, id);
                match list.get(from) {
                    Some(&(found, tf)) if found == id => {
                        scratch.scores[id as usize] += term_score(weight, tf, self.lens[id as usize]);
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            let Scratch {
                scores,
                candidates,
                ranked,
                ..
            } = &mut *scratch;
            let floor = threshold(scores, candidates, ranked, limit);
            candidates.retain(|&id| scores[id as usize] + rest >= floor);
        }
        let pool = if pruning { &scratch.candidates } else { &scratch.touched };
        let mut hits: Vec<Hit> = pool
            .iter()
            .map(|&doc| Hit {
                doc,
                score: scratch.scores[doc as usize],
            })
            .filter(|h| h.score > 0.0)
            .collect();
        // Ties go to the newer document: a later statement supersedes.
        let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc));
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit, order);
            hits.truncate(limit);
        }
        hits.sort_by(order);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::bm25::Source;
    use crate::recall::bm25::tests::at;
    use proptest::prelude::*;

    /// Every live kept document scored term by term, best first: what
    /// pruning must reproduce.
    fn brute_force(index: &Bm25, query: &[(String, f32)], keep: impl Fn(&Doc) -> bool) -> Vec<(u32, f32)> {
        let mut all: Vec<(u32, f32)> = (0..index.lens.len() as u32)
            .filter(|&id| index.lens[id as usize] != DEAD && keep(index.doc(id)))
            .map(|id| (id, index.search(query, usize::MAX, |d| d.key == index.doc(id).key)))
            .filter_map(|(id, hits)| hits.first().map(|h| (id, h.score)))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        all
    }

    #[test]
    fn a_very_common_word_only_adds_to_what_rarer_words_found() {
        let mut index = Bm25::default();
        for k in 0..3000u64 {
            index.add(k, at(1), Source::User, format!("common filler{}", k % 50));
        }
        index.add(5000, at(2), Source::User, "rare thing".into());
        index.add(5001, at(2), Source::User, "rare common".into());
        let q = |text: &str| -> Vec<(String, f32)> { text.split(' ').map(|t| (t.to_string(), 1.0)).collect() };
        let hits = index.search(&q("rare common"), 24, |_| true);
        let keys: Vec<u64> = hits.iter().map(|h| index.doc(h.doc).key).collect();
        assert_eq!(keys, [5001, 5000]);
        // Alone, the common word is walked: its documents are found.
        assert_eq!(index.search(&q("common"), 24, |_| true).len(), 24);
    }

    proptest! {
        #[test]
        fn pruned_search_returns_the_scores_of_scoring_everything(
            docs in prop::collection::vec(prop::collection::vec(0usize..40, 1..12), 1..120),
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
            query in prop::collection::vec((0usize..40, 0.1f32..1.0), 1..8),
            limit in 1usize..10,
        ) {
            // A skewed vocabulary: low word numbers are common.
            let word = |n: usize| format!("w{}", n * n / 40);
            let mut index = Bm25::default();
            for (k, words) in docs.iter().enumerate() {
                let text = words.iter().map(|&n| word(n)).collect::<Vec<_>>().join(" ");
                index.add(k as u64, at(1), Source::User, text);
            }
            for r in &removed {
                index.remove(r.index(docs.len()) as u64);
            }
            let query: Vec<(String, f32)> = query.iter().map(|&(n, w)| (word(n), w)).collect();
            let keep = |d: &Doc| d.key % 7 != 3;
            let mut scratch = Scratch::default();
            // Twice with one scratch: a reused scratch must start clean.
            for _ in 0..2 {
                let fast = index.search_with(&mut scratch, &query, limit, keep);
                let slow = brute_force(&index, &query, keep);
                prop_assert_eq!(fast.len(), slow.len().min(limit));
                for (hit, (_, expected)) in fast.iter().zip(&slow) {
                    prop_assert!((hit.score - expected).abs() < 1e-4, "{fast:?} vs {slow:?}");
                    prop_assert!(keep(index.doc(hit.doc)));
                }
            }
        }
    }
}
