//! What the reminders' delivery round costs when nothing is due: what
//! every broker does once a second (`mnemo::reminders::pass` on the real
//! `App`), over the file store holding many users' reminders (read once at
//! the first round, then claimed from memory). On Postgres the round is
//! one indexed statement per channel; its figures are in BENCHMARKS.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use chrono::{TimeDelta, Utc};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo::app::App;
use mnemo::bench::{self, instant::TimedChannel};
use mnemo_channels::Channel;
use mnemo_sessions::reminders::{Book, Place, Reminder, State};
use mnemo_sessions::{Layout, SafeName};
use std::sync::Arc;
use std::time::Duration;

/// `users` users with three reminders each, all due in a year.
fn seed(root: &std::path::Path, users: usize) {
    let layout = Layout::new(root, bench::instant::CHANNEL);
    let at = Utc::now() + TimeDelta::days(365);
    for u in 0..users {
        let user = SafeName::of(&format!("user-{u}"));
        let reminders = (0..3)
            .map(|i| Reminder {
                id: format!("r{i}{u:05}"),
                text: "water the plants".into(),
                at,
                due: at,
                repeat: (i == 0).then(|| "0 9 * * MON".into()),
                timezone: "Europe/Lisbon".into(),
                place: Place {
                    chat_id: bench::chat_id(u),
                    thread_id: None,
                    group: false,
                    platform: None,
                },
                created: Utc::now(),
                state: State::Active,
                claimed_at: None,
                attempts: 0,
                missed: None,
            })
            .collect();
        let book = Book {
            timezone: None,
            reminders,
        };
        mnemo_sessions::store::files::write_book(&layout, &user, &book).unwrap();
    }
}

fn round(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("reminders");
    group.measurement_time(Duration::from_secs(3)).sample_size(30);
    for users in [100usize, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        bench::prepare_channel(dir.path(), false, false).unwrap();
        seed(dir.path(), users);
        let channel = Arc::new(TimedChannel::new());
        let mut first_user = channel.listen(&bench::chat_id(0));
        let app = rt.block_on(async {
            App::new(bench::app_parts(dir.path()), vec![channel.clone() as Arc<dyn Channel>]).unwrap()
        });
        // The first round reads every user's reminders; the rest are what
        // a broker pays each second.
        rt.block_on(mnemo::reminders::pass(&app, Utc::now()));
        group.bench_with_input(BenchmarkId::new("round_nothing_due", users), &users, |b, _| {
            b.iter(|| rt.block_on(mnemo::reminders::pass(&app, Utc::now())));
        });
        assert!(first_user.try_recv().is_err(), "nothing was due");
    }
    group.finish();
}

criterion_group!(benches, round);
criterion_main!(benches);
