//! Long-term memory on the Postgres store against a real PostgreSQL:
//! remember / update / forget / undo as one transaction each, the fact
//! log kept equal to the profile's bullets (after edits, folds and undo),
//! versions, a profile from before the log imported, hostile arguments
//! refused with nothing written, and `clear all` removing it all.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use mnemo_pg::fold::PgFold;
use mnemo_pg::memory::{EditBy, MemoryError};
use mnemo_pg::{PgChannel, PgStore, PgTurn, migrate};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::edits::{EditError, Forgotten};
use mnemo_sessions::facts::{self, FactBy, FactOp};
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_sessions::versions::Author;
use mnemo_sessions::{Record, Role, SafeName};
use mnemo_testkit::pg;
use std::sync::Arc;
use std::time::Duration;

fn at(minute: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap() + TimeDelta::minutes(minute)
}

/// Learns where the user's dentist is, from whatever it folds.
struct Dentist;

#[async_trait]
impl Summarizer for Dentist {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Ok(SummaryOutput {
            summary: format!("{} messages folded", request.messages.len()),
            facts: vec![Fact {
                section: FactSection::Facts,
                key: "dentist".into(),
                value: "Dr. Okafor on Elm Street".into(),
            }],
        })
    }
}

/// Learns an ongoing topic, from whatever it folds.
struct Trip;

#[async_trait]
impl Summarizer for Trip {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Ok(SummaryOutput {
            summary: "the user plans a trip".into(),
            facts: vec![Fact {
                section: FactSection::Topics,
                key: "Boat trip".into(),
                value: "sailing to Ischia in June".into(),
            }],
        })
    }
}

async fn channel() -> PgChannel {
    channel_at(&pg::database().url()).await
}

async fn channel_at(url: &str) -> PgChannel {
    channel_with(url, Arc::new(Dentist)).await
}

async fn channel_with(url: &str, summarizer: Arc<dyn Summarizer>) -> PgChannel {
    let store = PgStore::connect(url, 8, Duration::from_secs(5)).unwrap();
    migrate::migrate(&store).await.unwrap();
    let mut config = SessionConfig::default();
    config.compacting.threshold = 6;
    config.stm.context_window = 2;
    config.stm.max_age_minutes = 100_000;
    PgChannel::new(store, "telegram", config, summarizer)
}

/// Eight messages, the third about the dentist; enough for one fold.
async fn chat(turn: &mut PgTurn) {
    for i in 0..8 {
        let text = if i == 2 { "my dentist is on Elm Street" } else { "chat" };
        let record = Record {
            ts: at(10 + i),
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            text: text.into(),
            msg_id: format!("m{i}"),
            channel: "telegram".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        };
        turn.append(&record, at(10 + i)).await.unwrap();
    }
}

fn by(author: Author, minute: i64) -> EditBy {
    EditBy {
        by: author,
        max_chars: 4000,
        now: at(minute),
    }
}

/// The invariant: the profile's bullets are exactly the log's live facts.
async fn assert_in_step(turn: &mut PgTurn) {
    let shown: Vec<(FactSection, String, String)> = turn
        .facts()
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.section, f.key, f.value))
        .collect();
    let log = turn.fact_log().await.unwrap();
    let mut live: Vec<(FactSection, String, String)> = facts::live(&log)
        .into_iter()
        .map(|f| (f.section, f.key, f.value))
        .collect();
    let mut sorted = shown.clone();
    sorted.sort_by_key(|(s, k, v)| (format!("{s:?}"), k.clone(), v.clone()));
    live.sort_by_key(|(s, k, v)| (format!("{s:?}"), k.clone(), v.clone()));
    assert_eq!(sorted, live, "profile bullets and the fact log's live facts differ");
}

