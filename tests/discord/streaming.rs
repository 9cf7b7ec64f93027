//! Streaming replies over Discord, end to end: the real binary, the fake
//! Discord (which keeps the messages it was sent, edits only messages that
//! exist, refuses content Discord would, and rate limits like Discord's
//! buckets) and the fake model streaming SSE slowly. The answer appears
//! before the model has finished, grows by message edits at most once a
//! second, is split across messages under 2,000 characters with every code
//! fence closed in every call, and ends exactly as a one-shot send of the
//! stored reply would show; a stream cut mid-reply, a 429 on an edit and
//! `streaming: false` are handled.

use super::{ALICE, DM_CHANNEL, config, dm, mnemo_run, stm, stop};
use mnemo_channels::format::{DiscordMarkdown, to_chunks};
use mnemo_sessions::Role;
use mnemo_testkit::discord::FakeDiscord;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::FakeModel;

use super::support;

/// About 5,000 characters of markdown: bold, italics, inline code and a
/// fenced block of ~3,000 characters, so that the stream spends seconds
/// inside an open fence and every prefix has something left open.
fn long_answer() -> String {
    let prose = "**Tea** notes: `sencha` is *grassy*, and gyokuro ~~or~~ matcha are shaded.";
    let paragraphs = [prose; 12].join("\n\n");
    let code: String = (0..80)
        .map(|i| format!("let cup_{i:02} = brew(\"sencha\", {i});\n"))
        .collect();
    format!("{paragraphs}\n\n```rust\n{code}```\n\n{paragraphs}\n\nEnjoy.")
}

/// Alice's stored answer, once there is one.
fn stored_reply(dir: &Path) -> Option<String> {
    stm(dir, ALICE)
        .into_iter()
        .rev()
        .find(|r| r.role == Role::Assistant)
        .map(|r| r.text)
}

/// Waits until the DM shows `stored` exactly as a one-shot send would.
async fn dm_shows(discord: &FakeDiscord, stored: &str) -> Vec<String> {
    let want: Vec<String> = to_chunks(&DiscordMarkdown, stored)
        .into_iter()
        .map(|c| c.text)
        .collect();
    support::eventually("the DM to show the stored reply", async || {
        let shown = discord.messages_in(DM_CHANNEL);
        (shown == want).then_some(shown)
    })
    .await
}

/// `mnemo run` on Discord with `discord` merged into its channel section.
fn start(dir: &Path, model_url: &str, fake: &FakeDiscord, discord: Value) -> std::process::Child {
    let path = config(dir, model_url, fake);
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    if let (Some(section), Some(extra)) = (config["channels"]["discord"].as_object_mut(), discord.as_object()) {
        section.extend(extra.clone());
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    mnemo_run(&path, dir, Some(super::TOKEN))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_grows_in_place_across_messages_within_discords_pace_and_ends_as_stored() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(&long_answer()));
    model.stream_slowly(100, Duration::from_millis(100));
    model.hold_streams_after(2);
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path(), &model_url, &discord, json!({}));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000080", "tell me about tea"));
    let first = discord.channel_messages(DM_CHANNEL, 1).await;
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        0,
        "shown before the model finished"
    );
    assert!(
        first[0].content().starts_with("**Tea** notes"),
        "{}",
        first[0].content()
    );
    assert_eq!(
        first[0].json["message_reference"]["message_id"], "1300000000000000080",
        "the first message quotes the question"
    );
    model.release_streams();

    let stored = support::eventually("the stored reply", async || stored_reply(dir.path())).await;
    assert_eq!(stored, long_answer(), "the final text, stored once");
    let shown = dm_shows(&discord, &stored).await;
    assert!(shown.len() >= 2, "split across {} messages", shown.len());

    let calls = discord.message_calls(DM_CHANNEL);
    assert!(calls.iter().any(|c| c.method == "PATCH"), "grown by edits");
    for call in &calls {
        let content = call.content();
        assert_eq!(call.status, 200, "Discord refused a call: {}", call.path);
        assert!(content.chars().count() <= 2000, "{} chars", content.chars().count());
        assert!(
            content.matches("```").count().is_multiple_of(2),
            "a code fence left open mid-stream:\n{content}"
        );
    }
    let mid_fence = calls
        .iter()
        .filter(|c| !shown.iter().any(|s| s == c.content()))
        .any(|c| c.content().contains("```rust"));
    assert!(mid_fence, "an edit was made while the model was inside the code block");
    // Discord allows about 5 messages or edits per 5 s in a channel.
    for pair in calls.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_secs(1), "two calls {gap:?} apart");
    }
    assert_eq!(
        stm(dir.path(), ALICE).len(),
        2,
        "the question and the answer, each once"
    );
    stop(child, dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_mid_stream_is_kept_marked_as_cut_and_the_user_is_told() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("First part of the answer. Second part that never comes."));
    model.stream_slowly(10, Duration::from_millis(50));
    model.break_stream_after(Some(3));
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path(), &model_url, &discord, json!({}));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000081", "a question"));
    let stored = support::eventually("the stored reply", async || stored_reply(dir.path())).await;
    assert!(stored.starts_with("First part of the"), "{stored}");
    assert!(stored.ends_with(mnemo::streaming::CUT_BY_MODEL), "{stored}");
    let cut = to_chunks(&DiscordMarkdown, &stored)[0].text.clone();
    support::eventually("the cut answer shown and the user told", async || {
        let shown = discord.messages_in(DM_CHANNEL);
        shown.first() == Some(&cut)
            && shown
                .iter()
                .any(|t| t.starts_with("The model's reply was cut off or unreadable"))
    })
    .await;
    stop(child, dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_an_edit_is_waited_out_and_the_final_text_still_lands() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("One two three four five six seven eight nine ten."));
    model.stream_slowly(8, Duration::from_millis(100));
    model.hold_streams_after(1);
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path(), &model_url, &discord, json!({}));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000082", "count"));
    discord.channel_messages(DM_CHANNEL, 1).await;
    let window = Duration::from_millis(1500);
    discord.rate_limit(&format!("/channels/{DM_CHANNEL}/messages/"), window);
    model.release_streams();
    let stored = support::eventually("the stored reply", async || stored_reply(dir.path())).await;
    dm_shows(&discord, &stored).await;

    let calls = discord.message_calls(DM_CHANNEL);
    let limited: Vec<_> = calls.iter().filter(|c| c.status == 429).collect();
    assert!(!limited.is_empty(), "Discord refused an edit");
    assert!(
        limited
            .iter()
            .all(|c| c.method == "PATCH" && c.at - limited[0].at < window),
        "only edits inside the window were refused"
    );
    assert!(
        limited.len() <= 3,
        "backed off, not hammered: {} refused",
        limited.len()
    );
    let landed = calls.iter().find(|c| c.method == "PATCH" && c.status == 200);
    assert!(
        landed.is_some_and(|c| c.at > limited[0].at),
        "an edit landed after the wait"
    );
    let posts = calls.iter().filter(|c| c.method == "POST").count();
    assert_eq!(posts, 1, "one message, edited: nothing resent");
    stop(child, dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_streaming_off_the_answer_is_asked_whole_and_sent_once() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(&long_answer()));
    model.stream_slowly(100, Duration::from_millis(10));
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path(), &model_url, &discord, json!({ "streaming": false }));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000083", "tell me about tea"));
    let stored = support::eventually("the stored reply", async || stored_reply(dir.path())).await;
    let shown = dm_shows(&discord, &stored).await;
    let calls = discord.message_calls(DM_CHANNEL);
    assert!(calls.iter().all(|c| c.method == "POST"), "no edits");
    assert_eq!(calls.len(), shown.len(), "each message posted once, whole");
    let asked = model.chat_requests();
    assert!(asked.iter().all(|r| r["stream"] != true), "the model was asked whole");
    stop(child, dir.path());
}

