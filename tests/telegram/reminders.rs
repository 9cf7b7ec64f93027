//! Reminders over Telegram, end to end: the real binary and the fake Bot
//! API. A reminder set by `/session remind +5s` arrives in the chat after
//! its time, once, and is in the user's log as the bot's message; it is
//! posted once across a restart in between; the model's `reminder_set`
//! tool call (from the fake model) makes one, with the current time on the
//! user's clock in the model's instructions.

use super::{ADA, Mnemo, stm_records, text_message, user};
use mnemo_sessions::Role;
use mnemo_testkit::telegram::FakeBotApi;
use serde_json::json;
use std::time::{Duration, Instant};
use support::FakeModel;

use super::support;

/// The texts the bot sent to `chat`, in order.
fn sent_to(api: &FakeBotApi, chat: i64) -> Vec<String> {
    api.calls("sendMessage")
        .iter()
        .filter(|c| {
            c.params["chat_id"].as_i64() == Some(chat) || c.params["chat_id"].as_str() == Some(&*chat.to_string())
        })
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits for the reminder `text` in ADA's chat; how long after `since`.
async fn reminder_arrives(api: &FakeBotApi, text: &str, since: Instant) -> Duration {
    let wanted = format!("⏰ Reminder: {text}");
    api.wait_until("the reminder", || sent_to(api, ADA).contains(&wanted).then_some(()))
        .await;
    let elapsed = since.elapsed();
    eprintln!(
        "reminder arrived {:.2} s after the command was sent",
        elapsed.as_secs_f64()
    );
    elapsed
}

/// How many times `text` was posted as a reminder, after waiting long
/// enough for a second post to show.
async fn posted_times(api: &FakeBotApi, text: &str) -> usize {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let wanted = format!("⏰ Reminder: {text}");
    sent_to(api, ADA).iter().filter(|t| **t == wanted).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_by_command_arrives_once_and_is_in_the_log() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session remind +5s drink water"));
    let confirmed = api.wait_for_calls("sendMessage", 1).await[0].params["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(confirmed.starts_with("I'll remind you on "), "{confirmed}");
    let took = reminder_arrives(&api, "drink water", sent).await;
    assert!(took >= Duration::from_secs(5), "not before its time: {took:?}");
    assert_eq!(posted_times(&api, "drink water").await, 1);
    let log = stm_records(&mnemo.state(), ADA);
    let posted = log
        .iter()
        .find(|r| r.text == "⏰ Reminder: drink water")
        .expect("in the log");
    assert_eq!(posted.role, Role::Assistant);
    assert_eq!(posted.chat_id.as_deref(), Some(ADA.to_string().as_str()));
    // A follow-up has the reminder in its context.
    api.push_message(text_message(ADA, user(ADA, "Ada"), "done, I drank it"));
    api.wait_for_calls("sendMessage", 3).await;
    let request = support::request_text(model.chat_requests().last().unwrap());
    assert!(request.contains("⏰ Reminder: drink water"), "{request}");
    assert!(sent_to(&api, ADA)[0].contains("/session reminders cancel"));
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_before_a_restart_arrives_once_after_it() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mut mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session remind +6s feed the cat"));
    api.wait_for_calls("sendMessage", 1).await;
    mnemo.restart();
    let took = reminder_arrives(&api, "feed the cat", sent).await;
    assert!(took >= Duration::from_secs(6), "{took:?}");
    assert_eq!(posted_times(&api, "feed the cat").await, 1);
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_reminder_set_call_makes_a_reminder_that_arrives() {
    let (model, model_url) = FakeModel::start().await;
    model.script_tools(vec![
        vec![("reminder_set", json!({"when": "+5s", "text": "call the bank"}))],
        vec![],
    ]);
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(
        ADA,
        user(ADA, "Ada"),
        "remind me in five seconds to call the bank",
    ));
    api.wait_for_calls("sendMessage", 1).await;
    let first = &model.chat_requests()[0];
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        ["reminder_set", "reminder_list", "reminder_cancel"]
            .iter()
            .all(|t| tools.contains(t)),
        "{tools:?}"
    );
    let system = support::request_text(first);
    assert!(system.contains("The current time is 20"), "{system}");
    assert!(system.contains("(UTC, the user's timezone)"), "{system}");
    // The tool's result went back to the model.
    let second = serde_json::to_string(&model.chat_requests()[1]).unwrap();
    assert!(second.contains("set: id "), "{second}");
    reminder_arrives(&api, "call the bank", sent).await;
    assert_eq!(posted_times(&api, "call the bank").await, 1);
    mnemo.stop(&api).await;
}
