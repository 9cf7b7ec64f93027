//! Recall: every turn gets the memory that answers it. A derived,
//! rebuildable BM25 index over the caller's whole history — live STM, the
//! archive, rolling/daily/weekly summaries, profile, the dated fact log,
//! topic notes — plus one
//! index of the channel's `_shared` operator notes; [`Recall::for_turn`]
//! picks dated items for the context under `recall.maxTokens`, and
//! [`Recall::search`] answers `/session search`.
//!
//! Scope is by construction: each user has an index of their own (in
//! memory and under `recall/<user>/`), and a query reads the caller's index
//! and the shared one, never a global index filtered afterwards. Deleting a
//! user's memory deletes their index ([`Recall::forget`]). Code map:
//! `tokenize` (text → terms), `bm25` (one owner's index: a user's stands
//! on an opened segment plus an in-memory tail), `postings` (one term's
//! in-memory postings and their block bounds), `listing` (a term's
//! postings as a search reads them, segment and tail joined), `score` (the
//! exact top-k with pruning, within a bounded walk), `store` (a user's
//! index on disk: open, catch up, merge the tail, rebuild), `segment` (the
//! stored term dictionary and postings, read with positioned reads),
//! `segwrite` and `segmerge` (writing one in bounded memory) and `line` (the message
//! lines), `sources`
//! (the markdown files, the user's documents and the fact log, kept in step by stamps), `plan` (queries, fusion,
//! neighbours, spread), `pack` (labels and budget), and with
//! `recall.embeddings` on, `embed` (the [`Embedder`] seam), `vectors`
//! (each owner's dense vectors, searched by cosine and fused with BM25) and
//! `dense` (filling the vectors in the background, computing them again,
//! the cosine side of a turn's ranking).
//!
//! No network, no clock: dates come from the records and files, vectors
//! from an [`Embedder`] the broker hands in.

mod bm25;
mod cache;
mod dense;
mod embed;
mod line;
mod listing;
mod pack;
mod pieces;
mod plan;
mod postings;
mod score;
mod segment;
mod segmerge;
mod segwrite;
mod sources;
mod store;
mod tokenize;
mod vectors;

pub use bm25::idf;
pub use dense::{
    DENSE_CANDIDATES, DENSE_HITS, EMBED_BATCH, EMBED_BATCH_CHARS, batch_len as embedding_batch_len,
    clip as clip_for_embedding, strong_dense,
};
pub use embed::{EmbedError, EmbedPurpose, Embedder};
pub use line::message_key;
pub use pack::{Item, Recalled, pack};
pub use plan::{MIN_SHARE, fuse_by_rank, widening_df_limit};
pub use sources::fact_items;
pub use store::RecallError;

use crate::layout::Layout;
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::Stm;
use bm25::Bm25;
use plan::{Pick, Side};
use sources::FileSet;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use cache::Cache;
pub use cache::{MAX_CACHED_BYTES, MAX_CACHED_USERS};
use store::UserIndex;
use vectors::Vectors;

/// Added to the query budget before recall stops waiting itself, in case
/// an [`Embedder`] does not hold the budget it was given.
const BUDGET_MARGIN: Duration = Duration::from_millis(50);

/// What a turn asks of recall.
#[derive(Clone, Copy, Debug)]
pub struct TurnQuery<'a> {
    /// The message being answered.
    pub message: &'a str,
    /// The records already in the context (the recent window, the message
    /// being answered included): never recalled again. Shared with the
    /// session state, so a turn hands them over without a copy.
    pub recent: &'a [Arc<Record>],
    /// `recall.maxTokens`.
    pub max_tokens: usize,
}

/// The recall of one channel: a cheap handle, one per sessions folder in
/// the process (so `/session clear` reaches the same cache the turns use).
#[derive(Clone)]
pub struct Recall {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Recall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recall")
            .field("root", &self.inner.stm.layout().root())
            .finish()
    }
}

struct Inner {
    stm: Stm,
    users: Mutex<Cache>,
    /// Every turn's search reads it, so a read lock: two users' searches
    /// run side by side (a mutex held for a whole search made them take
    /// turns: issue 40). Written only when its files or vectors changed.
    /// Why `std`: searches are short CPU work, never held across an
    /// `.await`.
    shared: RwLock<SharedIndex>,
    /// `recall.embeddings`: the embedder and the turn's budget for the
    /// question's vector; `None` = BM25 only.
    embedder: RwLock<Option<(Arc<dyn Embedder>, Duration)>>,
    /// Owners whose vectors a background fill is computing (`None` =
    /// `_shared`), each with whether it was asked again meanwhile: one
    /// fill per owner at a time.
    filling: Mutex<HashMap<Option<SafeName>, bool>>,
}

