//! `ModelSummarizer` asks a model for a summary plus durable facts as JSON
//! and reads what comes back leniently: JSON, fenced JSON, or plain prose.

use super::fake::{FakeServer, Reply, env};
use chrono::{NaiveDate, TimeZone, Utc};
use mnemo::model::{ModelSummarizer, build};
use mnemo_sessions::record::{Record, Role};
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, Summarizer, SummaryKind, SummaryRequest};
use serde_json::json;
use std::time::Duration;

fn answering(content: &str) -> Reply {
    Reply::Json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}),
    )
}

fn record(role: Role, text: &str) -> Record {
    Record {
        ts: Utc.with_ymd_and_hms(2026, 3, 23, 3, 28, 32).unwrap(),
        role,
        text: text.into(),
        msg_id: "1".into(),
        channel: "console".into(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

async fn summarize(
    server: &FakeServer,
    kind: SummaryKind,
) -> Result<mnemo_sessions::summarizer::SummaryOutput, SummarizeError> {
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();
    let messages = [
        record(Role::User, "I moved to Lisbon."),
        record(Role::Assistant, "Welcome to Lisbon!"),
    ];
    ModelSummarizer::new(model)
        .summarize(SummaryRequest {
            kind,
            previous_summary: Some("Talked about moving."),
            messages: &messages,
            notes: &[],
            profile: Some("- language: English"),
        })
        .await
}

#[tokio::test]
async fn a_json_reply_becomes_the_summary_and_facts() {
    let reply = json!({
        "summary": "The user moved to Lisbon.",
        "facts": [{"section": "facts", "key": "city", "value": "Lisbon"}]
    });
    let server = FakeServer::start(vec![answering(&reply.to_string())]).await;

    let out = summarize(&server, SummaryKind::Rolling).await.unwrap();

    assert_eq!(out.summary, "The user moved to Lisbon.");
    assert_eq!(
        out.facts,
        vec![Fact {
            section: FactSection::Facts,
            key: "city".into(),
            value: "Lisbon".into()
        }]
    );
}

#[tokio::test]
async fn the_request_asks_for_a_json_object_and_carries_summary_profile_and_transcript() {
    let server = FakeServer::start(vec![answering(r#"{"summary": "s", "facts": []}"#)]).await;

    summarize(&server, SummaryKind::Rolling).await.unwrap();

    let body = &server.requests()[0].body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("JSON") && system.contains("\"facts\""), "{system}");
    let material = body["messages"][1]["content"].as_str().unwrap();
    for expected in [
        "Talked about moving.",
        "- language: English",
        "User: I moved to Lisbon.\nAssistant: Welcome to Lisbon!",
    ] {
        assert!(material.contains(expected), "missing {expected:?} in {material}");
    }
}

#[tokio::test]
async fn a_daily_prompt_names_its_day() {
    let server = FakeServer::start(vec![answering(r#"{"summary": "s", "facts": []}"#)]).await;

    summarize(
        &server,
        SummaryKind::Daily {
            day: NaiveDate::from_ymd_opt(2026, 3, 23).unwrap(),
        },
    )
    .await
    .unwrap();

    let system = server.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("2026-03-23"), "{system}");
}

#[tokio::test]
async fn a_prose_reply_is_the_whole_summary_with_no_facts() {
    let server = FakeServer::start(vec![answering("  The user moved to Lisbon and likes it.\n")]).await;

    let out = summarize(&server, SummaryKind::Rolling).await.unwrap();

    assert_eq!(out.summary, "The user moved to Lisbon and likes it.");
    assert!(out.facts.is_empty());
}

#[tokio::test]
async fn a_json_reply_in_a_code_fence_is_read() {
    let fenced = "```json\n{\"summary\": \"Moved to Lisbon.\", \"facts\": [{\"section\": \"preferences\", \"key\": \"language\", \"value\": \"Portuguese\"}]}\n```";
    let server = FakeServer::start(vec![answering(fenced)]).await;

    let out = summarize(&server, SummaryKind::Rolling).await.unwrap();

    assert_eq!(out.summary, "Moved to Lisbon.");
    assert_eq!(out.facts[0].section, FactSection::Preferences);
}

#[tokio::test]
async fn a_model_timeout_is_a_summarizer_timeout_and_other_failures_are_failed() {
    let slow = FakeServer::start(vec![Reply::Slow(Duration::from_secs(30))]).await;
    let model = build(&slow.openai(json!({"timeoutSecs": 1})), &env(&[])).unwrap();
    let request = SummaryRequest {
        kind: SummaryKind::Rolling,
        previous_summary: None,
        messages: &[],
        notes: &[],
        profile: None,
    };
    let err = ModelSummarizer::new(model)
        .summarize(request.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(err, SummarizeError::Timeout(after) if after == Duration::from_secs(1)),
        "{err:?}"
    );

    let broken = FakeServer::start(vec![Reply::Json(400, json!({"error": {"message": "nope"}}))]).await;
    let model = build(&broken.openai(json!({})), &env(&[])).unwrap();
    let err = ModelSummarizer::new(model).summarize(request).await.unwrap_err();
    assert!(
        matches!(err, SummarizeError::Failed(ref why) if why.contains("nope")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_reply_cut_off_mid_json_is_a_failure_and_never_becomes_the_summary() {
    let server = FakeServer::start(vec![answering(r#"{"summary": "The user moved to Lis"#)]).await;

    let out = summarize(&server, SummaryKind::Rolling).await;

    assert!(matches!(out, Err(SummarizeError::Failed(_))), "{out:?}");
}

#[tokio::test]
async fn a_runaway_summary_is_capped() {
    let reply = json!({ "summary": "Lisbon. ".repeat(100_000), "facts": [] });
    let server = FakeServer::start(vec![answering(&reply.to_string())]).await;

    let out = summarize(&server, SummaryKind::Rolling).await.unwrap();

    assert!(out.summary.chars().count() <= mnemo::model::MAX_SUMMARY_CHARS);
    assert!(out.summary.ends_with("characters]"), "cut visibly");
}
