//! What a 100-page PDF costs the broker: the text taken out
//! (`mnemo::documents::extract`, pdf-extract on lopdf) and the whole path a
//! sent document takes (`mnemo::pipeline::documents::take`: extraction on
//! the blocking pool, then kept through the file store and found by recall
//! from then on), each a fresh user so every document is new. Before the
//! timings, one extraction's rise of the process's peak RSS is printed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use chrono::Utc;
use criterion::{Criterion, criterion_group, criterion_main};
use mnemo::app::ChannelMemory;
use mnemo::documents::{Bounds, extract};
use mnemo::pipeline::documents::{DocumentOutcome, take};
use mnemo_channels::{ChatKind, Inbound};
use mnemo_sessions::SafeName;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::summarizer::NoModel;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const PAGES: usize = 100;

const BOUNDS: Bounds = Bounds {
    max_pages: 200,
    max_inflated: Bounds::MAX_INFLATED,
};

/// 100 pages of 40 lines (~3,500 characters a page), as a lease or a
/// report has.
fn hundred_pages() -> Vec<u8> {
    let pages: Vec<Vec<String>> = (0..PAGES)
        .map(|p| {
            (0..40)
                .map(|l| format!("Page {p}, line {l}: the tenant and the landlord agree that clause {l} holds."))
                .collect()
        })
        .collect();
    let lines: Vec<Vec<&str>> = pages.iter().map(|p| p.iter().map(String::as_str).collect()).collect();
    let refs: Vec<&[&str]> = lines.iter().map(Vec::as_slice).collect();
    mnemo_testkit::pdf::pdf(&refs)
}

fn message(user: &str) -> Inbound {
    Inbound {
        channel: "console".into(),
        user_id: user.into(),
        user_name: None,
        chat_id: user.into(),
        chat_kind: ChatKind::Direct,
        thread_id: None,
        msg_id: format!("{user}-1"),
        text: String::new(),
        ts: Utc::now(),
        addressed: true,
        interaction: None,
        attachments: Vec::new(),
    }
}

fn documents(c: &mut Criterion) {
    let bytes = hundred_pages();
    let before = mnemo::bench::peak_rss_mb().unwrap_or(0.0);
    let once = extract("report.pdf", Some("application/pdf"), &bytes, BOUNDS).unwrap();
    let after = mnemo::bench::peak_rss_mb().unwrap_or(0.0);
    eprintln!(
        "documents: a {PAGES}-page PDF of {} KB gave {} KB of text; peak RSS {before:.1} MB before one extraction, \
         {after:.1} MB after",
        bytes.len() / 1024,
        once.text.len() / 1024
    );

    let mut group = c.benchmark_group("documents");
    group.sample_size(10);
    group.bench_function("extract_100_pages", |b| {
        b.iter(|| extract("report.pdf", Some("application/pdf"), &bytes, BOUNDS).unwrap())
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let state = tempfile::tempdir().unwrap();
    let memory = ChannelMemory::open(
        state.path(),
        "console",
        &LockRegistry::new(),
        chrono_tz::UTC,
        Arc::new(NoModel),
    )
    .unwrap();
    let users = AtomicUsize::new(0);
    group.bench_function("take_100_pages", |b| {
        b.iter(|| {
            let id = format!("user-{}", users.fetch_add(1, Ordering::Relaxed));
            let outcome = rt.block_on(take(
                &memory,
                &SafeName::of(&id),
                &message(&id),
                "report.pdf",
                Some("application/pdf"),
                bytes.clone(),
                BOUNDS,
            ));
            assert!(matches!(outcome, DocumentOutcome::Stored { .. }), "{outcome:?}");
        })
    });
    group.finish();
}

criterion_group!(benches, documents);
criterion_main!(benches);
