//! What one turn recalls: the queries made from the message (the whole
//! message with a little recent context, each clause of a many-part
//! question, and a second round widened by the rarest words of the first
//! hits), fused by reciprocal rank across the caller's index and the
//! `_shared` index, then neighbouring turns that carry the rest of an
//! answer, then a spread across days so one busy day does not take the
//! whole budget.
//!
//! Pure: works on the two indexes it is given, reads and writes nothing.
//! Never sees another user's index, so it cannot return their text.

use super::bm25::{Bm25, Doc, Hit};
use super::listing::Listing;
use super::score::Scratch;
use super::tokenize::{self, QueryTermsCache};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashSet;

/// Candidates taken from each query.
const PER_QUERY: usize = 48;
/// Rank offset of reciprocal-rank fusion; small, so the top of each list
/// counts most.
const RRF_K: f32 = 8.0;
/// Hits weaker than this share of a query's best score are noise (the
/// Postgres store cuts each of its rounds by it too).
pub const MIN_SHARE: f32 = 0.2;
/// Rare words of the first hits added to the second round.
const EXPANSION_TERMS: usize = 6;
/// Best first-round hits (repeats of one message counted once) whose
/// words widen the second round.
const EXPANSION_SEEDS: usize = 3;
/// Rank offset of the fusion of BM25's ranking with the dense one: the
/// usual 60 of reciprocal rank fusion, so neither list's top dominates and
/// a document both lists rank well comes first.
const DENSE_RRF_K: f32 = 60.0;
/// Items of one day taken before any day gets a further one.
const PER_DAY_FIRST_PASS: usize = 2;

/// Which index a candidate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    User,
    Shared,
}

/// A document chosen for the turn, in priority order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pick {
    pub side: Side,
    pub doc: u32,
}

/// What each index leaves out of a turn, by id: the documents whose keys
/// are in `excluded` (already in the context) and those in every context
/// anyway. Found once per turn, not asked of every document a query names.
pub fn skipped(index: &Bm25, excluded: &HashSet<u64>) -> Vec<u32> {
    let mut ids: Vec<u32> = index.pinned().to_vec();
    ids.extend(excluded.iter().filter_map(|&key| index.id_of(key)));
    ids
}

/// The ranked documents for `message` (plus `context`, earlier messages of
/// the recent window), leaving out the documents whose keys are in
/// `excluded` (already in the context) and those in every context anyway.
/// `dense` is the embeddings' ranking of the same two indexes (nearest
/// first, already without the left-out documents; empty when embeddings
/// are off or failed): it is fused with BM25's by reciprocal rank.
pub fn plan(
    user: &Bm25,
    shared: &Bm25,
    message: &str,
    context: &[&str],
    excluded: &HashSet<u64>,
    dense: &[Pick],
    terms: &mut QueryTermsCache,
) -> Vec<Pick> {
    let main = terms.terms(message);
    if main.is_empty() {
        return Vec::new();
    }
    let mut queries: Vec<(Vec<(String, f32)>, f32)> = Vec::new();
    let mut first: Vec<(String, f32)> = main.iter().map(|t| (t.clone(), 1.0)).collect();
    let main_set: FxHashSet<&String> = main.iter().collect();
    let mut extra = FxHashSet::default();
    for text in context {
        for term in terms.terms(text).iter() {
            if !main_set.contains(term) && extra.insert(term.clone()) && extra.len() <= 16 {
                first.push((term.clone(), 0.2));
            }
        }
    }
    queries.push((first, 1.0));
    let clauses = clauses(message);
    if clauses.len() > 1 {
        for clause in clauses {
            queries.push((clause.into_iter().map(|t| (t, 1.0)).collect(), 0.8));
        }
    }

    let (user_skip, shared_skip) = (skipped(user, excluded), skipped(shared, excluded));
    let excluded = |d: &Doc| excluded.contains(&d.key);
    let mut fused: FxHashMap<(Side, u32), f32> = FxHashMap::default();
    let mut scratch = Scratch::default();
    let mut run = |index: &Bm25, side: Side, query: &[(String, f32)], weight: f32| -> Vec<Hit> {
        let skip = if side == Side::User { &user_skip } else { &shared_skip };
        let hits = strong(index.search_with(&mut scratch, query, PER_QUERY, skip));
        for (rank, hit) in hits.iter().enumerate() {
            *fused.entry((side, hit.doc)).or_default() += weight / (RRF_K + rank as f32 + 1.0);
        }
        hits
    };
    let mut first_hits = Vec::new();
    for (i, (query, weight)) in queries.iter().enumerate() {
        let hits = run(user, Side::User, query, *weight);
        run(shared, Side::Shared, query, *weight * 0.8);
        if i == 0 {
            first_hits = hits;
        }
    }
    // The query's words as the user's index holds them, looked up once for
    // the second round's seeds and every hit's neighbours (a word no
    // document has cannot be added).
    let query_postings: Vec<Listing> = main.iter().filter_map(|t| user.postings_of(t)).collect();
    // Second round: the first hits' rarest words find the other half of a
    // fact told in two places ("my sister is Ana" … "Ana moved to Lisbon").
    let expansion: Vec<(String, f32)> = expansion(user, &first_hits, &query_postings, &main_set, terms)
        .into_iter()
        .map(|t| (t, 1.0))
        .collect();
    if !expansion.is_empty() {
        run(user, Side::User, &expansion, 0.6);
    }

    let mut ranked: Vec<((Side, u32), f32)> = fused.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.1.cmp(&a.0.1)));
    if !dense.is_empty() {
        ranked = with_dense(&ranked, dense);
    }
    let mut picks: Vec<Pick> = Vec::new();
    let mut taken: FxHashSet<(Side, u32)> = FxHashSet::default();
    for ((side, doc), _) in ranked {
        if taken.insert((side, doc)) {
            picks.push(Pick { side, doc });
        }
        if side == Side::User {
            for n in neighbours(user, doc, &query_postings, &excluded) {
                if taken.insert((Side::User, n)) {
                    picks.push(Pick { side, doc: n });
                }
            }
        }
    }
    // One read of each pick: its day for the spread, its text to leave
    // out a repeat of a message already picked.
    let mut texts = FxHashSet::default();
    let dated: Vec<(Pick, chrono::NaiveDate)> = picks
        .into_iter()
        .filter_map(|p| {
            let doc = match p.side {
                Side::User => user.doc(p.doc),
                Side::Shared => shared.doc(p.doc),
            };
            texts.insert(text_key(&doc.text)).then(|| (p, doc.at.date_naive()))
        })
        .collect();
    spread(dated)
}

