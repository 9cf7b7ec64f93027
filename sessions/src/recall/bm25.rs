//! The BM25 index of one owner (a user, or the channel's `_shared`
//! notes): documents, postings and the statistics BM25 needs. A user's
//! index may stand on an opened [`Segment`] (their stored messages, ids
//! `0..base`, read from disk as a search needs them); what was added since
//! (the tail: newer messages, the markdown sources) is in memory, with ids
//! from `base` on. Every id, position and statistic is the one the same
//! documents added in the same order to an index without a segment would
//! have (the property test below): the segment changes where a document
//! is read from, never what a search returns.
//!
//! Scope is structural: an index holds one owner's documents and nothing
//! else, so a search over it cannot return another user's text. This module
//! does no I/O; loading, saving and deciding what to index live in
//! [`super::store`] and [`super::sources`], scoring in [`super::score`].

use super::listing::Listing;
use super::postings::Postings;
use super::segment::Segment;
use super::tokenize;
use chrono::{DateTime, NaiveDate, Utc};
use rustc_hash::FxHashMap;
use std::borrow::Cow;

/// Where a document came from; decides its label and whether a turn may
/// recall it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A message the user wrote.
    User,
    /// A reply of the assistant.
    Assistant,
    /// A daily summary (`2026-03-07`) or weekly one (`2026-W10`).
    Summary(String),
    /// The rolling summary: already in every context, so searched by
    /// `/session search` only.
    Rolling,
    /// A profile bullet: already in every context, likewise.
    Profile,
    /// A topic note of the user (slug).
    Note(String),
    /// An operator note from `_shared` (slug).
    SharedNote(String),
    /// A piece of a document the user sent: its name, and its page when
    /// it has pages ([`crate::documents`]).
    Document { name: String, page: Option<u32> },
    /// An entry of the fact log: `was` the value it replaced, `until` the
    /// day a later entry replaced it; `in_profile` while the profile shows
    /// it (then turns skip it unless it replaced something, as the
    /// profile does not say what it was).
    Fact {
        was: Option<String>,
        until: Option<NaiveDate>,
        in_profile: bool,
    },
}

impl Source {
    /// A message's source.
    pub fn of_role(role: crate::record::Role) -> Source {
        match role {
            crate::record::Role::User => Source::User,
            crate::record::Role::Assistant => Source::Assistant,
        }
    }

    pub fn is_message(&self) -> bool {
        matches!(self, Source::User | Source::Assistant)
    }

    /// True for what is in every context anyway (profile, rolling summary,
    /// a fact the profile shows as it always was).
    pub fn always_in_context(&self) -> bool {
        matches!(
            self,
            Source::Rolling
                | Source::Profile
                | Source::Fact {
                    was: None,
                    in_profile: true,
                    ..
                }
        )
    }
}

/// One searchable piece of text.
#[derive(Clone, Debug)]
pub struct Doc {
    /// Identity: for messages a hash of the record (so a message indexed
    /// from STM and again from its archive batch is one document).
    pub key: u64,
    pub at: DateTime<Utc>,
    pub source: Source,
    pub text: String,
    /// Position among the owner's messages, for neighbouring turns.
    pub message_pos: Option<u32>,
    /// Number of terms, for length normalisation.
    len: u32,
    /// Removed (its file changed or went); skipped by every search.
    dead: bool,
}

impl Doc {
    /// A message read back from a segment: its id is its position.
    pub(super) fn stored(key: u64, at: DateTime<Utc>, source: Source, text: String, id: u32, len: u32) -> Doc {
        Doc {
            key,
            at,
            source,
            text,
            message_pos: Some(id),
            len,
            dead: false,
        }
    }
}

/// The entry of [`Bm25::lens`] for a removed document.
pub(super) const DEAD: u32 = u32::MAX;

