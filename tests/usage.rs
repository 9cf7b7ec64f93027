//! Spending limits and usage through the real `App` (fakes only at the
//! platform and the model, whose every call reports 10 tokens in and 5
//! out), with the day's clock injected: a user over `limits.userTokensPerDay`
//! gets the notice and no model call, stored as the question's answer, and
//! is answered again after midnight in their own timezone; the channel's
//! budget stops everyone until the app's midnight; two brokers on one
//! Postgres share the count; `mnemo sessions usage --json` (the real
//! binary) reports each user's tokens by purpose, their fold's summary
//! and their answers' tool rounds among them.

use crate::support;

use chrono::{DateTime, Utc};
use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, OutboundBody};
use mnemo_pg::PgStore;
use mnemo_testkit::pg;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{FakeChannel, FakeModel, app_parts, dm, eventually};

/// Tokens the fake model reports per call (10 in, 5 out).
const PER_CALL: u64 = 15;

/// A clock a test moves.
#[derive(Clone)]
struct Clock(Arc<Mutex<DateTime<Utc>>>);

impl Clock {
    fn at(t: &str) -> Clock {
        Clock(Arc::new(Mutex::new(t.parse().unwrap())))
    }
    fn set(&self, t: &str) {
        *self.0.lock().unwrap() = t.parse().unwrap();
    }
    fn on(&self, app: &App) {
        let me = self.0.clone();
        app.set_clock(Arc::new(move || *me.lock().unwrap()));
    }
}

async fn broker(
    state: &std::path::Path,
    url: &str,
    store: Option<PgStore>,
    limits: LimitsConfig,
) -> (App, Arc<FakeChannel>) {
    match &store {
        Some(store) => crate::postgres::open_access_in(store).await,
        None => support::open_access(state, "fake", &[]),
    }
    let limits = LimitsConfig {
        user_messages_per_minute: 0,
        ..limits
    };
    let parts = mnemo::app::AppParts {
        store,
        ..app_parts(state, url, limits)
    };
    let (channel, _inbox) = FakeChannel::new("fake");
    let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).unwrap();
    (app, channel)
}

fn texts_to(channel: &FakeChannel, user: &str) -> Vec<String> {
    let chat = format!("dm-{user}");
    channel
        .sent()
        .iter()
        .filter(|o| o.chat_id == chat)
        .filter_map(|o| match &o.body {
            OutboundBody::Text(t) => Some(t.clone()),
            OutboundBody::File { .. } => None,
        })
        .collect()
}

/// Sends `text` as `user`, waits for the `n`th message to them; it.
async fn ask(app: &App, channel: &FakeChannel, user: &str, id: &str, text: &str, n: usize) -> String {
    app.submit(dm("fake", user, id, text)).await;
    let reply = eventually(format!("message {n} to {user}"), async || {
        texts_to(channel, user).get(n - 1).cloned()
    })
    .await;
    app.wait_turns(Duration::from_secs(10)).await;
    reply
}

/// Chat calls the fake model got (the summarizer asks for JSON; none here fold).
fn model_calls(model: &FakeModel) -> usize {
    model.requests().len()
}