/// What makes two texts the same message said again: the same words,
/// whatever the case, spacing and punctuation ("Thinking about it again."
/// twice in a month takes one place, the best ranked).
pub(super) fn text_key(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    if !text.is_ascii() {
        return unicode_text_key(text);
    }
    // The key `unicode_text_key` gives, without decoding UTF-8 or looking
    // up Unicode case tables: every pick's text is keyed each turn, and
    // the general way was a sixth of a turn's CPU (BENCHMARKS.md).
    let mut hasher = rustc_hash::FxHasher::default();
    let mut in_word = false;
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() {
            char::from(b.to_ascii_lowercase()).hash(&mut hasher);
            in_word = true;
        } else if in_word {
            ' '.hash(&mut hasher);
            in_word = false;
        }
    }
    if in_word {
        ' '.hash(&mut hasher);
    }
    hasher.finish()
}

/// [`text_key`] of any text: each word's lowercase characters, then a
/// space.
fn unicode_text_key(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = rustc_hash::FxHasher::default();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        for c in word.chars().flat_map(char::to_lowercase) {
            c.hash(&mut hasher);
        }
        ' '.hash(&mut hasher);
    }
    hasher.finish()
}

/// BM25's fused ranking and the dense one, fused by reciprocal rank
/// ([`DENSE_RRF_K`]).
fn with_dense(ranked: &[((Side, u32), f32)], dense: &[Pick]) -> Vec<((Side, u32), f32)> {
    let lexical: Vec<(Side, u32)> = ranked.iter().map(|(pick, _)| *pick).collect();
    let dense: Vec<(Side, u32)> = dense.iter().map(|p| (p.side, p.doc)).collect();
    let mut out = fuse_by_rank(&lexical, &dense);
    // Equal scores: the newer document first, as before the fusion.
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.1.cmp(&a.0.1)));
    out
}

/// Reciprocal rank fusion of a lexical and a dense ranking (best first
/// each), with [`DENSE_RRF_K`]: every item of either list, best fused
/// score first (ties in first-seen order). Both stores fuse with it.
pub fn fuse_by_rank<T: Clone + Eq + std::hash::Hash>(lexical: &[T], dense: &[T]) -> Vec<(T, f32)> {
    let mut fused: FxHashMap<T, (f32, usize)> = FxHashMap::default();
    let mut order = 0;
    for list in [lexical, dense] {
        for (rank, item) in list.iter().enumerate() {
            let entry = fused.entry(item.clone()).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            entry.0 += 1.0 / (DENSE_RRF_K + rank as f32 + 1.0);
        }
    }
    let mut out: Vec<(T, f32, usize)> = fused
        .into_iter()
        .map(|(item, (score, seen))| (item, score, seen))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    out.into_iter().map(|(item, score, _)| (item, score)).collect()
}

/// Hits worth showing: those within [`MIN_SHARE`] of the best.
fn strong(hits: Vec<Hit>) -> Vec<Hit> {
    let best = hits.first().map_or(0.0, |h| h.score);
    hits.into_iter().filter(|h| h.score >= best * MIN_SHARE).collect()
}

/// The parts of a question that asks for several things, each as its
/// terms; one part (or none) means no split.
fn clauses(message: &str) -> Vec<Vec<String>> {
    let lower = message.to_lowercase();
    lower
        .split(['?', '.', '!', ';', ','])
        .flat_map(|s| s.split(" and "))
        .map(tokenize::query_terms)
        .filter(|terms| !terms.is_empty())
        .collect()
}