/// One owner's documents and postings.
#[derive(Debug, Default)]
pub struct Bm25 {
    /// The stored messages, ids `0..base` (see the module doc).
    seg: Option<Segment>,
    base: u32,
    /// Documents from `base` on.
    docs: Vec<Doc>,
    /// Each document's number of terms, [`DEAD`] once removed: dense beside
    /// `docs`, so scoring reads four bytes a posting, not a whole [`Doc`].
    pub(super) lens: Vec<u32>,
    /// term → the documents from `base` on holding it, ids ascending.
    pub(super) postings: FxHashMap<Box<str>, Postings>,
    /// Message documents from `base` on in the order they were said.
    messages: Vec<u32>,
    keys: FxHashMap<u64, u32>,
    /// Live documents already in every context (profile, rolling
    /// summary), which a turn skips: a handful, kept by id so a turn
    /// never scans the documents to find them.
    pinned: Vec<u32>,
    pub(super) live_docs: u32,
    pub(super) live_len: u64,
    dead_docs: u32,
    /// Bumped when compaction renumbers the documents, so a walk that
    /// remembers a position (the embeddings fill) starts over.
    generation: u32,
    /// Bytes the documents from `base` on hold (their texts, entries and
    /// postings, roughly), for the cache's budget.
    tail_bytes: usize,
}

/// A scored document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub doc: u32,
    pub score: f32,
}

impl Bm25 {
    /// An index standing on `seg`, whose messages have the lengths `lens`.
    pub fn over(seg: Segment, lens: Vec<u32>) -> Bm25 {
        let base = u32::try_from(lens.len()).unwrap_or(u32::MAX);
        Bm25 {
            live_docs: base,
            live_len: seg.total_len,
            base,
            seg: Some(seg),
            lens,
            ..Bm25::default()
        }
    }

    /// The segment this index stands on, if any.
    pub fn segment(&self) -> Option<&Segment> {
        self.seg.as_ref()
    }

    /// Documents in the segment (ids below are its messages).
    pub fn base(&self) -> u32 {
        self.base
    }

    /// Messages added since the segment was written (the tail's), in order.
    pub fn tail_messages(&self) -> impl Iterator<Item = &Doc> {
        self.messages.iter().map(|&id| &self.docs[(id - self.base) as usize])
    }

    /// Number of the tail's messages.
    pub fn tail_len(&self) -> usize {
        self.messages.len()
    }

    /// Bytes held in memory, roughly: the lengths, the tail, the
    /// segment's sparse tables (for the cache's budget).
    pub fn resident_bytes(&self) -> usize {
        self.lens.capacity() * 4 + self.tail_bytes + self.seg.as_ref().map_or(0, Segment::resident_bytes)
    }

    /// True when the segment could not be read: the index is to be
    /// rebuilt.
    pub fn is_broken(&self) -> bool {
        self.seg.as_ref().is_some_and(Segment::is_broken)
    }

    pub fn contains(&self, key: u64) -> bool {
        self.id_of(key).is_some()
    }

    /// The id of the live document with `key`, if any.
    pub fn id_of(&self, key: u64) -> Option<u32> {
        self.keys
            .get(&key)
            .copied()
            .or_else(|| self.seg.as_ref().and_then(|s| s.id_of(key)))
    }

    /// The live documents that are in every context anyway (see
    /// [`Source::always_in_context`]).
    pub fn pinned(&self) -> &[u32] {
        &self.pinned
    }