#[tokio::test]
async fn edits_keep_versions_and_the_fact_log_in_step_and_undo_steps_back() {
    let ch = channel().await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let key = turn
        .remember(by(Author::Command, 1), FactSection::Notes, "My daughter is called Mia")
        .await
        .unwrap();
    assert_eq!(key, "my-daughter-is-called-mia");
    assert_in_step(&mut turn).await;
    turn.update(by(Author::Tool, 2), &key, "My daughter is called Mia Rose")
        .await
        .unwrap();
    assert_in_step(&mut turn).await;
    let log = turn.fact_log().await.unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].by, FactBy::Tool);
    assert_eq!(log[1].supersedes.as_deref(), Some("My daughter is called Mia"));

    let forgotten = turn
        .forget(by(Author::Command, 3), "MY-DAUGHTER-is-called-mia")
        .await
        .unwrap();
    assert_eq!(
        forgotten,
        Forgotten::Fact {
            key: "MY-DAUGHTER-is-called-mia".into()
        },
        "named as asked, as on the files"
    );
    assert_in_step(&mut turn).await;
    assert!(
        turn.fact_log().await.unwrap().is_empty(),
        "a forgotten fact leaves the log"
    );

    let history = turn.history().await.unwrap();
    let what: Vec<&str> = history.iter().map(|v| v.what.as_str()).collect();
    assert_eq!(
        what,
        [
            "forgot `MY-DAUGHTER-is-called-mia`",
            "updated `my-daughter-is-called-mia`",
            "remembered `my-daughter-is-called-mia`"
        ]
    );
    assert_eq!(history[0].file_label(), "profile");

    let undone = turn.undo(Author::Command, at(4)).await.unwrap().unwrap();
    assert_eq!(undone.what, "forgot `MY-DAUGHTER-is-called-mia`");
    assert_eq!(turn.facts().await.unwrap()[0].value, "My daughter is called Mia Rose");
    assert_in_step(&mut turn).await;
    let log = turn.fact_log().await.unwrap();
    assert_eq!(
        (log.len(), log[0].by),
        (1, FactBy::Command),
        "an undone forget comes back as a new entry"
    );
    turn.undo(Author::Command, at(5)).await.unwrap().unwrap();
    turn.undo(Author::Command, at(5)).await.unwrap().unwrap();
    assert!(turn.facts().await.unwrap().is_empty(), "undone back to no profile");
    assert_in_step(&mut turn).await;
    assert!(turn.undo(Author::Command, at(6)).await.unwrap().is_none());
}

#[tokio::test]
async fn hostile_arguments_are_refused_and_write_nothing() {
    let ch = channel().await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    for key in ["a\u{0}b", &"k".repeat(65), "a\nb", "k: v", ""] {
        let err = turn.forget(by(Author::Tool, 1), key).await.unwrap_err();
        assert!(
            matches!(err, MemoryError::Edit(EditError::Invalid(_))),
            "{key:?}: {err}"
        );
    }
    for key in ["../etc/passwd", "../../telegram/u2"] {
        let err = turn.forget(by(Author::Tool, 1), key).await.unwrap_err();
        assert!(matches!(err, MemoryError::Edit(EditError::NotFound)), "{key:?}: {err}");
    }
    let err = turn
        .remember(by(Author::Tool, 1), FactSection::Notes, &"x".repeat(301))
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Edit(EditError::Invalid(_))), "{err}");
    assert!(turn.history().await.unwrap().is_empty());
    assert_eq!(turn.held().await.unwrap().count, 0, "no user row was made");

    // A NUL in a fact's text does not reach the database (which cannot
    // hold it), and the log says what the profile says.
    turn.remember(by(Author::Command, 3), FactSection::Notes, "nul \u{0} here")
        .await
        .unwrap();
    assert!(!turn.facts().await.unwrap()[0].value.contains('\u{0}'));
    assert_in_step(&mut turn).await;
}

#[tokio::test]
async fn a_fold_records_its_facts_dated_at_their_messages_and_can_be_undone() {
    let ch = channel().await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    turn.remember(by(Author::Command, 0), FactSection::Notes, "likes tea")
        .await
        .unwrap();
    chat(&mut turn).await;
    drop(turn);
    let outcome = ch.compact(&user, at(30)).await.unwrap();
    assert!(matches!(outcome, PgFold::Compacted { .. }), "{outcome:?}");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    assert_in_step(&mut turn).await;
    let log = turn.fact_log().await.unwrap();
    let dentist = log.iter().find(|e| e.key == "dentist").unwrap();
    assert_eq!(
        (dentist.by, dentist.op, dentist.ts, dentist.sources.clone()),
        (FactBy::Compaction, FactOp::Set, at(12), vec!["m2".to_string()]),
        "dated at the user's message it came from"
    );
    let history = turn.history().await.unwrap();
    assert_eq!(history[0].what, "facts from older messages");
    assert_eq!(history[0].by, Author::Compaction);
    turn.undo(Author::Command, at(31)).await.unwrap().unwrap();
    let keys: Vec<String> = turn.facts().await.unwrap().into_iter().map(|f| f.key).collect();
    assert_eq!(keys, ["likes-tea"]);
    assert_in_step(&mut turn).await;
}

