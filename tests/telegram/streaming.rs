//! Streaming replies over Telegram, end to end: the real binary, the fake
//! Bot API (which refuses edits of unknown or unchanged messages, as
//! Telegram does) and the fake model streaming SSE slowly. The answer
//! appears before the model has finished, grows by `editMessageText` at
//! most once a second, is split across messages with valid HTML in every
//! call, and ends exactly as a one-shot send of the stored reply would
//! show; a stream cut mid-reply and a 429 on an edit are handled.

use super::{ADA, Mnemo, stm_records, text_message, user};
use mnemo_channels::format::{TelegramHtml, to_chunks};
use mnemo_sessions::Role;
use mnemo_testkit::html_check;
use mnemo_testkit::telegram::{Call, FakeBotApi, too_many_requests};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::FakeModel;

use super::support;

/// A markdown answer of about 6 000 characters: bold, code, a fence, so
/// that every prefix the stream shows has something left open.
fn long_answer() -> String {
    let paragraph = "**Tea** notes: `sencha` is *grassy*, and <gyokuro> & matcha are shaded.";
    let mut text = vec![paragraph; 40].join("\n\n");
    text.push_str("\n\n```rust\nlet cup = brew(\"sencha\");\n```\n\nEnjoy.");
    text
}

/// The stored answer to ADA's last message, once there is one.
fn stored_reply(state: &Path) -> Option<String> {
    stm_records(state, ADA)
        .into_iter()
        .rev()
        .find(|r| r.role == Role::Assistant)
        .map(|r| r.text)
}

/// Every text the bot sent or edited to, in order.
fn shown_texts(api: &FakeBotApi) -> Vec<Call> {
    let mut calls = api.calls("sendMessage");
    calls.extend(api.calls("editMessageText"));
    calls.sort_by_key(|c| c.at);
    calls
}

/// Waits until the chat shows `stored` exactly as a one-shot send would.
async fn chat_shows(api: &FakeBotApi, stored: &str) -> Vec<String> {
    let want: Vec<String> = to_chunks(&TelegramHtml, stored).into_iter().map(|c| c.text).collect();
    api.wait_until("the chat to show the stored reply", || {
        let shown: Vec<String> = api.sent_messages().into_iter().map(|(_, _, t)| t).collect();
        (shown == want).then_some(shown)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_grows_in_place_across_messages_within_telegrams_pace_and_ends_as_stored() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(&long_answer()));
    model.stream_slowly(500, Duration::from_millis(150));
    model.hold_streams_after(2);
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "tell me about tea"));
    let first = api.wait_for_calls("sendMessage", 1).await;
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        0,
        "shown before the model finished"
    );
    let visible = html_check::visible_text(first[0].params["text"].as_str().unwrap()).unwrap();
    assert!(visible.starts_with("Tea notes"), "{visible}");
    model.release_streams();

    let stored = support::eventually("the stored reply", async || stored_reply(&mnemo.state())).await;
    assert_eq!(stored, long_answer(), "the final text, stored once");
    let shown = chat_shows(&api, &stored).await;
    assert!(shown.len() >= 2, "split across {} messages", shown.len());

    let calls = shown_texts(&api);
    assert!(!api.calls("editMessageText").is_empty(), "grown by edits");
    for call in &calls {
        let html = call.params["text"].as_str().unwrap();
        assert!(html.chars().count() <= 4096);
        html_check::visible_text(html).unwrap_or_else(|e| panic!("invalid HTML mid-stream ({e}): {html}"));
        assert_eq!(call.params["parse_mode"], "HTML");
        assert_eq!(call.status, 200, "Telegram never refused a call");
    }
    for pair in calls.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_secs(1),
            "two calls {gap:?} apart in a private chat"
        );
    }
    let stored_count = stm_records(&mnemo.state(), ADA).len();
    assert_eq!(stored_count, 2, "the question and the answer, each once");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_mid_stream_is_kept_marked_as_cut_and_the_user_is_told() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("First part of the answer. Second part that never comes."));
    model.stream_slowly(10, Duration::from_millis(50));
    model.break_stream_after(Some(3));
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "a question"));
    let stored = support::eventually("the stored reply", async || stored_reply(&mnemo.state())).await;
    assert!(stored.starts_with("First part of the"), "{stored}");
    assert!(stored.ends_with(mnemo::streaming::CUT_BY_MODEL), "{stored}");
    let told = "The model's reply was cut off or unreadable";
    api.wait_until("the user told", || {
        let shown: Vec<String> = api.sent_messages().into_iter().map(|(_, _, t)| t).collect();
        let cut = to_chunks(&TelegramHtml, &stored)[0].text.clone();
        (shown.first() == Some(&cut) && shown.iter().any(|t| t.starts_with(told))).then_some(())
    })
    .await;
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_an_edit_is_waited_out_and_the_final_text_still_lands() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("One two three four five six seven eight nine ten."));
    model.stream_slowly(8, Duration::from_millis(100));
    model.hold_streams_after(1);
    let api = FakeBotApi::start().await;
    api.fail_next("editMessageText", 429, &too_many_requests(1));
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "count"));
    api.wait_for_calls("sendMessage", 1).await;
    model.release_streams();
    let stored = support::eventually("the stored reply", async || stored_reply(&mnemo.state())).await;
    chat_shows(&api, &stored).await;

    let edits = api.calls("editMessageText");
    let limited = edits
        .iter()
        .position(|c| c.status == 429)
        .expect("the fake refused one edit");
    let retry = edits.get(limited + 1).expect("the edit was tried again");
    assert!(
        retry.at - edits[limited].at >= Duration::from_secs(1),
        "retry_after waited out"
    );
    assert_eq!(api.calls("sendMessage").len(), 1, "one message, edited: nothing resent");
    mnemo.stop(&api).await;
}