    /// Document `id`: a segment's is read from disk (an empty message if
    /// it cannot be, and the segment is marked broken).
    pub fn doc(&self, id: u32) -> Cow<'_, Doc> {
        match (id.checked_sub(self.base), &self.seg) {
            (Some(tail), _) => Cow::Borrowed(&self.docs[tail as usize]),
            (None, Some(seg)) => {
                let len = self.lens[id as usize];
                Cow::Owned(match seg.doc(id) {
                    Some(m) => Doc::stored(m.key, m.ts, Source::of_role(m.role), m.text, id, len),
                    None => Doc::stored(0, DateTime::UNIX_EPOCH, Source::User, String::new(), id, len),
                })
            }
            (None, None) => Cow::Borrowed(&self.docs[id as usize]),
        }
    }

    pub fn live_docs(&self) -> usize {
        self.live_docs as usize
    }

    /// Ids issued so far, removed documents included: every id is below.
    pub fn id_bound(&self) -> u32 {
        u32::try_from(self.base as usize + self.docs.len()).unwrap_or(u32::MAX)
    }

    /// False for a removed document.
    pub fn is_live(&self, id: u32) -> bool {
        self.lens.get(id as usize).is_some_and(|&len| len != DEAD)
    }

    /// Changes whenever ids are renumbered (see [`Bm25::id_bound`]).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Adds a document unless one with its key is already there; returns
    /// its id either way.
    pub fn add(&mut self, key: u64, at: DateTime<Utc>, source: Source, text: String) -> u32 {
        if let Some(id) = self.id_of(key) {
            return id;
        }
        let terms = tokenize::terms(&text);
        self.add_terms(key, at, source, text, &terms)
    }

    /// [`Bm25::add`] with the terms of `text` already made (by
    /// [`tokenize::terms`], e.g. read back from the stored index), so a
    /// load does not stem every message again.
    pub fn add_terms<T: AsRef<str>>(
        &mut self,
        key: u64,
        at: DateTime<Utc>,
        source: Source,
        text: String,
        terms: &[T],
    ) -> u32 {
        if let Some(id) = self.id_of(key) {
            return id;
        }
        let id = self.id_bound();
        self.tail_bytes += text.len() + std::mem::size_of::<Doc>() + 24 + terms.len() * 8;
        let len = u32::try_from(terms.len()).unwrap_or(DEAD - 1).min(DEAD - 1);
        // Counted by sorting, not in a map: a message has a few dozen terms.
        let mut sorted: Vec<&str> = terms.iter().map(AsRef::as_ref).collect();
        sorted.sort_unstable();
        for run in sorted.chunk_by(|a, b| a == b) {
            let (term, n) = (run[0], u16::try_from(run.len()).unwrap_or(u16::MAX));
            match self.postings.get_mut(term) {
                Some(list) => list.push(id, n, len),
                None => {
                    self.tail_bytes += term.len() + 64;
                    self.postings.insert(term.into(), Postings::new(id, n, len));
                }
            }
        }
        let message_pos = source.is_message().then(|| {
            self.messages.push(id);
            u32::try_from(self.base as usize + self.messages.len() - 1).unwrap_or(u32::MAX)
        });
        if source.always_in_context() {
            self.pinned.push(id);
        }
        self.lens.push(len);
        self.docs.push(Doc {
            key,
            at,
            source,
            text,
            message_pos,
            len,
            dead: false,
        });
        self.keys.insert(key, id);
        self.live_docs += 1;
        self.live_len += u64::from(len);
        id
    }

    /// Marks a document removed. Postings are compacted once the dead
    /// outnumber the living.
    pub fn remove(&mut self, key: u64) {
        // A segment's messages are never removed one by one.
        let Some(id) = self.keys.remove(&key) else { return };
        let doc = &mut self.docs[(id - self.base) as usize];
        if doc.dead {
            return;
        }
        doc.dead = true;
        self.pinned.retain(|&p| p != id);
        self.lens[id as usize] = DEAD;
        self.live_docs -= 1;
        self.live_len -= u64::from(doc.len);
        self.dead_docs += 1;
        if self.dead_docs > (self.live_docs - self.base).max(64) {
            self.compact();
        }
    }

    /// The message said just before / after `id`, if any.
    pub fn neighbours(&self, id: u32) -> [Option<u32>; 2] {
        let base = self.base as usize;
        let pos = match id.checked_sub(self.base) {
            None => Some(id),
            Some(tail) => self.docs[tail as usize].message_pos,
        };
        let Some(pos) = pos else {
            return [None, None];
        };
        let at = |p: Option<usize>| match p {
            Some(p) if p < base => Some(p as u32),
            Some(p) => self
                .messages
                .get(p - base)
                .copied()
                .filter(|&n| !self.docs[(n - self.base) as usize].dead),
            None => None,
        };
        [at((pos as usize).checked_sub(1)), at(Some(pos as usize + 1))]
    }

    /// Inverse document frequency of a term (0 for an unknown term).
    pub fn idf(&self, term: &str) -> f32 {
        // Postings still hold removed documents until compaction: count them
        // too, so a frequent term never gets a negative weight.
        let stored = self
            .seg
            .as_ref()
            .and_then(|s| s.term(term))
            .map_or(0, |i| i.df as usize);
        idf(
            self.id_bound() as usize,
            stored + self.postings.get(term).map_or(0, Postings::len),
        )
    }

    /// Which documents hold `term` (`None`: none does), to ask of many
    /// documents with [`Postings::contains`] after one lookup: no text is
    /// tokenized again.
    pub fn postings_of(&self, term: &str) -> Option<Listing<'_>> {
        self.listing(term)
    }

    /// A term's postings, the segment's joined to the tail's.
    pub fn listing(&self, term: &str) -> Option<Listing<'_>> {
        let tail = self.postings.get(term);
        if let Some(seg) = &self.seg
            && let Some(info) = seg.term(term)
        {
            return Some(Listing::joined(seg, info, tail, &self.lens));
        }
        tail.map(Listing::Mem)
    }

    /// Rebuilds the tail's postings without the dead documents (ids from
    /// `base` on change).
    fn compact(&mut self) {
        let seg = self.seg.take();
        self.rebase(seg.map(|s| {
            let lens = self.lens[..self.base as usize].to_vec();
            (s, lens)
        }));
    }

    /// Stands the index on `seg` (with its messages' lengths; `None`: no
    /// segment) and adds again the tail's live documents it does not hold:
    /// after a merge, the markdown sources; after a compaction (the same
    /// segment), the whole tail. Ids from the segment's end on change.
    pub fn rebase(&mut self, seg: Option<(Segment, Vec<u32>)>) {
        let docs = std::mem::take(&mut self.docs);
        let generation = self.generation.wrapping_add(1);
        *self = match seg {
            Some((seg, lens)) => Bm25::over(seg, lens),
            None => Bm25::default(),
        };
        self.generation = generation;
        for doc in docs.into_iter().filter(|d| !d.dead) {
            self.add(doc.key, doc.at, doc.source, doc.text);
        }
    }
}

