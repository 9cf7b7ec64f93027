//! The dense side of recall, with `recall.embeddings` on: each owner's
//! missing vectors filled in the background once an answer is indexed (a
//! turn's question and answer in one request; one fill per owner at a
//! time, picking up what was added meanwhile), in batches bounded by
//! [`EMBED_BATCH`] texts and [`EMBED_BATCH_CHARS`] characters, computed again by
//! `mnemo sessions reindex`, and the cosine search a turn fuses with BM25.
//! Only documents the owner's index still holds get a vector, so a fill
//! racing a delete stores nothing deleted.

use super::bm25::Bm25;
use super::plan::{self, Pick, Side};
use super::store::UserIndex;
use super::vectors::Vectors;
use super::{EmbedError, EmbedPurpose, Embedder, Recall, SharedIndex, embed};
use crate::names::SafeName;
use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;

/// Most texts in one embeddings request while indexing (issue 40: a
/// 600-turn conversation is 10 requests, not 1,200). OpenAI takes 2,048
/// inputs a request; smaller servers take a few hundred.
pub const EMBED_BATCH: usize = 128;
/// Most characters (after [`clip`]) in one embeddings request: about 16k
/// tokens, within what OpenAI (300k tokens a request) and the usual
/// self-hosted servers take. A batch holds at least one text, so a single
/// text of [`EMBED_MAX_CHARS`] still goes.
pub const EMBED_BATCH_CHARS: usize = 64_000;
/// Nearest documents a turn takes from the embeddings.
pub const DENSE_HITS: usize = 12;
/// Nearest documents a turn looks at before [`strong_dense`] keeps
/// [`DENSE_HITS`] of them: a message said ten times is ten equally near
/// vectors, and would take ten of the twelve places.
pub const DENSE_CANDIDATES: usize = 4 * DENSE_HITS;
/// Dense hits weaker than this share of the best cosine are noise.
const DENSE_MIN_SHARE: f32 = 0.5;
/// Longest text sent to be embedded (a message is at most
/// `limits.maxMessageChars`, 8,000 by default; notes come in pieces).
const EMBED_MAX_CHARS: usize = 8_000;

impl Recall {
    /// Vectors held for the user (loading them if need be): what a test or
    /// an operator can check after indexing.
    pub fn vectors_held(&self, user: &SafeName) -> usize {
        self.with_user(user, |index| index.with_vectors().1.len())
    }

