//! Specs of the opened index: a search over a segment (and a merge of
//! segments) joined to an in-memory tail returns, bit for bit, what the
//! same messages loaded into memory return — cut walks included — and
//! reads back the same documents, neighbours and statistics.

use super::*;
use crate::recall::bm25::tests::at;
use crate::recall::bm25::{Bm25, Source};
use crate::recall::line::key_of_message;
use crate::recall::score::{Cut, Scratch};
use crate::recall::segwrite::Builder;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

struct Msg {
    ts: chrono::DateTime<chrono::Utc>,
    role: Role,
    id: String,
    terms: Vec<String>,
    text: String,
}

impl Msg {
    fn key(&self) -> u64 {
        key_of_message(self.ts, self.role, &self.id, &self.text)
    }

    fn source(&self) -> Source {
        match self.role {
            Role::User => Source::User,
            Role::Assistant => Source::Assistant,
        }
    }
}

fn messages(docs: &[Vec<usize>]) -> Vec<Msg> {
    docs.iter()
        .enumerate()
        .map(|(k, words)| {
            let terms: Vec<String> = words.iter().map(|n| format!("w{n}")).collect();
            Msg {
                ts: at(1) + chrono::TimeDelta::minutes(k as i64 * 97),
                role: if k % 2 == 0 { Role::User } else { Role::Assistant },
                id: format!("m{k}"),
                text: format!("message {k}: {}", terms.join(" ")),
                terms,
            }
        })
        .collect()
}

#[allow(clippy::disallowed_methods, reason = "a test's own temp folder")]
fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Writes every message's line to `messages.tsv` in `dir`; their offsets
/// and the end.
fn write_lines(dir: &Path, msgs: &[Msg]) -> (Vec<u64>, u64) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for m in msgs {
        offsets.push(bytes.len() as u64);
        line::encode(m.ts, m.role, &m.id, &m.terms, &m.text, &mut bytes);
    }
    std::fs::write(file(dir, "messages.tsv"), &bytes).unwrap();
    (offsets, bytes.len() as u64)
}

fn open(dir: &Path) -> (Segment, Vec<u32>) {
    let seg = std::fs::File::open(file(dir, "segment.bin")).unwrap();
    let tsv = std::fs::File::open(file(dir, "messages.tsv")).unwrap();
    Segment::open(seg, Arc::new(tsv)).unwrap()
}

/// The index of `msgs` standing on a segment of the first `first`, then
/// (merged into it) up to `second`, the rest in its tail; runs spilled
/// every `spill` postings.
fn opened(dir: &Path, msgs: &[Msg], first: usize, second: usize, spill: usize) -> Bm25 {
    let (offsets, end) = write_lines(dir, msgs);
    let covers = |n: usize| offsets.get(n).copied().unwrap_or(end);
    let target = file(dir, "segment.bin");
    let mut builder = Builder::new(dir, &target).spill_every(spill);
    for (m, &at) in msgs[..first].iter().zip(&offsets) {
        builder.add(m.key(), at, &m.terms).unwrap();
    }
    builder.finish(covers(first), false).unwrap();
    let (seg, lens) = open(dir);
    let mut builder = Builder::over(dir, &target, &seg, &lens).unwrap().spill_every(spill);
    for (m, &at) in msgs[first..second].iter().zip(&offsets[first..]) {
        builder.add(m.key(), at, &m.terms).unwrap();
    }
    builder.finish(covers(second), false).unwrap();
    drop(seg);
    let (seg, lens) = open(dir);
    assert_eq!(seg.covers, covers(second));
    let mut index = Bm25::over(seg, lens);
    for m in &msgs[second..] {
        index.add_terms(m.key(), m.ts, m.source(), m.text.clone(), &m.terms);
    }
    index
}

fn loaded(msgs: &[Msg]) -> Bm25 {
    let mut index = Bm25::default();
    for m in msgs {
        index.add_terms(m.key(), m.ts, m.source(), m.text.clone(), &m.terms);
    }
    index
}

type Found = (Vec<(u32, u32)>, Option<Cut>);