/// Message `id` of Ada's private chat.
fn ada_says(id: i64, text: &str) -> serde_json::Value {
    let mut message = text_message(ADA, user(ADA, "Ada"), text);
    message["message_id"] = json!(id);
    message
}

/// Waits until the chat shows exactly `answers`, each as a one-shot send
/// would, in order.
async fn chat_shows_all(api: &FakeBotApi, answers: &[&str]) {
    let want: Vec<String> = answers
        .iter()
        .flat_map(|a| to_chunks(&TelegramHtml, a))
        .map(|c| c.text)
        .collect();
    api.wait_until("the chat to show the answers", || {
        let shown: Vec<String> = api.sent_messages().into_iter().map(|(_, _, t)| t).collect();
        (shown == want).then_some(())
    })
    .await;
}

/// Issue 40: an instant model's answer, whole within the hold
/// (`streamHoldMs`, 400 ms by default), costs one `sendMessage` and no
/// edit — before, its first words were posted at once and the rest came
/// in an edit a second later; a slow answer still shows its first words
/// before the model has finished, and grows by edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_answer_is_one_message_with_no_edit_and_a_slow_one_still_streams() {
    let (model, model_url) = FakeModel::start().await;
    let fast = "Sencha is **grassy**; gyokuro is shaded.";
    model.answer_with(Some(fast));
    // Five pieces 20 ms apart: whole ~100 ms after its first words.
    model.stream_slowly(8, Duration::from_millis(20));
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(ada_says(1, "which tea?"));
    chat_shows_all(&api, &[fast]).await;
    assert_eq!(api.calls("sendMessage").len(), 1, "one message");
    assert!(api.calls("editMessageText").is_empty(), "and no edit");

    let slow = "Gyokuro is shaded for weeks before the harvest, which makes it sweet and deep green.";
    model.answer_with(Some(slow));
    model.stream_slowly(10, Duration::from_millis(300));
    model.hold_streams_after(3);
    let done = model.streams_done.load(Ordering::SeqCst);
    api.push_message(ada_says(2, "tell me more"));
    let sent = api.wait_for_calls("sendMessage", 2).await;
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        done,
        "shown before the model finished"
    );
    let first_words = sent[1].params["text"].as_str().unwrap();
    assert!(
        slow.starts_with(first_words) && first_words.len() < slow.len(),
        "{first_words}"
    );
    model.release_streams();
    chat_shows_all(&api, &[fast, slow]).await;
    assert!(!api.calls("editMessageText").is_empty(), "grown by edits");
    assert_eq!(api.calls("sendMessage").len(), 2);
    mnemo.stop(&api).await;
}