    /// Starts a background fill of `owner`'s missing vectors unless one
    /// runs (it then looks once more when done, for what was added
    /// meanwhile) or embeddings are off, or there is no runtime to run it on.
    pub(super) fn fill_later(&self, owner: Option<SafeName>) {
        let Some((embedder, _)) = self.embedder() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut filling = self.filling();
            if let Some(again) = filling.get_mut(&owner) {
                *again = true;
                return;
            }
            filling.insert(owner.clone(), false);
        }
        let this = self.clone();
        runtime.spawn(async move {
            loop {
                let filled = this.fill(&owner, embedder.as_ref(), &mut |_| {}).await;
                let mut filling = this.filling();
                // A failure waits for the next answer to try again (the
                // embedder has logged it); never a loop of failing calls.
                // Asked again meanwhile: what was added since is picked up
                // now. A question indexed meanwhile waits for its answer,
                // so the two go in one request.
                if filled.is_err() || filling.get(&owner) != Some(&true) {
                    filling.remove(&owner);
                    break;
                }
                filling.insert(owner.clone(), false);
            }
        });
    }

    /// The owners whose fill runs, each with whether it was asked again.
    fn filling(&self) -> std::sync::MutexGuard<'_, HashMap<Option<SafeName>, bool>> {
        self.inner.filling.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Up to `limit` documents of `owner` still lacking a vector of
    /// `model`; `None` when the runtime is shutting down.
    async fn pending(&self, owner: &Option<SafeName>, model: &str, limit: usize) -> Option<Vec<(u64, String)>> {
        let (this, owner, model) = (self.clone(), owner.clone(), model.to_string());
        crate::blocking::off_workers(move || match &owner {
            Some(user) => this.with_user(user, |index| {
                let (bm25, vectors) = index.with_vectors();
                vectors.pending(bm25, &model, limit)
            }),
            None => {
                let mut shared = this.shared_write();
                let SharedIndex { bm25, vectors, .. } = &mut *shared;
                vectors.pending(bm25, &model, limit)
            }
        })
        .await
    }

    /// Computes `owner`'s missing vectors batch by batch until none was
    /// missing at the last look (a batch short of the caps: what is indexed
    /// after it is the next fill's, so a question indexed meanwhile goes
    /// with its answer); returns how many were stored, or the embedder's
    /// error.
    async fn fill(
        &self,
        owner: &Option<SafeName>,
        embedder: &dyn Embedder,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, EmbedError> {
        let mut stored = 0u64;
        loop {
            let Some(batch) = self.pending(owner, embedder.model(), EMBED_BATCH).await else {
                return Ok(stored);
            };
            if batch.is_empty() {
                return Ok(stored);
            }
            let mut texts: Vec<String> = batch.iter().map(|(_, text)| clip(text).to_string()).collect();
            texts.truncate(batch_len(texts.iter().map(String::as_str)));
            // What the cap left out is the next batch's.
            let keys: Vec<u64> = batch.iter().take(texts.len()).map(|(key, _)| *key).collect();
            let vectors = embed::checked(texts.len(), embedder.embed(&texts, EmbedPurpose::Index).await?)?;
            let (this, owner, model) = (self.clone(), owner.clone(), embedder.model().to_string());
            let count = keys.len() as u64;
            let taken = keys.len();
            crate::blocking::off_workers(move || this.add_vectors(&owner, &model, &keys, &vectors)).await;
            stored += count;
            progress(stored);
            if batch.len() < EMBED_BATCH && taken == batch.len() {
                return Ok(stored);
            }
        }
    }

    /// Stores vectors for the documents `owner`'s index still holds (one
    /// removed meanwhile — `/session forget` — gets none).
    fn add_vectors(&self, owner: &Option<SafeName>, model: &str, keys: &[u64], vectors: &[Vec<f32>]) {
        let add = |bm25: &Bm25, store: &mut Vectors| {
            let (keys, vectors): (Vec<u64>, Vec<Vec<f32>>) = keys
                .iter()
                .zip(vectors)
                .filter(|(key, _)| bm25.contains(**key))
                .map(|(key, vector)| (*key, vector.clone()))
                .unzip();
            store.add(model, &keys, &vectors);
        };
        match owner {
            Some(user) => self.with_user(user, |index| {
                let (bm25, vectors) = index.with_vectors();
                add(bm25, vectors);
            }),
            None => {
                let mut shared = self.shared_write();
                let SharedIndex { bm25, vectors, .. } = &mut *shared;
                add(bm25, vectors);
            }
        }
    }

    /// Computes the user's vectors again from scratch (`mnemo sessions
    /// reindex` with embeddings on), reporting vectors stored so far;
    /// returns their number. Without an embedder, nothing to do.
    pub async fn reindex_vectors(
        &self,
        user: &SafeName,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, EmbedError> {
        if self.embedder().is_none() {
            return Ok(0);
        }
        let (this, owner) = (self.clone(), user.clone());
        crate::blocking::off_workers(move || this.with_user(&owner, UserIndex::drop_vectors)).await;
        self.embed_missing(user, progress).await
    }

    /// Computes the vectors the user's documents still lack, now, waiting
    /// for them (what the background fill does after each message); returns
    /// how many were stored. Without an embedder, nothing to do.
    pub async fn embed_missing(
        &self,
        user: &SafeName,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, EmbedError> {
        let Some((embedder, _)) = self.embedder() else {
            return Ok(0);
        };
        self.fill(&Some(user.clone()), embedder.as_ref(), progress).await
    }
}

/// The nearest documents of the caller's and the shared vectors to
/// `vector`, merged by cosine, without what the turn leaves out and
/// without hits far below the best.
pub(super) fn nearest(
    user: &mut UserIndex,
    shared: &SharedIndex,
    model: &str,
    vector: &[f32],
    excluded: &HashSet<u64>,
) -> Vec<Pick> {
    let (bm25, vectors) = user.with_vectors();
    if vectors.stale(model, vector.len()) {
        vectors.clear();
    }
    // The shared vectors were dropped before the search if stale
    // (`Recall::shared_current`).
    let mut hits: Vec<(f32, Pick)> = vectors
        .search(bm25, model, vector, DENSE_CANDIDATES, &plan::skipped(bm25, excluded))
        .into_iter()
        .map(|(doc, cosine)| (cosine, Pick { side: Side::User, doc }))
        .collect();
    let skip = plan::skipped(&shared.bm25, excluded);
    hits.extend(
        shared
            .vectors
            .search(&shared.bm25, model, vector, DENSE_CANDIDATES, &skip)
            .into_iter()
            .map(|(doc, cosine)| {
                (
                    cosine,
                    Pick {
                        side: Side::Shared,
                        doc,
                    },
                )
            }),
    );
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    strong_dense(hits)
}

/// The dense hits worth fusing (cosine similarity, best first): at most
/// [`DENSE_HITS`], none weaker than [`DENSE_MIN_SHARE`] of the best, and
/// a hit exactly as near as the one before it left out (the same text said
/// again has the same vector: one place for it). Both stores cut their
/// nearest neighbours ([`DENSE_CANDIDATES`] of them) with it.
pub fn strong_dense<T>(hits: Vec<(f32, T)>) -> Vec<T> {
    let best = hits.first().map_or(0.0, |h| h.0);
    let mut last = None;
    hits.into_iter()
        .filter(|(cosine, _)| *cosine >= best * DENSE_MIN_SHARE)
        .filter(|(cosine, _)| last.replace(cosine.to_bits()) != Some(cosine.to_bits()))
        .take(DENSE_HITS)
        .map(|(_, hit)| hit)
        .collect()
}

/// How many of `texts` (already [`clip`]ped), from the first, one
/// embeddings request takes: at most [`EMBED_BATCH`] and
/// [`EMBED_BATCH_CHARS`] characters, and always the first one.
pub fn batch_len<'t>(texts: impl Iterator<Item = &'t str>) -> usize {
    let mut chars = 0;
    let mut taken = 0;
    for text in texts.take(EMBED_BATCH) {
        chars += text.chars().count();
        if taken > 0 && chars > EMBED_BATCH_CHARS {
            break;
        }
        taken += 1;
    }
    taken
}

/// `text` cut to [`EMBED_MAX_CHARS`] on a character boundary.
pub fn clip(text: &str) -> &str {
    match text.char_indices().nth(EMBED_MAX_CHARS) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_said_again_takes_one_dense_place() {
        let mut hits: Vec<(f32, usize)> = (0..20).map(|i| (0.9, i)).collect();
        hits.extend((0..20).map(|i| (0.8 - i as f32 * 0.01, 100 + i)));
        let kept = strong_dense(hits);
        assert_eq!(kept.len(), DENSE_HITS);
        assert_eq!(kept[0], 0, "the first of the repeats stays");
        assert_eq!(kept[1..], (100..100 + DENSE_HITS - 1).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn a_batch_is_bounded_by_texts_and_characters_and_never_empty() {
        let short = vec!["a few words"; 300];
        assert_eq!(batch_len(short.iter().copied()), EMBED_BATCH);
        let long = "x".repeat(EMBED_MAX_CHARS);
        let longs = vec![long.as_str(); 20];
        assert_eq!(batch_len(longs.iter().copied()), EMBED_BATCH_CHARS / EMBED_MAX_CHARS);
        let huge = "y".repeat(EMBED_BATCH_CHARS + 1);
        assert_eq!(
            batch_len([huge.as_str(), "next"].into_iter()),
            1,
            "the first always goes"
        );
        assert_eq!(batch_len(std::iter::empty()), 0);
    }
}