#[derive(Default)]
struct SharedIndex {
    bm25: Bm25,
    files: FileSet,
    /// In memory only: the shared notes are few and re-read from files.
    vectors: Vectors,
}

/// Live handles by sessions folder.
static REGISTRY: Mutex<Vec<(PathBuf, Weak<Inner>)>> = Mutex::new(Vec::new());

impl Recall {
    /// The recall of the channel `stm` belongs to; the same handle for
    /// every caller in this process while one is alive.
    pub fn of(stm: &Stm) -> Recall {
        let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        registry.retain(|(_, weak)| weak.strong_count() > 0);
        let root = stm.layout().root().to_path_buf();
        if let Some(inner) = registry.iter().find(|(r, _)| *r == root).and_then(|(_, w)| w.upgrade()) {
            return Recall { inner };
        }
        let inner = Arc::new(Inner {
            stm: stm.clone(),
            users: Mutex::new(Cache::default()),
            shared: RwLock::new(SharedIndex::default()),
            embedder: RwLock::new(None),
            filling: Mutex::new(HashMap::new()),
        });
        registry.push((root, Arc::downgrade(&inner)));
        Recall { inner }
    }

    fn layout(&self) -> &Layout {
        self.inner.stm.layout()
    }

    /// Runs `f` on the user's loaded index (loading or rebuilding it first).
    fn with_user<T>(&self, user: &SafeName, f: impl FnOnce(&mut UserIndex) -> T) -> T {
        let slot = self.cache().touch(user);
        let mut held = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let index = held.get_or_insert_with(|| UserIndex::open(&self.inner.stm, user));
        let out = f(index);
        let bytes = index.resident_bytes();
        if index.is_broken()
            && let Some(index) = held.take()
        {
            index.discard();
        }
        drop(held);
        self.cache().settle(user, &slot, bytes);
        out
    }