/// Waits until the DM shows exactly `answers`, each as a one-shot send
/// would, in order.
async fn dm_shows_all(discord: &FakeDiscord, answers: &[&str]) {
    let want: Vec<String> = answers
        .iter()
        .flat_map(|a| to_chunks(&DiscordMarkdown, a))
        .map(|c| c.text)
        .collect();
    support::eventually("the DM to show the answers", async || {
        discord.messages_in(DM_CHANNEL) == want
    })
    .await;
}

/// Issue 40: an instant model's answer, whole within the hold
/// (`streamHoldMs`, 400 ms by default), is one `POST` and no edit —
/// before, its first words were posted at once and the rest came in a
/// `PATCH` a second later; a slow answer still shows its first words
/// before the model has finished, and grows by edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_answer_is_one_message_with_no_edit_and_a_slow_one_still_streams() {
    let (model, model_url) = FakeModel::start().await;
    let fast = "Sencha is **grassy**; gyokuro is shaded.";
    model.answer_with(Some(fast));
    // Five pieces 20 ms apart: whole ~100 ms after its first words.
    model.stream_slowly(8, Duration::from_millis(20));
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = start(dir.path(), &model_url, &discord, json!({}));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000090", "which tea?"));
    dm_shows_all(&discord, &[fast]).await;
    let calls = discord.message_calls(DM_CHANNEL);
    assert_eq!(
        calls.len(),
        1,
        "one call: {:?}",
        calls.iter().map(|c| &c.method).collect::<Vec<_>>()
    );
    assert_eq!(calls[0].method, "POST");

    let slow = "Gyokuro is shaded for weeks before the harvest, which makes it sweet and deep green.";
    model.answer_with(Some(slow));
    model.stream_slowly(10, Duration::from_millis(300));
    model.hold_streams_after(3);
    let done = model.streams_done.load(Ordering::SeqCst);
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000091", "tell me more"));
    let posted = discord.channel_messages(DM_CHANNEL, 2).await;
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        done,
        "shown before the model finished"
    );
    let first_words = posted[1].content();
    assert!(
        slow.starts_with(first_words) && first_words.len() < slow.len(),
        "{first_words}"
    );
    model.release_streams();
    dm_shows_all(&discord, &[fast, slow]).await;
    let calls = discord.message_calls(DM_CHANNEL);
    assert!(calls.iter().any(|c| c.method == "PATCH"), "grown by edits");
    assert_eq!(calls.iter().filter(|c| c.method == "POST").count(), 2);
    stop(child, dir.path());
}