/// The words of the best first-round hits that widen the second round:
/// ones the query lacks, rare in this user's history, and in at least one
/// other document (a word only the hit holds finds nothing more). Names
/// (capitalized inside a sentence: "I met Sam at …") first, since a fact
/// told in two places is most often joined by who it is about; then the
/// rarest. A hit holding none of the message's own words (`own`: found by
/// the recent window's alone) seeds nothing when another hit holds one:
/// the round follows what the question is about, not what was said before
/// it (a follow-up whose own words find nothing still follows the window).
fn expansion(
    index: &Bm25,
    hits: &[Hit],
    own: &[Listing],
    query: &FxHashSet<&String>,
    terms: &mut QueryTermsCache,
) -> Vec<String> {
    let mut words: Vec<(String, bool, f32)> = Vec::new();
    let holds_own = |hit: &Hit| own.iter().any(|list| list.contains(hit.doc));
    let anchored = hits.iter().any(holds_own);
    // The best three hits that are not a repeat of one another.
    let mut seeds = FxHashSet::default();
    for hit in hits {
        if seeds.len() == EXPANSION_SEEDS {
            break;
        }
        if anchored && !holds_own(hit) {
            continue;
        }
        let doc = index.doc(hit.doc);
        if !seeds.insert(text_key(&doc.text)) {
            continue;
        }
        let names = names_in(&doc.text);
        for term in terms.terms(&doc.text).iter() {
            if query.contains(term) || words.iter().any(|(w, _, _)| w == term) {
                continue;
            }
            if index.listing(term).is_none_or(|list| list.len() < 2) {
                continue;
            }
            words.push((term.clone(), names.contains(term), index.idf(term)));
        }
    }
    // Only words rare in this user's history say something specific.
    let floor = widening_floor(index.live_docs());
    words.retain(|(_, _, idf)| *idf >= floor);
    words.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.total_cmp(&a.2)));
    words.into_iter().take(EXPANSION_TERMS).map(|(w, _, _)| w).collect()
}

/// The terms of the words of `text` written with a capital inside a
/// sentence (not its first word, not "I"): the names it mentions.
fn names_in(text: &str) -> FxHashSet<String> {
    let mut names = FxHashSet::default();
    for sentence in text.split(['.', '!', '?', ';', ':', '\n']) {
        let words = sentence
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .filter(|w| !w.is_empty());
        for word in words.skip(1) {
            if word.chars().next().is_some_and(char::is_uppercase) && word != "I" {
                names.extend(tokenize::query_terms(word));
            }
        }
    }
    names
}

/// The least inverse document frequency (BM25's) a word of the first hits
/// needs to widen the second round, in a history of `docs` documents: only
/// words rare in this user's history say something specific.
fn widening_floor(docs: usize) -> f32 {
    (docs.max(2) as f32 / 20.0).ln().max(1.0)
}

/// The most of `docs` documents a word may be in and still widen the
/// second round (its IDF, `ln(1 + (docs − df + ½) / (df + ½))`, at least
/// [`widening_floor`]): the Postgres store, which counts documents rather
/// than computing IDFs, applies the files' rule with it. 0 or 1: no word
/// can widen.
pub fn widening_df_limit(docs: usize) -> usize {
    let limit = (docs as f32 + 1.0) / widening_floor(docs).exp() - 0.5;
    if limit < 0.0 { 0 } else { limit.floor() as usize }
}

/// Neighbouring messages that carry the other half of an answer: one that
/// has query words the hit lacks, the question an assistant hit answers,
/// or the answer that follows a question.
fn neighbours(index: &Bm25, doc: u32, query: &[Listing], excluded: &dyn Fn(&Doc) -> bool) -> Vec<u32> {
    let hit = index.doc(doc);
    if !hit.source.is_message() {
        return Vec::new();
    }
    let [before, after] = index.neighbours(doc);
    let mut out = Vec::new();
    for (n, is_before) in [(before, true), (after, false)] {
        let Some(n) = n else { continue };
        let other = index.doc(n);
        if excluded(&other) || other.at.date_naive() != hit.at.date_naive() {
            continue;
        }
        let answers = !is_before && hit.text.trim_end().ends_with('?');
        let asked = is_before && hit.source == super::bm25::Source::Assistant;
        // A query word the neighbour has and the hit lacks.
        let adds_missing = || query.iter().any(|list| list.contains(n) && !list.contains(doc));
        if answers || asked || adds_missing() {
            out.push(n);
        }
    }
    out
}

/// Reorders `picks` so no day takes more than [`PER_DAY_FIRST_PASS`]
/// items before every other day had its turn; order within a pass is kept.
fn spread(picks: Vec<(Pick, chrono::NaiveDate)>) -> Vec<Pick> {
    let mut per_day: FxHashMap<chrono::NaiveDate, usize> = FxHashMap::default();
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (pick, day) in picks {
        let n = per_day.entry(day).or_default();
        *n += 1;
        if *n <= PER_DAY_FIRST_PASS {
            first.push(pick);
        } else {
            rest.push(pick);
        }
    }
    first.extend(rest);
    first
}

#[cfg(test)]
mod tests;
