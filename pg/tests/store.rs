//! The Postgres store against a real PostgreSQL (the test kit's throwaway
//! server): migrations, the turn's append and view, per-user order across
//! two brokers, folds as one transaction, recall, `store copy`'s write of a
//! user (after a turn in progress, read back the same, never merged), and
//! the bad days (the database going away mid-turn, a pool exhausted, a
//! clear during a fold).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

use mnemo_pg::fold::PgFold;
use mnemo_pg::migrate::{self, latest};
use mnemo_pg::{PgError, PgStore};
use mnemo_sessions::{Record, Role, SafeName};
use mnemo_testkit::pg;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Notify;

mod support;
use support::*;

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

#[tokio::test]
async fn a_turn_appends_views_and_ignores_a_redelivery() {
    let (store, _) = migrated().await;
    let ch = channel(&store, counting());
    let user = SafeName::of("4242");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    // As a message arrives (intake, no turn lock), then the turn's view.
    let first = ch.intake(&user, &record(0, "hello\0there"), at(0)).await.unwrap();
    let view = turn.view(11).await.unwrap();
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
    let cleared = turn.clear().await.unwrap();
    drop(turn);
    assert_eq!(cleared.messages, 21);
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
    let status = turn.status().await.unwrap();
    assert_eq!((status.stm_messages, status.archived_messages), (30, 3));
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
    let held = turn.clear_all().await.unwrap();
    drop(turn);
    assert!(held.count > 21, "{held:?}");
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