#[tokio::test]
async fn a_profile_from_before_the_log_is_imported_by_the_first_edit() {
    let url = pg::database().url();
    let ch = channel_at(&url).await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "INSERT INTO mnemo_users (channel, user_key, profile, profile_at) VALUES ('telegram', 'u1', $1, $2)",
            &[&"## Facts\n- job: teacher\n", &at(1)],
        )
        .await
        .unwrap();
    turn.remember(by(Author::Command, 2), FactSection::Notes, "likes tea")
        .await
        .unwrap();
    let log = turn.fact_log().await.unwrap();
    assert_eq!(
        (log[0].key.as_str(), log[0].by, log[0].ts),
        ("job", FactBy::Import, at(1))
    );
    assert_eq!((log[1].key.as_str(), log[1].by), ("likes-tea", FactBy::Command));
    assert_in_step(&mut turn).await;
}

#[tokio::test]
async fn a_fold_keeps_ongoing_topics_in_notes_that_recall_finds_and_forget_removes() {
    let ch = channel_with(&pg::database().url(), Arc::new(Trip)).await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    chat(&mut turn).await;
    drop(turn);
    assert!(matches!(
        ch.compact(&user, at(30)).await.unwrap(),
        PgFold::Compacted { .. }
    ));
    let mut turn = ch.begin_turn(&user).await.unwrap();
    assert_eq!(turn.topic_slugs().await.unwrap(), ["boat-trip"]);
    let history = turn.history().await.unwrap();
    assert!(
        history
            .iter()
            .any(|v| v.file_label() == "topic boat-trip" && v.what == "ongoing topic from older messages"),
        "{history:?}"
    );
    let recalled = turn.recall("when do we go to Ischia?", &[], 500, None).await.unwrap();
    let lines: Vec<String> = recalled.items.iter().map(|i| i.line()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("[note: boat-trip]") && l.contains("sailing to Ischia in June")),
        "{lines:?}"
    );
    let found = turn.search("Ischia", 8).await.unwrap();
    assert!(found.iter().any(|i| i.label == "[note: boat-trip]"), "{found:?}");

    let forgotten = turn.forget(by(Author::Command, 32), "Boat-Trip").await.unwrap();
    assert_eq!(
        forgotten,
        Forgotten::Topic {
            slug: "boat-trip".into()
        }
    );
    assert!(turn.topic_slugs().await.unwrap().is_empty());
    let undone = turn.undo(Author::Command, at(33)).await.unwrap().unwrap();
    assert_eq!(undone.file_label(), "topic boat-trip");
    assert_eq!(turn.topic_slugs().await.unwrap(), ["boat-trip"]);
    turn.clear_all().await.unwrap();
    assert!(turn.topic_slugs().await.unwrap().is_empty());
}

#[tokio::test]
async fn recall_offers_what_the_fact_log_adds_to_the_profile() {
    let ch = channel().await;
    let user = SafeName::of("u1");
    let mut turn = ch.begin_turn(&user).await.unwrap();
    let key = turn
        .remember(by(Author::Command, 1), FactSection::Facts, "I live in Paris")
        .await
        .unwrap();
    turn.update(by(Author::Command, 60 * 24 * 3), &key, "I live in Berlin")
        .await
        .unwrap();
    let recalled = turn.recall("where did I live? Paris?", &[], 500, None).await.unwrap();
    let lines: Vec<String> = recalled.items.iter().map(|i| i.line()).collect();
    assert!(
        lines.contains(&"[2026-11-30, fact; until 2026-12-03] i-live-in-paris: I live in Paris".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("fact; was: I live in Paris]")),
        "the change says what it replaced: {lines:?}"
    );
    let other = SafeName::of("u2");
    drop(turn);
    let mut theirs = ch.begin_turn(&other).await.unwrap();
    assert!(
        theirs
            .recall("Paris Berlin", &[], 500, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