    /// The cache of loaded indexes, even if a panicking thread poisoned its
    /// lock: every change is a few map and counter steps.
    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.inner.users.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Turns dense embeddings on (`Some`: the embedder and how long a turn
    /// waits for its question's vector) or off (`None`) for this channel.
    pub fn use_embedder(&self, embedder: Option<(Arc<dyn Embedder>, Duration)>) {
        *self.inner.embedder.write().unwrap_or_else(PoisonError::into_inner) = embedder;
    }

    /// The embedder in use and a turn's budget for the question's vector;
    /// `None` with embeddings off. The Postgres store fills and searches
    /// its vectors with the same one.
    pub fn embedder(&self) -> Option<(Arc<dyn Embedder>, Duration)> {
        self.inner
            .embedder
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Indexes a record just appended to the user's STM. Cheap (no fsync,
    /// no re-read of history); never fails a turn.
    pub fn index(&self, user: &SafeName, record: &Record) {
        self.with_user(user, |index| index.add_record(record));
    }

    /// [`Recall::index`] without waiting: right here when the user's index
    /// is loaded and free (tokenizing one message and one unsynced `write`,
    /// ~10 µs: cheaper than a hop to another thread and back), else on the
    /// blocking pool, since a user's first use loads (or rebuilds) their
    /// index from disk, which must not hold an async worker serving other
    /// users' turns. With embeddings on, an answer's indexing starts the
    /// background fill of the user's missing vectors, so a turn's question
    /// (indexed when it came) and its answer go in one request (issue 40);
    /// the turn never waits for it.
    pub async fn index_async(&self, user: &SafeName, record: &Record) {
        if !self.index_if_loaded(user, record) {
            let (this, owner, record) = (self.clone(), user.clone(), record.clone());
            crate::blocking::off_workers(move || this.index(&owner, &record)).await;
        }
        if record.role == crate::record::Role::Assistant {
            self.fill_later(Some(user.clone()));
        }
    }

    /// [`Recall::index_async`] for a channel with recall off: keeps an
    /// index that is in memory (a `/session search` or a memory tool
    /// loaded it) current, and makes none for turns that would not use it.
    /// Nothing is lost: a user's index catches up on their STM and archive
    /// whenever it is loaded, and is rebuilt from them if it was never made.
    pub async fn index_if_in_use(&self, user: &SafeName, record: &Record) {
        // A load that begins after this check reads the record from STM
        // (it was appended first); one that began before it has put the
        // user's slot in the cache, so the record is indexed below.
        if self.cache().touch_existing(user).is_some() {
            self.index_async(user, record).await;
        }
    }

    /// Indexes `record` if the user's index is in memory and no one else
    /// holds it (a search on the blocking pool); `false` (nothing done)
    /// otherwise. Never reads the disk.
    fn index_if_loaded(&self, user: &SafeName, record: &Record) -> bool {
        let Some(slot) = self.cache().touch_existing(user) else {
            return false;
        };
        let Ok(mut held) = slot.try_lock() else {
            return false;
        };
        let Some(index) = held.as_mut() else {
            return false;
        };
        index.add_record(record);
        let bytes = index.resident_bytes();
        drop(held);
        self.cache().settle(user, &slot, bytes);
        true
    }

    /// [`Recall::for_turn`] on the blocking pool (see
    /// [`Recall::index_async`]); nothing recalled if the runtime is
    /// shutting down. With embeddings on, the question's vector is asked
    /// for first, within the configured budget; without it (a failure, a
    /// timeout) BM25 answers alone.
    pub async fn for_turn_async(&self, user: &SafeName, query: &TurnQuery<'_>) -> Recalled {
        let vector = self.query_vector(query.message).await;
        let (this, owner) = (self.clone(), user.clone());
        let (message, recent, max_tokens) = (query.message.to_string(), query.recent.to_vec(), query.max_tokens);
        let recalled = crate::blocking::off_workers(move || {
            let query = TurnQuery {
                message: &message,
                recent: &recent,
                max_tokens,
            };
            this.for_turn_with(&owner, &query, vector.as_deref())
        })
        .await
        .unwrap_or_default();
        // Notes of `_shared` new since the last turn get their vectors (the
        // user's come with the fill after the reply is indexed, also when
        // this turn found them stale).
        self.fill_later(None);
        recalled
    }

    /// The question's vector, or `None` (embeddings off, failed, late).
    pub async fn query_vector(&self, message: &str) -> Option<Vec<f32>> {
        let (embedder, budget) = self.embedder()?;
        let text = [dense::clip(message).to_string()];
        let asked = embedder.embed(&text, EmbedPurpose::Query { budget });
        let vectors = tokio::time::timeout(budget + BUDGET_MARGIN, asked).await.ok()?.ok()?;
        embed::checked(1, vectors).ok()?.pop()
    }

    /// The dated items that answer `query` best, from the caller's history
    /// and the shared notes, under `query.max_tokens` (BM25 only: the
    /// question's vector comes from [`Recall::for_turn_async`] or
    /// [`Recall::for_turn_with`]).
    pub fn for_turn(&self, user: &SafeName, query: &TurnQuery) -> Recalled {
        self.for_turn_with(user, query, None)
    }

    /// [`Recall::for_turn`] with the question's vector (from the embedder
    /// in use): the nearest documents of the caller's and the shared
    /// vectors are fused with BM25's ranking.
    pub fn for_turn_with(&self, user: &SafeName, query: &TurnQuery, vector: Option<&[f32]>) -> Recalled {
        let excluded: HashSet<u64> = query.recent.iter().map(|r| message_key(r)).collect();
        let context: Vec<&str> = query
            .recent
            .iter()
            .rev()
            .filter(|r| r.role == crate::record::Role::User && r.text != query.message)
            .take(2)
            .map(|r| r.text.as_str())
            .collect();
        let model = self.embedder().map(|(e, _)| e.model().to_string());
        let shape = vector.zip(model.as_deref()).map(|(v, m)| (m, v.len()));
        let items = self.ranked(user, shape, |user_index, shared| {
            let dense = match (vector, &model) {
                (Some(vector), Some(model)) => dense::nearest(user_index, shared, model, vector, &excluded),
                _ => Vec::new(),
            };
            plan::plan(
                &user_index.bm25,
                &shared.bm25,
                query.message,
                &context,
                &excluded,
                &dense,
                &mut user_index.query_terms,
            )
        });
        pack::pack(items, query.max_tokens)
    }

    /// `/session search`: the best `limit` items of the caller's history
    /// and the shared notes for `words` (profile and rolling summary
    /// included), best first.
    pub fn search(&self, user: &SafeName, words: &str, limit: usize) -> Vec<Item> {
        let terms: Vec<(String, f32)> = tokenize::query_terms(words).into_iter().map(|t| (t, 1.0)).collect();
        self.ranked(user, None, |user_index, shared| {
            let mut scratch = score::Scratch::default();
            let mut hits: Vec<(f32, Pick)> = user_index
                .bm25
                .search_with(&mut scratch, &terms, limit, &[])
                .into_iter()
                .map(|h| {
                    (
                        h.score,
                        Pick {
                            side: Side::User,
                            doc: h.doc,
                        },
                    )
                })
                .collect();
            hits.extend(
                shared
                    .bm25
                    .search_with(&mut scratch, &terms, limit, &[])
                    .into_iter()
                    .map(|h| {
                        (
                            h.score,
                            Pick {
                                side: Side::Shared,
                                doc: h.doc,
                            },
                        )
                    }),
            );
            hits.sort_by(|a, b| b.0.total_cmp(&a.0));
            hits.truncate(limit);
            hits.into_iter().map(|(_, p)| p).collect()
        })
    }

    /// Refreshes both indexes from the files, runs `choose`, and turns its
    /// picks into items. `dense` is the model and length of the question's
    /// vector, if it has one: shared vectors of another length are dropped.
    fn ranked(
        &self,
        user: &SafeName,
        dense: Option<(&str, usize)>,
        choose: impl FnOnce(&mut UserIndex, &SharedIndex) -> Vec<Pick>,
    ) -> Vec<Item> {
        let shared = self.shared_current(dense);
        self.with_user(user, |index| {
            index.refresh_files();
            choose(index, &shared)
                .into_iter()
                .map(|pick| match pick.side {
                    Side::User => Item::of(&index.bm25.doc(pick.doc)),
                    Side::Shared => Item::of(&shared.bm25.doc(pick.doc)),
                })
                // A stored message that could not be read back (the index
                // is rebuilt after this turn) is left out, not shown empty.
                .filter(|item| !item.text.is_empty())
                .collect()
        })
    }

    /// The shared index in line with its files, held for reading. Its
    /// files are checked (a few `stat`s) under the read lock; only when one
    /// changed — or its vectors are of another length than `dense`'s — is
    /// the write lock taken, to update it, and handed back as a read lock.
    fn shared_current(&self, dense: Option<(&str, usize)>) -> RwLockReadGuard<'_, SharedIndex> {
        let specs = sources::shared_specs(self.layout());
        let stale_vectors = |shared: &SharedIndex| dense.is_some_and(|(model, dims)| shared.vectors.stale(model, dims));
        let read = self.shared_read();
        if read.files.is_current(&specs) && !stale_vectors(&read) {
            return read;
        }
        drop(read);
        let mut write = self.shared_write();
        let shared = &mut *write;
        shared.files.refresh(&mut shared.bm25, &specs);
        if stale_vectors(shared) {
            shared.vectors.clear();
        }
        RwLockWriteGuard::downgrade(write)
    }

    /// The shared index for reading, even if a panicking thread poisoned
    /// its lock (as [`Recall::cache`]).
    fn shared_read(&self) -> RwLockReadGuard<'_, SharedIndex> {
        self.inner.shared.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shared index for writing (its files changed, a fill's vectors).
    fn shared_write(&self) -> RwLockWriteGuard<'_, SharedIndex> {
        self.inner.shared.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the user's index from memory and disk at once (`/session
    /// clear`, `clear all`, `forget`): what is still in their files is
    /// indexed again on next use, what was deleted is gone.
    pub fn forget(&self, user: &SafeName) -> Result<(), RecallError> {
        let slot = self.cache().remove(user);
        // Wait for a search in progress, then empty the slot it holds.
        if let Some(slot) = slot {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        let dir = self.layout().recall_dir(user);
        crate::fsutil::remove_if_exists(self.layout().state_root(), &dir)?;
        Ok(())
    }

    /// Rewrites the user's stored index from the files (`mnemo sessions
    /// reindex`), reporting messages written so far; returns their number.
    pub fn reindex(&self, user: &SafeName, progress: &mut dyn FnMut(u64)) -> Result<u64, RecallError> {
        let slot = self.cache().remove(user);
        if let Some(slot) = slot {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        store::rebuild(&self.inner.stm, user, progress)
    }

    /// Every user with a history in this channel (a log, an archive, a
    /// profile, notes or summaries), for reindexing.
    pub fn users(&self) -> Vec<SafeName> {
        let layout = self.layout();
        let mut users: Vec<SafeName> = Vec::new();
        let roots = [
            layout.stm_root(),
            layout.archive_root(),
            layout.summaries_root(),
            layout.topics_root(),
        ];
        for root in roots {
            let Ok(entries) = crate::fsutil::read_dir_nofollow(layout.state_root(), &root) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                if entry.file_type().is_ok_and(|t| t.is_dir())
                    && let Some(name) = entry.file_name().to_str().and_then(SafeName::from_encoded)
                    && !(root == layout.topics_root() && name.as_str() == crate::layout::SHARED_TOPICS)
                {
                    users.push(name);
                }
            }
        }
        if let Ok(entries) = crate::fsutil::read_dir_nofollow(layout.state_root(), &layout.profiles_dir()) {
            for entry in entries.filter_map(Result::ok) {
                if let Some(name) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".md"))
                    .and_then(SafeName::from_encoded)
                {
                    users.push(name);
                }
            }
        }
        users.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        users.dedup();
        users
    }
}

#[cfg(test)]
#[path = "lock_tests.rs"]
mod lock_tests;
