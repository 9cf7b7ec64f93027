//! STM benches: the cost of one append (fsync on and off) and of building a
//! model context (tail of `contextWindow` records + assemble), against
//! histories of 10², 10⁴ and 10⁶ lines. Both should stay flat as the
//! history grows: appends never read the file, tail reads backwards.
//!
//! History files are generated once, outside the timed loops, by writing
//! lines directly.

use chrono::{TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo_sessions::context::{self, ContextInput};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, Record, Role, SafeName};
use std::fs;
use std::io::{BufWriter, Write};
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

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let new_record = record(u64::MAX);

    let mut append = c.benchmark_group("append");
    for lines in SIZES {
        for fsync in [false, true] {
            let (stm, user) = history(dir.path(), lines, fsync);
            let label = if fsync { "fsync_on" } else { "fsync_off" };
            append.bench_with_input(BenchmarkId::new(label, lines), &lines, |b, _| {
                b.iter(|| runtime.block_on(stm.append(&user, &new_record)).unwrap())
            });
        }
    }
    append.finish();

    let mut build = c.benchmark_group("context_build");
    for lines in SIZES {
        let (stm, user) = history(dir.path(), lines, false);
        let profile = "Prefers short answers. Works on trains. ".repeat(20);
        let summary = "They discussed timetables and delays at length. ".repeat(30);
        build.bench_with_input(BenchmarkId::new("tail_and_build", lines), &lines, |b, _| {
            b.iter(|| {
                let recent = stm.tail(&user, CONTEXT_WINDOW).unwrap();
                context::build(&ContextInput {
                    system_prompt: "You are a helpful assistant.",
                    profile: Some(&profile),
                    summary: Some(&summary),
                    recalled: None,
                    recent: &recent,
                    answering: recent.last().map(|r| r.msg_id.as_str()),
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
