//! Recall benches: the recall step of one turn for a user with 10⁵
//! archived messages (and whether it changes when a hundred other users'
//! indexes are loaded: it must not), the cold load of that index, a
//! rebuild from the archive, and the cost of indexing one message next to
//! the fsync'ed STM append it follows.
//!
//! Before criterion runs, the recall step is also timed 2,000 times by hand
//! to print p50 and p99 of wall time and of the thread's CPU time
//! (criterion reports medians and intervals only), also with dense vectors
//! (384 dimensions, from an in-process stand-in embedder) for every
//! document of that user.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use chrono::{TimeDelta, TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::recall::{EmbedError, EmbedPurpose, Embedder, Recall, TurnQuery};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, Record, Role, SafeName, archive};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Archived messages of the measured user: 10⁵ under `cargo bench`, a small
/// history in test mode (`cargo test --benches`), which only checks that
/// the bench runs.
fn archived() -> u64 {
    if full() { 100_000 } else { 2_000 }
}

fn full() -> bool {
    std::env::args().any(|a| a == "--bench")
}
const BATCH: u64 = 100;

/// A deterministic stream of chat-like sentences over a vocabulary of a
/// few thousand words with a skewed (Zipf-like) use, like real chat.
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn word(&mut self) -> String {
        const SYLLABLES: [&str; 16] = [
            "ka", "lo", "mi", "ren", "tu", "sa", "vel", "no", "pri", "da", "go", "shi", "mar", "te", "bo", "lin",
        ];
        // Rank r with probability ~ 1/r over 4,096 words.
        let r = (4096f64.powf((self.next() % 10_000) as f64 / 10_000.0)) as u64;
        let (a, b, c) = (r % 16, (r / 16) % 16, (r / 256) % 16);
        format!(
            "{}{}{}",
            SYLLABLES[a as usize], SYLLABLES[b as usize], SYLLABLES[c as usize]
        )
    }

    fn sentence(&mut self) -> String {
        let n = 6 + self.next() % 14;
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn record(words: &mut Words, i: u64) -> Record {
    Record {
        ts: Utc.with_ymd_and_hms(2025, 1, 1, 9, 0, 0).unwrap() + TimeDelta::minutes(i as i64 * 7),
        role: if i.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        text: words.sentence(),
        msg_id: format!("m{i}"),
        channel: "bench".into(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

/// CPU time this thread has used so far.
fn thread_cpu() -> Duration {
    // rustix's safe wrapper: the workspace forbids `unsafe`, benches too.
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn archive_history(stm: &Stm, user: &SafeName, messages: u64, seed: u64) {
    let mut words = Words(seed);
    let mut i = 0;
    while i < messages {
        let batch: Vec<Record> = (i..(i + BATCH).min(messages)).map(|j| record(&mut words, j)).collect();
        archive::write_batch(stm.layout(), user, &batch).unwrap();
        i += BATCH;
    }
}

/// Dimensions of the bench's vectors (all-MiniLM's; the time of the
/// cosine walk grows linearly with them).
const DIMS: usize = 384;

/// A deterministic stand-in embedder: each word adds ±1 to two hashed
/// dimensions.
struct Hashed;

fn hashed(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMS];
    for word in text.split_whitespace() {
        let h = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        v[(h % DIMS as u64) as usize] += 1.0;
        v[((h >> 20) % DIMS as u64) as usize] -= if h & 1 == 0 { 1.0 } else { -1.0 };
    }
    v
}

#[async_trait::async_trait]
impl Embedder for Hashed {
    async fn embed(&self, texts: &[String], _: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| hashed(t)).collect())
    }

    fn model(&self) -> &str {
        "hashed"
    }
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let stm = Stm::new(Layout::new(dir.path(), "bench"), LockRegistry::new(), false);
    let big = SafeName::of("big");
    let clock = Instant::now();
    let archived = archived();
    archive_history(&stm, &big, archived, 7);
    eprintln!(
        "wrote {archived} archived messages in {:.1} s",
        clock.elapsed().as_secs_f64()
    );

    let recall = Recall::of(&stm);
    let mut words = Words(99);
    let recent: Vec<Arc<Record>> = (0..10).map(|i| Arc::new(record(&mut words, archived + i))).collect();
    let question = format!("what did we say about {} and {}?", words.word(), words.word());
    let query = TurnQuery {
        message: &question,
        recent: &recent,
        max_tokens: 1500,
    };
    let clock = Instant::now();
    let first = recall.for_turn(&big, &query);
    eprintln!(
        "first turn (rebuild from the archive + load): {:.2} s, {} items recalled",
        clock.elapsed().as_secs_f64(),
        first.items.len()
    );

    // Wall time and this thread's CPU time of each call: on a shared
    // machine the wall-clock tail is mostly time spent preempted, which
    // the CPU time leaves out.
    let percentiles_with = |label: &str, vector: Option<&[f32]>| {
        let (mut wall, mut cpu): (Vec<Duration>, Vec<Duration>) = (0..if full() { 2000 } else { 20 })
            .map(|_| {
                let (t, c) = (Instant::now(), thread_cpu());
                std::hint::black_box(recall.for_turn_with(&big, &query, vector));
                (t.elapsed(), thread_cpu().saturating_sub(c))
            })
            .unzip();
        for (kind, times) in [("wall", &mut wall), ("thread CPU", &mut cpu)] {
            times.sort();
            eprintln!(
                "recall step, {label}, {kind}: p50 {:?}, p99 {:?}, max {:?}",
                times[times.len() / 2],
                times[times.len() * 99 / 100],
                times[times.len() - 1]
            );
        }
    };
    let percentiles = |label: &str| percentiles_with(label, None);
    recall.reindex(&big, &mut |_| {}).unwrap();
    let clock = Instant::now();
    recall.for_turn(&big, &query);
    eprintln!(
        "first turn after a restart (load of the stored index): {:.2} s",
        clock.elapsed().as_secs_f64()
    );
    percentiles("1 user loaded");

    // With dense embeddings: every document gets a vector (from an
    // in-process stand-in: the network is not what is measured here), then
    // the step searches them by cosine and fuses the lists.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    recall.use_embedder(Some((Arc::new(Hashed), Duration::from_millis(800))));
    let clock = Instant::now();
    let embedded = runtime.block_on(recall.embed_missing(&big, &mut |_| {})).unwrap();
    eprintln!(
        "embedded {embedded} documents ({DIMS} dims) in {:.1} s",
        clock.elapsed().as_secs_f64()
    );
    let vector = hashed(&question);
    percentiles_with(&format!("1 user loaded, + {DIMS}-dim vectors"), Some(&vector));
    recall.use_embedder(None);

    let mut group = c.benchmark_group("recall");
    group.measurement_time(Duration::from_secs(4)).sample_size(40);
    group.bench_function(BenchmarkId::new("turn_step_1e5_archived", "1_user_loaded"), |b| {
        b.iter(|| recall.for_turn(&big, &query))
    });
    // A hundred other users, each with a history and a loaded index.
    for u in 0..if full() { 100 } else { 3 } {
        let other = SafeName::of(&format!("other{u}"));
        archive_history(&stm, &other, 200, 1000 + u);
        recall.for_turn(&other, &query);
    }
    percentiles("101 users loaded");
    group.bench_function(BenchmarkId::new("turn_step_1e5_archived", "101_users_loaded"), |b| {
        b.iter(|| recall.for_turn(&big, &query))
    });

    let fsynced = Stm::new(Layout::new(dir.path(), "fsync"), LockRegistry::new(), true);
    let writer = SafeName::of("writer");
    let mut n = 0u64;
    group.bench_function("stm_append_fsync_on", |b| {
        b.iter(|| {
            n += 1;
            runtime
                .block_on(fsynced.append(&writer, &record(&mut words, n)))
                .unwrap()
        })
    });
    group.bench_function("index_one_message", |b| {
        b.iter(|| {
            n += 1;
            recall.index(&big, &record(&mut words, archived + 100 + n))
        })
    });
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    group.bench_function("rebuild_1e5_archived", |b| {
        b.iter(|| recall.reindex(&big, &mut |_| {}).unwrap())
    });
    group.finish();
}

criterion_group!(recall_benches, benches);
criterion_main!(recall_benches);
