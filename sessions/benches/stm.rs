//! STM benches, on the path a turn takes: one append through the session
//! state (fsync on and off) and the context a turn builds (the session's
//! view of summary, profile and `contextWindow + 1` recent records, then
//! assemble), against short-term logs of 10², 10⁴ and 10⁶ lines. Both
//! should stay flat as the log grows: the log is read once when the user
//! becomes active (outside the timed loop), then appends write one line and
//! the view comes from memory after one `stat` per file.
//!
//! History files are generated once, outside the timed loops, by writing
//! lines directly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo_sessions::compaction::Compactor;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::context::{self, ContextInput};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::session::Sessions;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::summarizer::{SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use std::fs;
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::time::Duration;

const SIZES: [u64; 3] = [100, 10_000, 1_000_000];
const CONTEXT_WINDOW: usize = 10;

fn record(i: u64) -> Record {
    Record {
        ts: Utc.with_ymd_and_hms(2026, 3, 23, 3, 0, 0).unwrap(),
        role: if i.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        text: format!("message {i}: a sentence of ordinary length, about like a chat line."),
        msg_id: i.to_string(),
        channel: "slack".to_string(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

/// The benches never compact; a summarizer is needed only to build one.
struct NoSummarizer;

#[async_trait]
impl Summarizer for NoSummarizer {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Err(SummarizeError::Failed("not used in benches".into()))
    }
}

/// The session state over `stm`, as the broker builds it.
fn sessions(stm: &Stm) -> Sessions {
    let mut config = SessionConfig::default();
    config.stm.fsync = stm.fsync();
    let compactor = Compactor::new(stm.clone(), config.clone(), Arc::new(NoSummarizer));
    Sessions::new(stm.clone(), config, compactor)
}

/// An STM whose user `history-<lines>` has a log of `lines` records.
fn history(root: &std::path::Path, lines: u64, fsync: bool) -> (Stm, SafeName) {
    let stm = Stm::new(Layout::new(root, "bench"), LockRegistry::new(), fsync);
    let user = SafeName::of(&format!("history-{lines}"));
    let path = stm.layout().messages_path(&user);
    if !path.exists() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut out = BufWriter::new(fs::File::create(&path).unwrap());
        for i in 0..lines {
            serde_json::to_writer(&mut out, &record(i)).unwrap();
            out.write_all(b"\n").unwrap();
        }
        out.into_inner().unwrap().sync_all().unwrap();
    }
    (stm, user)
}

/// A profile or summary file: frontmatter and `body`.
fn write_doc(path: &std::path::Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, format!("---\nuserId: bench\n---\n{body}\n")).unwrap();
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The bench stands where the broker does: it passes the wall clock in.
    #[allow(clippy::disallowed_methods)]
    let now = Utc::now();
    let new_record = record(u64::MAX);

    let mut append = c.benchmark_group("append");
    for lines in SIZES {
        for fsync in [false, true] {
            let (stm, user) = history(dir.path(), lines, fsync);
            let sessions = sessions(&stm);
            let label = if fsync { "fsync_on" } else { "fsync_off" };
            append.bench_with_input(BenchmarkId::new(label, lines), &lines, |b, _| {
                b.iter(|| runtime.block_on(sessions.append(&user, &new_record, now)).unwrap())
            });
        }
    }
    append.finish();

    let mut build = c.benchmark_group("context_build");
    for lines in SIZES {
        let (stm, user) = history(dir.path(), lines, false);
        let profile = "Prefers short answers. Works on trains. ".repeat(20);
        let summary = "They discussed timetables and delays at length. ".repeat(30);
        let layout = stm.layout();
        write_doc(&layout.profile_path(&user), &profile);
        write_doc(&layout.summary_path(&user), &summary);
        let sessions = sessions(&stm);
        // The user becomes active: the one whole read, outside the loop.
        runtime
            .block_on(sessions.context_view(&user, CONTEXT_WINDOW + 1))
            .unwrap();
        build.bench_with_input(BenchmarkId::new("view_and_build", lines), &lines, |b, _| {
            b.iter(|| {
                let view = runtime
                    .block_on(sessions.context_view(&user, CONTEXT_WINDOW + 1))
                    .unwrap();
                context::build(&ContextInput {
                    system_prompt: "You are a helpful assistant.",
                    profile: view.profile.as_deref(),
                    summary: view.summary.as_deref(),
                    recalled: None,
                    recent: &view.recent,
                    answering: view.recent.last().map(|r| r.msg_id.as_str()),
                    max_tokens: 6000,
                })
            })
        });
    }
    build.finish();
}

criterion_group! {
    name = stm;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    targets = benches
}
criterion_main!(stm);