fn walk(index: &Bm25, query: &[(String, f32)], limit: usize, skip: &[u32], budget: u32) -> Found {
    let (hits, cut) = index.walk(&mut Scratch::default(), query, limit, skip, budget);
    (hits.iter().map(|h| (h.doc, h.score.to_bits())).collect(), cut)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_search_on_an_opened_index_is_the_search_on_the_loaded_one(
        docs in prop::collection::vec(prop::collection::vec(prop_oneof![4 => 0usize..4, 2 => 4usize..12, 1 => 12usize..60], 1..9), 1..420),
        cuts in (0.0f64..=1.0, 0.0f64..=1.0),
        query in prop::collection::vec((0usize..60, prop_oneof![Just(1.0f32), Just(0.2f32)]), 1..6),
        skipped in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        limit in 1usize..30,
        budget in prop_oneof![Just(4096u32), 8u32..200],
        spill in prop_oneof![Just(1usize << 17), 16usize..200],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let msgs = messages(&docs);
        let n = msgs.len();
        let (lo, hi) = if cuts.0 <= cuts.1 { cuts } else { (cuts.1, cuts.0) };
        let (first, second) = ((n as f64 * lo) as usize, (n as f64 * hi) as usize);
        let open = opened(dir.path(), &msgs, first, second, spill);
        let load = loaded(&msgs);
        prop_assert!(!open.is_broken());
        prop_assert_eq!(open.id_bound(), load.id_bound());
        prop_assert_eq!(open.live_docs(), load.live_docs());
        let query: Vec<(String, f32)> = query.iter().map(|&(w, x)| (format!("w{w}"), x)).collect();
        for (term, _) in &query {
            prop_assert_eq!(open.idf(term).to_bits(), load.idf(term).to_bits());
        }
        let skip: Vec<u32> = skipped.iter().map(|s| s.index(n) as u32).collect();
        prop_assert_eq!(
            walk(&open, &query, limit, &skip, budget),
            walk(&load, &query, limit, &skip, budget)
        );
        for id in 0..n as u32 {
            let (a, b) = (open.doc(id), load.doc(id));
            prop_assert_eq!((a.key, a.at, &a.text, &a.source, a.message_pos), (b.key, b.at, &b.text, &b.source, b.message_pos));
            prop_assert_eq!(open.neighbours(id), load.neighbours(id));
            prop_assert_eq!(open.id_of(msgs[id as usize].key()), Some(id));
        }
        for (term, _) in &query {
            let (a, b) = (open.listing(term), load.listing(term));
            prop_assert_eq!(a.as_ref().map(|l| l.len()), b.as_ref().map(|l| l.len()));
            if let (Some(a), Some(b)) = (a, b) {
                prop_assert_eq!(a.peak(), b.peak());
                for pos in 0..a.len() {
                    prop_assert_eq!((a.id(pos), a.tf(pos), a.block_peak(pos), a.block_first(pos)), (b.id(pos), b.tf(pos), b.block_peak(pos), b.block_first(pos)));
                }
                for id in 0..n as u32 {
                    prop_assert_eq!(a.contains(id), b.contains(id));
                }
            }
        }
        prop_assert!(!open.contains(12345) && !open.is_broken());
    }
}

#[test]
fn a_segment_that_does_not_add_up_is_refused_and_a_bad_read_marks_it_broken() {
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<Vec<usize>> = (0..300).map(|k| vec![k % 3, 7, k]).collect();
    let msgs = messages(&docs);
    let index = opened(dir.path(), &msgs, 300, 300, 1 << 17);
    drop(index);
    let path = file(dir.path(), "segment.bin");
    let good = std::fs::read(&path).unwrap();
    // Cut short, or a different magic: refused at open.
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    let tsv = || Arc::new(std::fs::File::open(file(dir.path(), "messages.tsv")).unwrap());
    assert!(Segment::open(std::fs::File::open(&path).unwrap(), tsv()).is_err());
    let mut other = good.clone();
    other[7] = b'3';
    std::fs::write(&path, &other).unwrap();
    assert!(Segment::open(std::fs::File::open(&path).unwrap(), tsv()).is_err());
    // Messages.tsv shorter than what the segment covers: refused.
    std::fs::write(&path, &good).unwrap();
    let bytes = std::fs::read(file(dir.path(), "messages.tsv")).unwrap();
    std::fs::write(file(dir.path(), "messages.tsv"), &bytes[..bytes.len() - 1]).unwrap();
    assert!(Segment::open(std::fs::File::open(&path).unwrap(), tsv()).is_err());
    std::fs::write(file(dir.path(), "messages.tsv"), &bytes).unwrap();
    // Damage inside (a dictionary entry pointing past the postings): the
    // shape adds up, the read that meets it marks the segment broken.
    let (seg, lens) = open(dir.path());
    let info = seg.term("w7").unwrap();
    let sections = seg.sections();
    drop(seg);
    let mut inside = good.clone();
    let at = good[sections.dict as usize..sections.sparse as usize]
        .windows(3)
        .position(|w| w == b"\x02w7")
        .unwrap()
        + sections.dict as usize
        + 3
        + 4;
    assert_eq!(u64::from_le_bytes(inside[at..at + 8].try_into().unwrap()), info.at);
    inside[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&path, &inside).unwrap();
    let (seg, _) = open(dir.path());
    let index = Bm25::over(seg, lens);
    assert!(!index.is_broken());
    assert!(index.listing("w7").is_none());
    assert!(index.is_broken());
}
