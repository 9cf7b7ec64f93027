//! The Postgres store's maintenance against a real PostgreSQL: the lease,
//! the fold sweep and expiry, daily and weekly summaries on the database's
//! schedule (written once, never of cleared messages, found by recall),
//! retention, and recall's second round and vectors (pgvector when the
//! server has it, full text alone when not).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod support;
use support::*;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use mnemo_pg::{PgChannel, PgStore};
use mnemo_sessions::SafeName;
use mnemo_sessions::summarizer::{SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_testkit::pg;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::Notify;

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
    turn.clear_all().await.unwrap();
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
    turn.clear().await.unwrap();
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
        turn.clear().await.unwrap();
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

/// Counts an embedder's requests and the texts they carried (issue 40).
#[derive(Default)]
struct Batches {
    calls: std::sync::atomic::AtomicUsize,
    texts: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl mnemo_sessions::recall::Embedder for Batches {
    async fn embed(
        &self,
        texts: &[String],
        _: mnemo_sessions::recall::EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, mnemo_sessions::recall::EmbedError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|t| concept(t)).collect())
    }

    fn model(&self) -> &str {
        "concepts-1"
    }
}

/// Issue 40: 1,200 messages (a 600-turn conversation) are embedded in
/// arrays of 128 — 10 requests — as `mnemo sessions reindex` fills them.
#[tokio::test]
async fn with_pgvector_a_long_history_is_embedded_in_batches() {
    let (store, _url) = migrated().await;
    if !pgvector_in_use(&store).await {
        return;
    }
    let ch = channel(&store, counting());
    let cleo = SafeName::of("cleo");
    let mut turn = ch.begin_turn(&cleo).await.unwrap();
    for i in 0..1200 {
        let r = record(i, &format!("message {i}: my car is parked by the river"));
        turn.append(&r, r.ts).await.unwrap();
    }
    drop(turn);
    let embedder = Batches::default();
    let mut stored = 0;
    loop {
        let n = mnemo_pg::vectors::fill(&ch, &cleo, &embedder).await.unwrap();
        if n == 0 {
            break;
        }
        stored += n;
    }
    assert_eq!(stored, 1200);
    assert_eq!(embedder.texts.load(Ordering::SeqCst), 1200, "each message once");
    let batch = mnemo_sessions::recall::EMBED_BATCH;
    let calls = embedder.calls.load(Ordering::SeqCst);
    assert_eq!(calls, 1200usize.div_ceil(batch));
    assert!(calls <= 1200usize.div_ceil(64), "arrays of 64 messages or more");
}