/// BM25's inverse document frequency of a word in `df` of `docs`
/// documents (0 when none has it): [`Bm25::idf`]'s weight, and the
/// Postgres store's, which counts documents itself.
pub fn idf(docs: usize, df: usize) -> f32 {
    let (n, df) = (docs.max(1) as f32, df as f32);
    if df <= 0.0 {
        return 0.0;
    }
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn at(day: u32) -> DateTime<Utc> {
        chrono::NaiveDate::from_ymd_opt(2026, 3, day)
            .unwrap()
            .and_hms_opt(12, 0, 0)
            .unwrap()
            .and_utc()
    }

    fn q(text: &str) -> Vec<(String, f32)> {
        tokenize::query_terms(text).into_iter().map(|t| (t, 1.0)).collect()
    }

    #[test]
    fn the_document_with_the_rare_words_ranks_first() {
        let mut index = Bm25::default();
        index.add(1, at(1), Source::User, "I had pasta for lunch today".into());
        index.add(2, at(2), Source::User, "My dentist is Dr. Okafor on Elm Street".into());
        index.add(3, at(3), Source::User, "Lunch was fine, I had pasta again".into());
        let hits = index.search(&q("who is my dentist?"), 5, |_| true);
        assert_eq!(hits.len(), 1);
        assert_eq!(index.doc(hits[0].doc).key, 2);
    }

    #[test]
    fn a_key_is_indexed_once_and_removed_documents_are_never_found() {
        let mut index = Bm25::default();
        index.add(7, at(1), Source::Note("x".into()), "saxophone lessons".into());
        index.add(7, at(1), Source::Note("x".into()), "saxophone lessons".into());
        assert_eq!(index.live_docs(), 1);
        index.remove(7);
        assert!(index.search(&q("saxophone"), 5, |_| true).is_empty());
        assert!(!index.contains(7));
    }

    #[test]
    fn neighbours_are_the_messages_said_around_a_message() {
        let mut index = Bm25::default();
        let a = index.add(1, at(1), Source::User, "a question".into());
        index.add(9, at(1), Source::Summary("2026-03-01".into()), "summary".into());
        let b = index.add(2, at(1), Source::Assistant, "an answer".into());
        assert_eq!(index.neighbours(a), [None, Some(b)]);
        assert_eq!(index.neighbours(b), [Some(a), None]);
    }

    #[test]
    fn compaction_after_many_removals_keeps_the_living_searchable() {
        let mut index = Bm25::default();
        for k in 0..200u64 {
            index.add(k, at(1), Source::Note(k.to_string()), format!("note number{k} kiwi"));
        }
        for k in 0..150u64 {
            index.remove(k);
        }
        assert_eq!(index.live_docs(), 50);
        let hits = index.search(&q("kiwi"), 500, |_| true);
        assert_eq!(hits.len(), 50);
        assert!(hits.iter().all(|h| index.doc(h.doc).key >= 150));
    }
}
