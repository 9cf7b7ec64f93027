//! The Postgres store against a real PostgreSQL (the test kit's throwaway
//! server): migrations, the turn's append and view, per-user order across
//! two brokers, folds as one transaction, recall, `store copy`'s write of a
//! user (after a turn in progress, read back the same, never merged), and
//! the bad days (the database going away mid-turn, a pool exhausted, a
//! clear during a fold).

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use mnemo_pg::fold::PgFold;
use mnemo_pg::migrate::{self, latest};
use mnemo_pg::{PgChannel, PgError, PgStore};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_sessions::{Record, Role, SafeName};
use mnemo_testkit::pg;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

fn store(url: &str) -> PgStore {
    PgStore::connect(url, 8, Duration::from_secs(5)).unwrap()
}

async fn migrated() -> (PgStore, String) {
    let url = pg::database().url();
    let store = store(&url);
    migrate::migrate(&store).await.unwrap();
    (store, url)
}

fn at(minute: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap() + TimeDelta::minutes(minute)
}

fn record(i: i64, text: &str) -> Record {
    Record {
        ts: at(i),
        role: if i % 2 == 0 { Role::User } else { Role::Assistant },
        text: text.to_string(),
        msg_id: format!("m{i}"),
        channel: "telegram".into(),
        thread_id: None,
        chat_id: Some("c1".into()),
        user_name: None,
    }
}

/// Sums up by counting, and learns one fact per batch.
struct Counting {
    calls: AtomicUsize,
}

#[async_trait]
impl Summarizer for Counting {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(SummaryOutput {
            summary: format!("summary {n}: {} messages folded", request.messages.len()),
            facts: vec![Fact {
                section: FactSection::Facts,
                key: "folds".into(),
                value: n.to_string(),
            }],
        })
    }
}

struct Failing;

#[async_trait]
impl Summarizer for Failing {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Err(SummarizeError::Failed("down".into()))
    }
}

/// Waits for a go before answering.
struct Gated {
    started: Notify,
    go: Notify,
}

#[async_trait]
impl Summarizer for Gated {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        self.started.notify_one();
        self.go.notified().await;
        Ok(SummaryOutput {
            summary: "late summary".into(),
            facts: vec![],
        })
    }
}

fn config() -> SessionConfig {
    let mut c = SessionConfig::default();
    c.compacting.threshold = 20;
    c.stm.context_window = 5;
    c.stm.max_messages = 30;
    c.stm.max_age_minutes = 100_000;
    c
}

fn channel(store: &PgStore, summarizer: Arc<dyn Summarizer>) -> PgChannel {
    PgChannel::new(store.clone(), "telegram", config(), summarizer)
}

