//! Specs of the pruned search: bit for bit what scoring every document
//! returns (over what a walk cut short looked at), and the cut walk's
//! promises on look-alike histories.

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
fn exhaustive_within(index: &Bm25, query: &[(String, f32)], limit: usize, skip: &[u32], cut: Option<&Cut>) -> Vec<Hit> {
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