fn per_user(limit: u64) -> LimitsConfig {
    LimitsConfig {
        user_tokens_per_day: limit,
        ..LimitsConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_budget_is_told_and_answered_again_after_their_own_midnight() {
    let (model, url) = FakeModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let (app, channel) = broker(state.path(), &url, None, per_user(2 * PER_CALL)).await;
    // 02:00 UTC on 6 Dec: already the 6th in UTC (the app's zone), still
    // 21:00 on the 5th in New York, ada's own zone.
    let clock = Clock::at("2026-12-06T02:00:00Z");
    clock.on(&app);
    assert!(
        ask(&app, &channel, "ada", "t", "/session timezone America/New_York", 1)
            .await
            .contains("New_York")
    );
    ask(&app, &channel, "ada", "1", "first", 2).await;
    ask(&app, &channel, "ada", "2", "second", 3).await;
    let calls = model_calls(&model);
    assert_eq!(calls, 2);

    let refused = ask(&app, &channel, "ada", "3", "third", 4).await;
    assert_eq!(
        refused,
        "You have used today's allowance of the model (30 tokens); it resets at midnight (America/New_York). Your message is saved."
    );
    assert_eq!(model_calls(&model), calls, "no model call over the budget");
    // Stored as every question is, and settled by the notice.
    let log = mnemo_sessions::Layout::new(state.path(), "fake").messages_path(&mnemo_sessions::SafeName::of("ada"));
    let records = support::stm_written(&log);
    let third = records
        .iter()
        .position(|r| r.msg_id == "3")
        .expect("the question is stored");
    assert!(
        records[third + 1..].iter().any(|r| r.text == refused),
        "the notice settles it"
    );

    // Someone else is not held back by ada's budget.
    ask(&app, &channel, "bob", "b1", "hello", 1).await;
    assert_eq!(model_calls(&model), calls + 1);

    // 04:59 UTC: 23:59 in New York, still ada's 5th.
    clock.set("2026-12-06T04:59:00Z");
    ask(&app, &channel, "ada", "4", "fourth", 5).await;
    assert_eq!(model_calls(&model), calls + 1);
    // Her midnight: answered again.
    clock.set("2026-12-06T05:00:00Z");
    let answer = ask(&app, &channel, "ada", "5", "fifth", 6).await;
    assert!(!answer.contains("allowance"), "{answer}");
    assert_eq!(model_calls(&model), calls + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_budget_stops_everyone_until_the_apps_midnight() {
    let (model, url) = FakeModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let limits = LimitsConfig {
        channel_tokens_per_day: 2 * PER_CALL,
        ..LimitsConfig::default()
    };
    let (app, channel) = broker(state.path(), &url, None, limits).await;
    let clock = Clock::at("2026-12-05T23:00:00Z");
    clock.on(&app);
    ask(&app, &channel, "ada", "1", "first", 1).await;
    ask(&app, &channel, "bob", "1", "first", 1).await;
    assert_eq!(model_calls(&model), 2);
    for user in ["ada", "bob", "cy"] {
        let n = if user == "cy" { 1 } else { 2 };
        let told = ask(&app, &channel, user, "2", "again", n).await;
        assert!(told.starts_with("This bot has used today's allowance"), "{told}");
    }
    assert_eq!(model_calls(&model), 2);
    clock.set("2026-12-06T00:00:00Z");
    let answer = ask(&app, &channel, "cy", "3", "morning", 2).await;
    assert!(!answer.contains("allowance"), "{answer}");
    assert_eq!(model_calls(&model), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_on_postgres_share_a_users_count() {
    let (model, url) = FakeModel::start().await;
    let db = pg::database();
    let connect = || PgStore::connect(&db.url(), 16, Duration::from_secs(10)).unwrap();
    let store = connect();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, ca) = broker(one.path(), &url, Some(store), per_user(2 * PER_CALL)).await;
    let (b, cb) = broker(two.path(), &url, Some(connect()), per_user(2 * PER_CALL)).await;
    let clock = Clock::at("2026-12-05T12:00:00Z");
    clock.on(&a);
    clock.on(&b);
    ask(&a, &ca, "dee", "1", "first", 1).await;
    ask(&b, &cb, "dee", "2", "second", 1).await;
    assert_eq!(model_calls(&model), 2);
    // Each broker saw one answer; together they are the budget.
    let told = ask(&a, &ca, "dee", "3", "third", 2).await;
    assert!(told.starts_with("You have used today's allowance"), "{told}");
    let told = ask(&b, &cb, "dee", "4", "fourth", 2).await;
    assert!(told.starts_with("You have used today's allowance"), "{told}");
    assert_eq!(model_calls(&model), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_usage_reports_each_users_tokens_by_purpose() {
    let (model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Folds past 4 messages, keeping 2: ada's third answer makes one due.
    let layout = mnemo_sessions::Layout::new(&state, "fake");
    std::fs::create_dir_all(layout.root()).unwrap();
    std::fs::write(
        layout.config_path(),
        r#"{ "compacting": { "threshold": 4 }, "stm": { "contextWindow": 2 } }"#,
    )
    .unwrap();
    let (app, channel) = broker(&state, &url, None, LimitsConfig::default()).await;
    Clock::at("2026-12-05T12:00:00Z").on(&app);
    ask(&app, &channel, "ada", "1", "first", 1).await;
    ask(&app, &channel, "ada", "2", "second", 2).await;
    ask(&app, &channel, "ada", "3", "third", 3).await;
    // Bob's answer takes one round of memory tools: its second call is
    // counted as `tools`, not `answer`.
    model.script_tools(vec![
        vec![("memory_search", serde_json::json!({"query": "tea"}))],
        vec![],
    ]);
    ask(&app, &channel, "bob", "1", "hello", 1).await;
    app.wait_background(Duration::from_secs(5)).await;
    let summary = layout.summary_path(&mnemo_sessions::SafeName::of("ada"));
    assert!(summary.exists(), "ada's messages were folded");
    drop(app);

    let config = support::write_config(dir.path(), &url, serde_json::json!({}));
    let out = support::mnemo(&config, dir.path())
        .args(["sessions", "usage", "--since", "2026-12-01", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&state.display().to_string()),
        "names the folder it read: {stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let fake = doc["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["channel"] == "fake")
        .unwrap_or_else(|| panic!("{doc}"));
    let purposes = |user: &str| {
        fake["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["user"] == user)
            .unwrap_or_else(|| panic!("{doc}"))["purposes"]
            .clone()
    };
    assert_eq!(
        purposes("ada"),
        serde_json::json!([
            { "purpose": "answer", "tokensIn": 30, "tokensOut": 15 },
            { "purpose": "summary", "tokensIn": 10, "tokensOut": 5 },
        ])
    );
    assert_eq!(
        purposes("bob"),
        serde_json::json!([
            { "purpose": "answer", "tokensIn": 10, "tokensOut": 5 },
            { "purpose": "tools", "tokensIn": 10, "tokensOut": 5 },
        ])
    );
    assert_eq!(
        fake["total"],
        serde_json::json!([
            { "purpose": "answer", "tokensIn": 40, "tokensOut": 20 },
            { "purpose": "tools", "tokensIn": 10, "tokensOut": 5 },
            { "purpose": "summary", "tokensIn": 10, "tokensOut": 5 },
        ])
    );
    // Nothing before --since.
    let out = support::mnemo(&config, dir.path())
        .args(["sessions", "usage", "--since", "2026-12-06", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["channels"][0]["users"], serde_json::json!([]), "{doc}");
}