fn counting() -> Arc<Counting> {
    Arc::new(Counting {
        calls: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn migrating_twice_changes_nothing_the_second_time() {
    let store = store(&pg::database().url());
    let err = migrate::check(&store).await.unwrap_err();
    assert!(matches!(err, PgError::SchemaBehind { have: 0, .. }), "{err}");
    assert!(err.to_string().contains("mnemo store migrate"), "{err}");
    let first = migrate::migrate(&store).await.unwrap();
    assert_eq!(
        (first.from, first.to, first.applied.len()),
        (0, latest(), migrate::count())
    );
    let second = migrate::migrate(&store).await.unwrap();
    assert_eq!((second.from, second.to), (latest(), latest()));
    assert!(second.applied.is_empty());
    migrate::check(&store).await.unwrap();
}

#[tokio::test]
async fn two_brokers_migrating_at_once_apply_each_migration_once() {
    let url = pg::database().url();
    let (a, b) = (store(&url), store(&url));
    let (ra, rb) = tokio::join!(migrate::migrate(&a), migrate::migrate(&b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.applied.len() + rb.applied.len(), migrate::count(), "{ra:?} {rb:?}");
    migrate::check(&a).await.unwrap();
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    let (store, url) = migrated().await;
    let admin = tokio_postgres_client(&url).await;
    admin
        .execute(
            "INSERT INTO mnemo_schema (version, name) VALUES (999, 'from the future')",
            &[],
        )
        .await
        .unwrap();
    let err = migrate::check(&store).await.unwrap_err();
    assert!(matches!(err, PgError::SchemaAhead { have: 999, .. }), "{err}");
    assert!(
        migrate::migrate(&store).await.is_err(),
        "migrate must not run over a newer schema"
    );
}

async fn tokio_postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test]
async fn a_turn_appends_views_and_ignores_a_redelivery() {
    let (store, _) = migrated().await;
    let ch = channel(&store, counting());
    let user = SafeName::of("4242");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let (first, view) = turn
        .append_then_view(&record(0, "hello\0there"), at(0), 11)
        .await
        .unwrap();
    assert!(!first.duplicate && !first.fold_due);
    assert_eq!(view.recent.len(), 1);
    assert_eq!(
        view.recent[0].text, "hello\u{2400}there",
        "NUL kept as its visible symbol"
    );
    let again = turn.append(&record(0, "hello\0there"), at(0)).await.unwrap();
    assert!(again.duplicate, "the same platform message id is stored once");
    turn.append(&record(1, "hi, how can I help?"), at(1)).await.unwrap();
    let view = turn.view(11).await.unwrap();
    let ids: Vec<&str> = view.recent.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, ["m0", "m1"]);
    assert_eq!(view.recent[1].role, Role::Assistant);
    assert_eq!(view.recent[0].chat_id.as_deref(), Some("c1"));
    assert!(view.summary.is_none() && view.profile.is_none());
    drop(turn);

    // Another user sees nothing of it.
    let mut other = ch.begin_turn(&SafeName::of("7")).await.unwrap();
    assert!(other.view(11).await.unwrap().recent.is_empty());
    let found = other.recall("hello there", &[], 500, None).await.unwrap();
    assert!(found.items.is_empty(), "recall is scoped to the user");
}

#[tokio::test]
async fn one_users_turns_run_one_at_a_time_across_brokers() {
    let (a, url) = migrated().await;
    let b = store(&url);
    let (ca, cb) = (channel(&a, counting()), channel(&b, counting()));
    let user = SafeName::of("u1");
    let mut first = ca.begin_turn(&user).await.unwrap();
    first.append(&record(0, "first question"), at(0)).await.unwrap();
    // Broker B takes the same user's next message while A's turn is open:
    // it waits for A's reply instead of slipping in between.
    let second = tokio::spawn({
        let (cb, user) = (cb.clone(), user.clone());
        async move {
            let mut turn = cb.begin_turn(&user).await.unwrap();
            turn.append(&record(2, "second question"), at(2)).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.append(&record(1, "first answer"), at(1)).await.unwrap();
    drop(first);
    second.await.unwrap();
    let mut turn = ca.begin_turn(&user).await.unwrap();
    let ids: Vec<String> = turn
        .view(10)
        .await
        .unwrap()
        .recent
        .iter()
        .map(|r| r.msg_id.clone())
        .collect();
    assert_eq!(ids, ["m0", "m1", "m2"], "question, its answer, then the next question");
    // A different user is never held up by u1's lock.
    let mut other = cb.begin_turn(&SafeName::of("u2")).await.unwrap();
    other.append(&record(0, "x"), at(0)).await.unwrap();
}

#[tokio::test]
async fn a_fold_summarizes_archives_and_keeps_recall() {
    let (store, _) = migrated().await;
    let summarizer = counting();
    let ch = channel(&store, summarizer.clone());
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let mut due = false;
    for i in 0..21 {
        let text = if i == 2 {
            "my dentist is Dr. Okafor on Elm Street".to_string()
        } else {
            format!("chat {i}")
        };
        due = turn.append(&record(i, &text), at(i)).await.unwrap().fold_due;
    }
    assert!(due, "21 unfolded past a threshold of 20");
    drop(turn);
    let outcome = ch.compact(&user, at(30)).await.unwrap();
    let PgFold::Compacted { folded, facts } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(folded, 16, "all but the window of 5");
    assert_eq!(facts.added, 1);
    assert_eq!(ch.compact(&user, at(30)).await.unwrap(), PgFold::NotNeeded);

    let mut turn = ch.begin_turn(&user).await.unwrap();
    let view = turn.view(11).await.unwrap();
    assert_eq!(view.summary.as_deref(), Some("summary 1: 16 messages folded"));
    assert!(
        view.profile.as_deref().unwrap().contains("folds: 1"),
        "{:?}",
        view.profile
    );
    let ids: Vec<&str> = view.recent.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, ["m16", "m17", "m18", "m19", "m20"]);
    let found = turn
        .recall("who is my dentist?", &view.recent, 500, None)
        .await
        .unwrap();
    let text = found.render().unwrap();
    assert!(
        text.contains("[2026-11-30, you] my dentist is Dr. Okafor on Elm Street"),
        "{text}"
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_clear_during_a_fold_supersedes_it_and_nothing_is_written() {
    let (store, _) = migrated().await;
    let gated = Arc::new(Gated {
        started: Notify::new(),
        go: Notify::new(),
    });
    let ch = channel(&store, gated.clone());
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    for i in 0..21 {
        turn.append(&record(i, "words"), at(i)).await.unwrap();
    }
    drop(turn);
    let fold = tokio::spawn({
        let (ch, user) = (ch.clone(), user.clone());
        async move { ch.compact(&user, at(30)).await }
    });
    gated.started.notified().await;
    assert_eq!(ch.compact(&user, at(30)).await.unwrap(), PgFold::AlreadyRunning);
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let reply = ch
        .command(&mut turn, &mnemo_sessions::commands::SessionCommand::Clear, at(30))
        .await
        .unwrap();
    drop(turn);
    assert!(
        reply.starts_with("Cleared our recent conversation (21 messages)"),
        "{reply}"
    );
    gated.go.notify_one();
    assert_eq!(fold.await.unwrap().unwrap(), PgFold::Superseded);
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let view = turn.view(11).await.unwrap();
    assert!(view.summary.is_none() && view.recent.is_empty(), "{view:?}");
}

#[tokio::test]
async fn a_failing_summarizer_keeps_short_term_memory_bounded() {
    let (store, _) = migrated().await;
    let ch = channel(&store, Arc::new(Failing));
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    for i in 0..25 {
        turn.append(&record(i, "words"), at(i)).await.unwrap();
    }
    drop(turn);
    let outcome = ch.compact(&user, at(30)).await.unwrap();
    assert!(
        matches!(outcome, PgFold::SummarizerFailed { failures: 1, .. }),
        "{outcome:?}"
    );
    let mut turn = ch.begin_turn(&user).await.unwrap();
    for i in 25..33 {
        turn.append(&record(i, "words"), at(i)).await.unwrap();
    }
    drop(turn);
    let outcome = ch.compact(&user, at(40)).await.unwrap();
    assert_eq!(
        outcome,
        PgFold::Fallback {
            archived: 3,
            failures: 2
        }
    );
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let reply = ch
        .command(&mut turn, &mnemo_sessions::commands::SessionCommand::Status, at(40))
        .await
        .unwrap();
    assert!(
        reply.contains("30 messages in short-term memory, 3 archived"),
        "{reply}"
    );
}

#[tokio::test]
async fn clear_all_deletes_everything_of_the_user_only() {
    let (store, _) = migrated().await;
    let ch = channel(&store, counting());
    let (u1, u2) = (SafeName::of("u1"), SafeName::of("u2"));
    for user in [&u1, &u2] {
        let mut turn = ch.begin_turn(user).await.unwrap();
        for i in 0..21 {
            turn.append(&record(i, "the secret word is heliotrope"), at(i))
                .await
                .unwrap();
        }
    }
    ch.compact(&u1, at(30)).await.unwrap();
    let mut turn = ch.begin_turn(&u1).await.unwrap();
    let reply = ch
        .command(
            &mut turn,
            &mnemo_sessions::commands::SessionCommand::ClearAllConfirmed,
            at(30),
        )
        .await
        .unwrap();
    drop(turn);
    assert!(reply.starts_with("Deleted everything"), "{reply}");
    let mut turn = ch.begin_turn(&u1).await.unwrap();
    let view = turn.view(50).await.unwrap();
    assert!(view.recent.is_empty() && view.summary.is_none() && view.profile.is_none());
    assert!(
        turn.recall("heliotrope", &[], 500, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    drop(turn);
    let mut turn = ch.begin_turn(&u2).await.unwrap();
    assert_eq!(
        turn.view(50).await.unwrap().recent.len(),
        21,
        "the other user keeps theirs"
    );
}

#[tokio::test]
async fn a_database_that_goes_away_mid_turn_loses_no_committed_message() {
    let cluster = pg::Cluster::start();
    let url = cluster.create_database().url();
    let store = PgStore::connect(&url, 4, Duration::from_secs(2)).unwrap();
    migrate::migrate(&store).await.unwrap();
    let ch = channel(&store, counting());
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    turn.append(&record(0, "acknowledged before the crash"), at(0))
        .await
        .unwrap();
    cluster.stop();
    let err = turn.append(&record(1, "the answer"), at(1)).await.unwrap_err();
    assert!(matches!(err, PgError::Db(_)), "{err}");
    drop(turn);
    assert!(ch.begin_turn(&user).await.is_err(), "no database, no turn");
    cluster.start_server();
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let ids: Vec<String> = turn
        .view(10)
        .await
        .unwrap()
        .recent
        .iter()
        .map(|r| r.msg_id.clone())
        .collect();
    assert_eq!(ids, ["m0"]);
}

#[tokio::test]
async fn an_exhausted_pool_refuses_the_turn_then_recovers() {
    let url = pg::database().url();
    let store = PgStore::connect(&url, 2, Duration::from_millis(300)).unwrap();
    migrate::migrate(&store).await.unwrap();
    let ch = channel(&store, counting());
    let a = ch.begin_turn(&SafeName::of("a")).await.unwrap();
    let b = ch.begin_turn(&SafeName::of("b")).await.unwrap();
    let err = ch
        .begin_turn(&SafeName::of("c"))
        .await
        .err()
        .expect("no third connection");
    assert!(matches!(err, PgError::Pool(_)), "{err}");
    assert!(err.to_string().contains("no database connection"), "{err}");
    drop(a);
    drop(b);
    let mut c = ch.begin_turn(&SafeName::of("c")).await.unwrap();
    c.append(&record(0, "now it works"), at(0)).await.unwrap();
}

#[tokio::test]
async fn maintenance_runs_on_one_broker_at_a_time_and_a_dead_holders_lease_is_taken_over() {
    let (a, url) = migrated().await;
    let b = store(&url);
    let (ca, cb) = (channel(&a, counting()), channel(&b, counting()));
    let now = at(0);
    mnemo_pg::maintain::take_lease(&ca, "maintenance/telegram", "broker-a", now, mnemo_pg::maintain::LEASE)
        .await
        .unwrap()
        .unwrap();
    let report = mnemo_pg::maintain::run(&cb, "broker-b", now).await.unwrap();
    assert_eq!(report.held_by.as_deref(), Some("broker-a"), "{report}");
    // broker-a died without giving it back: once it expires, b takes over.
    let later = now + mnemo_pg::maintain::LEASE + TimeDelta::seconds(1);
    let report = mnemo_pg::maintain::run(&cb, "broker-b", later).await.unwrap();
    assert_eq!(report.held_by, None, "{report}");
    // b gave it back after its run: a may run now.
    let report = mnemo_pg::maintain::run(&ca, "broker-a", later).await.unwrap();
    assert_eq!(report.held_by, None, "{report}");
}

#[tokio::test]
async fn maintenance_folds_a_quiet_users_aged_messages_and_expires_an_idle_one() {
    let (store, _) = migrated().await;
    let mut config = config();
    config.stm.max_age_minutes = 60;
    let summarizer = counting();
    let ch = PgChannel::new(store.clone(), "telegram", config, summarizer.clone());
    let (quiet, idle, active) = (SafeName::of("quiet"), SafeName::of("idle"), SafeName::of("active"));
    let now = at(0) + TimeDelta::days(10);
    for (user, start) in [
        (&quiet, now - TimeDelta::hours(2)),
        (&idle, now - TimeDelta::days(5)),
        (&active, now),
    ] {
        let mut turn = ch.begin_turn(user).await.unwrap();
        for i in 0..6 {
            let mut r = record(i, &format!("note {i} about the lighthouse"));
            r.ts = start + TimeDelta::minutes(i);
            turn.append(&r, r.ts).await.unwrap();
        }
    }
    let report = mnemo_pg::maintain::run(&ch, "broker-a", now).await.unwrap();
    assert_eq!((report.folded, report.expired, report.failed), (1, 1, 0), "{report}");
    assert_eq!(report.dailies, 1, "the idle user's last day got its daily: {report}");
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        2,
        "only the quiet user's fold and the idle user's daily were summarized"
    );

    let mut turn = ch.begin_turn(&quiet).await.unwrap();
    let view = turn.view(10).await.unwrap();
    assert!(
        view.recent.is_empty() && view.summary.is_some(),
        "aged messages folded: {view:?}"
    );
    drop(turn);
    let mut turn = ch.begin_turn(&idle).await.unwrap();
    let view = turn.view(10).await.unwrap();
    assert!(view.recent.is_empty(), "idle short-term memory expired");
    let found = turn.recall("lighthouse", &[], 500, None).await.unwrap();
    assert_eq!(
        found.items.len() + found.omitted,
        6,
        "expired messages stay in the archive"
    );
    drop(turn);
    let mut turn = ch.begin_turn(&active).await.unwrap();
    assert_eq!(
        turn.view(10).await.unwrap().recent.len(),
        6,
        "an active user is left alone"
    );
    drop(turn);
    let again = mnemo_pg::maintain::run(&ch, "broker-a", now).await.unwrap();
    assert_eq!(
        (again.folded, again.expired),
        (0, 0),
        "a second run finds nothing to do"
    );
}

#[tokio::test]
async fn seeded_history_is_archived_in_folds_and_recalled() {
    let (store, url) = migrated().await;
    let ch = channel(&store, counting());
    let user = SafeName::of("seeded");
    let records: Vec<Record> = (0..105)
        .map(|i| {
            record(
                i,
                &format!("entry {i} mentions {}", if i == 7 { "zeppelin" } else { "nothing" }),
            )
        })
        .collect();
    mnemo_pg::seed::seed_history(&ch, &user, records, 100, 16, "earlier talk", at(200))
        .await
        .unwrap();
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let view = turn.view(10).await.unwrap();
    assert_eq!(view.recent.len(), 5);
    assert_eq!(view.recent[0].msg_id, "m100");
    assert_eq!(view.summary.as_deref(), Some("earlier talk"));
    let found = turn.recall("zeppelin", &view.recent, 500, None).await.unwrap();
    assert!(found.render().unwrap().contains("entry 7 mentions zeppelin"));
    let appended = turn.append(&record(105, "next"), at(300)).await.unwrap();
    assert!(!appended.duplicate, "the sequence continues after the seeded ones");
    drop(turn);
    let client = tokio_postgres_client(&url).await;
    let folds: Vec<(i64, i64, i64, i32)> = client
        .query(
            "SELECT fold, first_seq, last_seq, messages FROM mnemo_folds ORDER BY fold",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(folds.len(), 7, "100 archived in batches of 16");
    assert_eq!(folds[0], (1, 1, 16, 16));
    assert_eq!(folds[6], (7, 97, 100, 4));
    let unfolded_in_fold_7: i64 = client
        .query_one("SELECT count(*) FROM mnemo_messages WHERE fold = 7", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(unfolded_in_fold_7, 4);
    // A fold after seeding numbers on from the seeded folds.
    assert_eq!(ch.compact(&user, at(300)).await.unwrap(), PgFold::NotNeeded);
}

/// A user's memory as `mnemo store copy` hands it over: five messages, the
/// first three archived in one fold, a summary and a profile.
fn copied(text: &str) -> mnemo_pg::copy::UserMemory {
    mnemo_pg::copy::UserMemory {
        messages: (0..5).map(|i| record(i, &format!("{text} {i}"))).collect(),
        folds: vec![mnemo_pg::copy::Fold {
            messages: 3,
            kind: "summarized".into(),
            at: at(2),
        }],
        summary: Some("we talked".into()),
        summary_at: Some(at(3)),
        profile: Some("## Facts\n- a: b".into()),
        profile_at: None,
        failures: 0,
        ..Default::default()
    }
    .as_stored()
}

#[tokio::test]
async fn a_copied_user_waits_for_a_turn_in_progress_then_reads_back_the_same_and_is_never_merged() {
    use mnemo_pg::copy::{CopyError, Written, read_user, write_user};
    let (store, url) = migrated().await;
    let ch = channel(&store, counting());
    let user = SafeName::of("u1");
    let memory = copied("said");
    // A broker is in the middle of u1's turn: the copy waits for it.
    let turn = ch.begin_turn(&user).await.unwrap();
    let copying = tokio::spawn({
        let (store, memory) = (store.clone(), memory.clone());
        async move { write_user(&store, "telegram", "u1", &memory, false).await }
    });
    let client = tokio_postgres_client(&url).await;
    mnemo_testkit::eventually("the copy waiting for the user's lock", async || {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        waiting == 1
    })
    .await;
    drop(turn);
    let written = copying.await.unwrap().unwrap();
    assert!(matches!(written, Written::Copied(ref t) if t.messages == 5 && t.archived == 3));

    let back = read_user(&store, "telegram", "u1").await.unwrap().unwrap();
    assert!(back.same_as(&memory) && back.tally() == memory.tally());
    assert_eq!(back.folds, memory.folds);
    let row = client
        .query_one(
            "SELECT next_seq, folds, (SELECT count(*) FROM mnemo_messages WHERE fold = 1) FROM mnemo_users",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)),
        (6, 1, 3)
    );
    // The next turn continues the copied history.
    let mut turn = ch.begin_turn(&user).await.unwrap();
    turn.append(&record(9, "after the copy"), at(9)).await.unwrap();
    assert_eq!(turn.view(1).await.unwrap().recent[0].msg_id, "m9");
    drop(turn);

    // The same copy again is a no-op; a different one is refused, not
    // merged, and --replace writes it whole.
    let now = read_user(&store, "telegram", "u1").await.unwrap().unwrap();
    let again = write_user(&store, "telegram", "u1", &now, false).await.unwrap();
    assert!(matches!(again, Written::AlreadyThere(_)), "{again:?}");
    let other = copied("other");
    let refused = write_user(&store, "telegram", "u1", &other, false).await.unwrap_err();
    assert!(matches!(refused, CopyError::Differs { .. }), "{refused}");
    assert!(refused.to_string().contains("telegram/u1") && !refused.to_string().contains("other"));
    let replaced = write_user(&store, "telegram", "u1", &other, true).await.unwrap();
    assert!(matches!(replaced, Written::Replaced(_)));
    assert!(
        read_user(&store, "telegram", "u1")
            .await
            .unwrap()
            .unwrap()
            .same_as(&other)
    );
}

/// A role that may not create extensions (no CREATE on the database)
/// still migrates: recall keeps the index shared by every user, says so,
/// and still finds only the user's own messages.
#[tokio::test]
async fn without_btree_gin_the_migration_keeps_a_shared_recall_index() {
    let db = pg::database();
    let admin = tokio_postgres_client(&db.url()).await;
    let role = format!("limited_{}", db.name);
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE, CREATE ON SCHEMA public TO {role}; \
             REVOKE CREATE ON DATABASE {name} FROM PUBLIC",
            name = db.name
        ))
        .await
        .unwrap();
    let url = format!("postgres://{role}@{}:{}/{}", db.host, db.port, db.name);
    let store = store(&url);
    let done = migrate::migrate(&store).await.unwrap();
    assert_eq!(done.to, latest());
    assert!(!store.recall_index_per_user().await.unwrap());
    let ch = channel(&store, counting());
    for (user, text) in [("a", "the zeppelin lands at noon"), ("b", "my zeppelin is red")] {
        let mut turn = ch.begin_turn(&SafeName::of(user)).await.unwrap();
        turn.append(&record(0, text), at(0)).await.unwrap();
    }
    let mut turn = ch.begin_turn(&SafeName::of("a")).await.unwrap();
    let found = turn.recall("zeppelin", &[], 500, None).await.unwrap().render().unwrap();
    assert!(found.contains("lands at noon") && !found.contains("is red"), "{found}");

    let (full, _) = migrated().await;
    assert!(full.recall_index_per_user().await.unwrap(), "with btree_gin: per user");
}

/// A long history where one word is in every message: the rare word of the
/// question narrows the search (the common one only ranks), and the fact
/// is found however old it is.
#[tokio::test]
async fn in_a_long_history_the_rare_word_finds_an_old_fact() {
    let (store, _) = migrated().await;
    let ch = channel(&store, counting());
    let user = SafeName::of("long");
    let records: Vec<Record> = (0..3000)
        .map(|i| {
            let text = if i == 10 {
                "the build broke again; my dentist is Dr. Okafor".to_string()
            } else {
                format!("the build number {i} went fine")
            };
            record(i, &text)
        })
        .collect();
    mnemo_pg::seed::seed_history(&ch, &user, records, 2990, 16, "builds", at(0))
        .await
        .unwrap();
    store.analyze().await.unwrap();
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let found = turn
        .recall("who is my dentist, now that the build is fixed?", &[], 500, None)
        .await
        .unwrap();
    let text = found.render().unwrap();
    assert!(text.contains("my dentist is Dr. Okafor"), "{text}");
    // Only common words: the newest matches are ranked, nothing fails.
    let common = turn.recall("build", &[], 200, None).await.unwrap();
    assert!(!common.items.is_empty());
}

/// At `day` of December 2026, 04:00 UTC: after the default daily summary
/// hour (03:00).
fn december(day: u32) -> DateTime<Utc> {
    on(12, day, 4)
}

/// `hour`:00 UTC of a day in 2026.
fn on(month: u32, day: u32, hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, month, day, hour, 0, 0).unwrap()
}

async fn digests_of(url: &str) -> Vec<(String, String, String, i32, String)> {
    tokio_postgres_client(url)
        .await
        .query(
            "SELECT user_key, kind, period, messages, body FROM mnemo_digests ORDER BY user_key, kind, period",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// Writes `n` messages of `user` at `start`, a minute apart.
async fn wrote(ch: &PgChannel, user: &SafeName, start: DateTime<Utc>, n: i64, tag: &str) {
    let mut turn = ch.begin_turn(user).await.unwrap();
    for i in 0..n {
        let mut r = record(i, &format!("note {i} about the {tag}"));
        r.ts = start + TimeDelta::minutes(i);
        r.msg_id = format!("{tag}-{i}");
        turn.append(&r, r.ts).await.unwrap();
    }
}

#[tokio::test]
async fn dailies_then_the_weekly_are_written_once_each_on_the_databases_schedule() {
    let (store, url) = migrated().await;
    let summarizer = counting();
    let ch = channel(&store, summarizer.clone());
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    // Monday and Tuesday of ISO week 2026-W49 for ada, Tuesday for bob.
    wrote(&ch, &ada, on(11, 30, 10), 3, "monday").await;
    wrote(&ch, &ada, on(12, 1, 22), 2, "tuesday").await;
    wrote(&ch, &bob, on(12, 1, 9), 4, "tuesday").await;

    let report = mnemo_pg::maintain::run(&ch, "broker-a", december(3)).await.unwrap();
    assert_eq!((report.dailies, report.weeklies), (3, 0), "{report}");
    assert!(report.digest_failures.is_empty(), "{report}");
    let rows = digests_of(&url).await;
    let periods: Vec<(&str, &str, &str, i32)> = rows
        .iter()
        .map(|(u, k, p, n, _)| (u.as_str(), k.as_str(), p.as_str(), *n))
        .collect();
    assert_eq!(
        periods,
        vec![
            ("ada", "daily", "2026-11-30", 3),
            ("ada", "daily", "2026-12-01", 2),
            ("bob", "daily", "2026-12-01", 4),
        ]
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 3);

    // The same day again (a second broker, a restart): no model call.
    let again = mnemo_pg::maintain::run(&ch, "broker-b", december(3)).await.unwrap();
    assert_eq!((again.dailies, again.weeklies), (0, 0), "{again}");
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 3);

    // After the week: one weekly per user, made of their dailies.
    let week = mnemo_pg::maintain::run(&ch, "broker-a", december(14)).await.unwrap();
    assert_eq!((week.dailies, week.weeklies), (0, 2), "{week}");
    let weeklies: Vec<(String, i32)> = digests_of(&url)
        .await
        .into_iter()
        .filter(|(_, k, p, _, _)| k == "weekly" && p == "2026-W49")
        .map(|(u, _, _, n, _)| (u, n))
        .collect();
    assert_eq!(weeklies, vec![("ada".to_string(), 5), ("bob".to_string(), 4)]);
    let state: String = tokio_postgres_client(&url)
        .await
        .query_one("SELECT state FROM mnemo_maintenance WHERE channel = 'telegram'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(state.contains("\"weeklyDoneThrough\":\"2026-W49\""), "{state}");

    // `clear all` takes the user's digests along.
    let mut turn = ch.begin_turn(&bob).await.unwrap();
    ch.command(
        &mut turn,
        &mnemo_sessions::commands::SessionCommand::ClearAllConfirmed,
        december(14),
    )
    .await
    .unwrap();
    drop(turn);
    assert!(digests_of(&url).await.iter().all(|(u, ..)| u == "ada"));
}

#[tokio::test]
async fn a_daily_of_messages_cleared_while_it_was_summarized_is_not_written() {
    let (store, url) = migrated().await;
    let gated = Arc::new(Gated {
        started: Notify::new(),
        go: Notify::new(),
    });
    let ch = channel(&store, gated.clone());
    let ada = SafeName::of("ada");
    wrote(&ch, &ada, on(12, 1, 10), 3, "tuesday").await;
    let run = tokio::spawn({
        let ch = ch.clone();
        async move { mnemo_pg::maintain::run(&ch, "broker-a", december(3)).await }
    });
    gated.started.notified().await;
    let mut turn = ch.begin_turn(&ada).await.unwrap();
    ch.command(&mut turn, &mnemo_sessions::commands::SessionCommand::Clear, december(3))
        .await
        .unwrap();
    drop(turn);
    gated.go.notify_one();
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.dailies, 0, "{report}");
    assert!(digests_of(&url).await.is_empty(), "no summary of cleared messages");
}

#[tokio::test]
async fn an_unreadable_maintenance_state_stops_the_summaries_not_the_sweep() {
    let (store, url) = migrated().await;
    let summarizer = counting();
    let ch = channel(&store, summarizer.clone());
    let ada = SafeName::of("ada");
    wrote(&ch, &ada, on(12, 1, 10), 3, "tuesday").await;
    tokio_postgres_client(&url)
        .await
        .execute(
            "INSERT INTO mnemo_maintenance (channel, state, updated_at) VALUES ('telegram', '{\"dailyDoneThrough\": 7', now())",
            &[],
        )
        .await
        .unwrap();
    let report = mnemo_pg::maintain::run(&ch, "broker-a", december(3)).await.unwrap();
    assert_eq!(report.dailies, 0, "{report}");
    let failure = &report.digest_failures[0];
    assert!(
        failure.reason.contains("mnemo_maintenance") && failure.reason.contains("delete the row"),
        "{failure:?}"
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 0);
    assert!(digests_of(&url).await.is_empty());
}

/// Sums a day up in three pieces, one of them about the cat.
struct Diarist;

#[async_trait]
impl Summarizer for Diarist {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Ok(SummaryOutput {
            summary:
                "Talked through the quarterly taxes.\n\n- Ada's cat is named Pixel.\n- The boiler needs a service."
                    .into(),
            facts: vec![],
        })
    }
}

#[tokio::test]
async fn recall_finds_the_matching_piece_of_a_daily_summary_and_only_the_users_own() {
    let (store, url) = migrated().await;
    let ch = channel(&store, Arc::new(Diarist));
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    wrote(&ch, &ada, on(12, 1, 10), 3, "tuesday").await;
    wrote(&ch, &bob, on(12, 1, 10), 1, "tuesday").await;
    let report = mnemo_pg::maintain::run(&ch, "broker-a", december(3)).await.unwrap();
    assert_eq!(report.dailies, 2, "{report}");

    let mut turn = ch.begin_turn(&ada).await.unwrap();
    let found = turn.recall("what is my cat called?", &[], 500, None).await.unwrap();
    let lines: Vec<String> = found.items.iter().map(|i| format!("{} {}", i.label, i.text)).collect();
    assert_eq!(
        lines,
        vec!["[summary 2026-12-01] - Ada's cat is named Pixel.".to_string()]
    );
    drop(turn);

    // bob's daily says the same, and bob's recall finds only bob's.
    tokio_postgres_client(&url)
        .await
        .execute("DELETE FROM mnemo_digests WHERE user_key = 'ada'", &[])
        .await
        .unwrap();
    let mut turn = ch.begin_turn(&ada).await.unwrap();
    let found = turn.recall("what is my cat called?", &[], 500, None).await.unwrap();
    assert!(found.items.is_empty(), "{:?}", found.items);
}

#[tokio::test]
async fn retention_deletes_archives_and_summaries_past_their_keep_time_and_nothing_else() {
    let (store, url) = migrated().await;
    let mut config = config();
    config.scheduler.archive_keep_days = 2;
    config.scheduler.summary_keep_days = 2;
    let ch = PgChannel::new(store.clone(), "telegram", config, counting());
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    // ada: 30 messages on Dec 1, folded on Dec 1; a daily of them.
    wrote(&ch, &ada, on(12, 1, 10), 30, "tuesday").await;
    ch.compact(&ada, on(12, 1, 11)).await.unwrap();
    // bob writes on Dec 9: short-term, folded never.
    wrote(&ch, &bob, on(12, 9, 10), 3, "wednesday").await;
    let report = mnemo_pg::maintain::run(&ch, "broker-a", december(2)).await.unwrap();
    assert_eq!(
        (report.dailies, report.removed_archived, report.removed_digests),
        (1, 0, 0),
        "{report}"
    );
    let client = tokio_postgres_client(&url).await;
    let count = async |sql: &str| -> i64 { client.query_one(sql, &[]).await.unwrap().get(0) };
    let archived_before = count("SELECT count(*) FROM mnemo_messages WHERE fold IS NOT NULL").await;
    assert!(archived_before > 0);

    let report = mnemo_pg::maintain::run(&ch, "broker-a", december(10)).await.unwrap();
    assert_eq!(report.removed_archived, archived_before as u64, "{report}");
    assert_eq!(report.removed_digests, 1, "{report}");
    // Left: ada's short-term rest, expired into the archive by this very
    // run (archived today, so kept), and bob's short-term messages.
    assert_eq!(report.expired, 1, "{report}");
    assert_eq!(
        count("SELECT count(*) FROM mnemo_messages WHERE fold IS NOT NULL").await,
        30 - archived_before
    );
    assert_eq!(
        count("SELECT count(*) FROM mnemo_folds WHERE kind <> 'expired'").await,
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM mnemo_messages WHERE fold IS NULL").await,
        3,
        "short-term memory is never touched"
    );
    assert_eq!(
        count("SELECT count(*) FROM mnemo_users WHERE summary IS NOT NULL").await,
        1,
        "ada's rolling summary stays"
    );
}

#[tokio::test]
async fn the_second_round_finds_the_other_half_of_a_fact_told_in_two_places() {
    let (store, _) = migrated().await;
    let ch = channel(&store, counting());
    let ada = SafeName::of("ada");
    let mut turn = ch.begin_turn(&ada).await.unwrap();
    let said = [
        "my sister is called Ana",
        "the weather was grey all week",
        "we painted the kitchen yellow",
        "Ana moved to Lisbon in March",
        "the train was late again",
    ];
    for (i, text) in said.iter().enumerate() {
        let r = record(2 * i as i64, text);
        turn.append(&r, r.ts).await.unwrap();
    }
    // Enough history that a word in two messages counts as rare (the
    // files' IDF floor: at most 9 of 25).
    for i in 0..20 {
        let r = record(100 + 2 * i, &format!("filler entry number{i}"));
        turn.append(&r, r.ts).await.unwrap();
    }
    let found = turn
        .recall("where does my sister live now?", &[], 500, None)
        .await
        .unwrap();
    let texts: Vec<&str> = found.items.iter().map(|i| i.text.as_str()).collect();
    assert!(texts.contains(&"my sister is called Ana"), "{texts:?}");
    assert!(
        texts.contains(&"Ana moved to Lisbon in March"),
        "found through the first hit's rare word: {texts:?}"
    );
    assert_eq!(texts.len(), 2, "nothing unrelated: {texts:?}");
}

/// Embeds by concept: anything about cars (or automobiles) points one way,
/// food another, so a paraphrase is near where full text finds nothing.
struct Concepts(&'static str);

fn concept(text: &str) -> Vec<f32> {
    let t = text.to_lowercase();
    let car = t.contains("car") || t.contains("automobile");
    let food = t.contains("soup") || t.contains("dinner");
    vec![f32::from(u8::from(car)) + 0.01, f32::from(u8::from(food)) + 0.01, 0.05]
}

#[async_trait]
impl mnemo_sessions::recall::Embedder for Concepts {
    async fn embed(
        &self,
        texts: &[String],
        _: mnemo_sessions::recall::EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, mnemo_sessions::recall::EmbedError> {
        Ok(texts.iter().map(|t| concept(t)).collect())
    }

    fn model(&self) -> &str {
        self.0
    }
}

/// pgvector is on this machine (the CI builds it from Debian's source when
/// missing) or the test says why it only checks the fallback.
async fn pgvector_in_use(store: &PgStore) -> bool {
    let in_use = store.vectors().await.unwrap() == mnemo_pg::Vectors::InUse;
    if !in_use {
        assert!(
            !pg::pgvector_required(),
            "MNEMO_TEST_REQUIRE_PGVECTOR is set but the server has no pgvector: {}",
            store.vectors().await.unwrap()
        );
        eprintln!("pgvector is not installed on this server: only the full-text fallback is checked");
    }
    in_use
}

#[tokio::test]
async fn with_pgvector_a_paraphrase_is_recalled_by_its_vector_and_only_the_users_own() {
    let (store, url) = migrated().await;
    let ch = channel(&store, counting());
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    for (user, texts) in [
        (
            &ada,
            [
                "my car sits by the river",
                "we had soup for dinner",
                "the weather is grey",
            ],
        ),
        (&bob, ["bob's car is blue", "bob ate soup", "bob likes rain"]),
    ] {
        let mut turn = ch.begin_turn(user).await.unwrap();
        for (i, text) in texts.iter().enumerate() {
            let r = record(2 * i as i64, text);
            turn.append(&r, r.ts).await.unwrap();
        }
    }
    let question = "is my automobile safe?";
    let asked = concept(question);
    if pgvector_in_use(&store).await {
        assert_eq!(
            mnemo_pg::vectors::fill(&ch, &ada, &Concepts("concepts-1"))
                .await
                .unwrap(),
            3
        );
        assert_eq!(
            mnemo_pg::vectors::fill(&ch, &ada, &Concepts("concepts-1"))
                .await
                .unwrap(),
            0,
            "all there"
        );
        let mut turn = ch.begin_turn(&ada).await.unwrap();
        let by_text = turn.recall(question, &[], 500, None).await.unwrap();
        assert!(
            by_text.items.is_empty(),
            "full text alone finds nothing: {:?}",
            by_text.items
        );
        let found = turn
            .recall(question, &[], 500, Some(("concepts-1", &asked)))
            .await
            .unwrap();
        let texts: Vec<&str> = found.items.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, vec!["my car sits by the river"], "bob's car is bob's");
        let other_model = turn
            .recall(question, &[], 500, Some(("concepts-2", &asked)))
            .await
            .unwrap();
        assert!(other_model.items.is_empty(), "another model's vectors are not compared");
        drop(turn);
        // A new model: the vectors are computed again and replaced.
        assert_eq!(
            mnemo_pg::vectors::fill(&ch, &ada, &Concepts("concepts-2"))
                .await
                .unwrap(),
            3
        );
        let stored: i64 = tokio_postgres_client(&url)
            .await
            .query_one("SELECT count(*) FROM mnemo_vectors WHERE user_key = 'ada'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(stored, 3);
        // `clear` takes the vectors of the cleared messages along.
        let mut turn = ch.begin_turn(&ada).await.unwrap();
        ch.command(&mut turn, &mnemo_sessions::commands::SessionCommand::Clear, at(10))
            .await
            .unwrap();
        let after = turn
            .recall(question, &[], 500, Some(("concepts-2", &asked)))
            .await
            .unwrap();
        assert!(after.items.is_empty(), "{:?}", after.items);
    }

    // Without pgvector: recall carries on by full text, vectors are neither
    // stored nor asked for, nothing fails.
    tokio_postgres_client(&url)
        .await
        .batch_execute("DROP EXTENSION IF EXISTS vector CASCADE")
        .await
        .unwrap();
    assert_ne!(store.vectors().await.unwrap(), mnemo_pg::Vectors::InUse);
    let ch = channel(&store, counting());
    assert_eq!(
        mnemo_pg::vectors::fill(&ch, &bob, &Concepts("concepts-1"))
            .await
            .unwrap(),
        0
    );
    let mut turn = ch.begin_turn(&bob).await.unwrap();
    let found = turn
        .recall(
            "what colour is the car?",
            &[],
            500,
            Some(("concepts-1", &concept("car"))),
        )
        .await
        .unwrap();
    let texts: Vec<&str> = found.items.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, vec!["bob's car is blue"], "full text alone");
}
