//! What one turn costs the broker itself, the model excluded: dispatch,
//! the access gate, the durable append of the user message, the context
//! from session state, the append of the reply and the send — the real
//! `App` with the instant in-process model of `mnemo bench` (a bench
//! measures our side; the network fakes belong to the tests). Open access
//! and no rate limit, as `mnemo bench` sets them; compaction runs with the
//! default config, so its amortised cost is in the numbers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo::app::App;
use mnemo::bench::{self, instant::TimedChannel};
use mnemo_channels::Channel;
use std::sync::Arc;
use std::time::Duration;

fn turn(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("turn");
    group.measurement_time(Duration::from_secs(4)).sample_size(40);
    for fsync in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        bench::prepare_channel(dir.path(), fsync, true).unwrap();
        let channel = Arc::new(TimedChannel::new());
        let mut sent = channel.listen(&bench::chat_id(0));
        let app = rt.block_on(async {
            App::new(bench::app_parts(dir.path()), vec![channel.clone() as Arc<dyn Channel>]).unwrap()
        });
        let mut seq = 0;
        let label = if fsync { "fsync_on" } else { "fsync_off" };
        group.bench_with_input(BenchmarkId::new("one_message_answered", label), &fsync, |b, _| {
            b.iter(|| {
                seq += 1;
                rt.block_on(async {
                    app.submit(bench::message(0, seq)).await;
                    // A turn that is never answered must fail the run, not hang it.
                    tokio::time::timeout(Duration::from_secs(30), sent.recv())
                        .await
                        .expect("the broker answers every turn")
                        .expect("the channel stays open");
                })
            })
        });
        rt.block_on(app.wait_background(Duration::from_secs(10)));
    }
    group.finish();
}

criterion_group!(benches, turn);
criterion_main!(benches);
