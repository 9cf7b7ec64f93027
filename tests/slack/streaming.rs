//! Streaming replies over Slack, end to end: the real binary, the fake
//! Slack (whose `chat.update` refuses messages that do not exist, as
//! Slack's does) and the fake model streaming SSE slowly. The "thinking…"
//! placeholder becomes the answer's first words before the model has
//! finished, grows by `chat.update` at most once every 1.2 s, continues in
//! new posts in the thread when it outgrows a message, and ends exactly as
//! a one-shot send of the stored reply shows; a stream cut mid-reply and a
//! 429 on an update are handled, and the placeholder never stays behind
//! (an error before any text, or an empty answer, replaces it).

use super::{Bot, connected, socket_config};
use mnemo_channels::format::{SlackMrkdwn, to_chunks};
use mnemo_channels::slack::{SLACK_MAX_CHARS, THINKING};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use mnemo_testkit::slack::{FakeSlack, dm_event, events_envelope};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::FakeModel;

use super::support;

/// About 9 000 characters of markdown (more than one Slack message):
/// bold, code, a fence, so every prefix has something left open.
fn long_answer() -> String {
    let paragraph = "*Tea* notes: `sencha` is **grassy**, and <gyokuro> & matcha are shaded.";
    let mut text = vec![paragraph; 120].join("\n\n");
    text.push_str("\n\n```\nbrew(\"sencha\")\n```\n\nEnjoy.");
    text
}

/// U1's stored answer, once there is one.
fn stored_reply(dir: &Path) -> Option<String> {
    let path = Layout::new(dir.join("state"), "slack").messages_path(&SafeName::of("U1"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .rev()
        .find(|r| r.role == Role::Assistant)
        .map(|r| r.text)
}

/// Waits until the DM shows `stored` exactly as a one-shot send would.
async fn dm_shows(fake: &FakeSlack, stored: &str) -> Vec<String> {
    let want: Vec<String> = to_chunks(&SlackMrkdwn, stored).into_iter().map(|c| c.text).collect();
    let shown = support::eventually("the DM to show the stored reply", async || {
        let shown = fake.messages_in("DU1");
        (shown == want).then_some(shown)
    });
    shown.await
}

async fn ask(fake: &FakeSlack, text: &str) {
    fake.send(events_envelope(
        "env-1",
        "Ev1",
        dm_event("U1", "1700000001.000100", text),
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_grows_from_the_placeholder_across_messages_within_slacks_pace_and_ends_as_stored() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(&long_answer()));
    model.stream_slowly(700, Duration::from_millis(100));
    model.hold_streams_after(2);
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "tell me about tea").await;
    support::eventually("the first words", async || {
        fake.messages_in("DU1")
            .first()
            .is_some_and(|t| t.starts_with("_Tea_ notes"))
    })
    .await;
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        0,
        "shown before the model finished"
    );
    assert_eq!(
        fake.calls_to("chat.postMessage").len(),
        1,
        "the placeholder became the answer"
    );
    model.release_streams();

    let stored = support::eventually("the stored reply", async || stored_reply(bot.state())).await;
    assert_eq!(stored, long_answer());
    let shown = dm_shows(&fake, &stored).await;
    assert!(shown.len() >= 2, "split across {} messages", shown.len());
    assert!(!shown.contains(&THINKING.to_string()));

    let mut calls = fake.calls_to("chat.update");
    calls.extend(fake.calls_to("chat.postMessage").into_iter().skip(1));
    calls.sort_by_key(|c| c.at);
    assert!(calls.len() >= 3, "grown by updates: {} calls", calls.len());
    for pair in calls.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(1200), "two calls {gap:?} apart");
    }
    for call in &calls {
        assert!(call.body["text"].as_str().unwrap().chars().count() <= SLACK_MAX_CHARS);
    }
    let (clean, _) = bot.stop().await;
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_mid_stream_is_kept_marked_as_cut_and_the_user_is_told() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("First part of the answer. Second part that never comes."));
    model.stream_slowly(10, Duration::from_millis(50));
    model.break_stream_after(Some(3));
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "a question").await;
    let stored = support::eventually("the stored reply", async || stored_reply(bot.state())).await;
    assert!(stored.starts_with("First part of the"), "{stored}");
    assert!(stored.ends_with(mnemo::streaming::CUT_BY_MODEL), "{stored}");
    let cut = to_chunks(&SlackMrkdwn, &stored)[0].text.clone();
    support::eventually("the cut answer shown and the user told", async || {
        let shown = fake.messages_in("DU1");
        shown.first() == Some(&cut)
            && shown
                .iter()
                .any(|t| t.starts_with("The model's reply was cut off or unreadable"))
    })
    .await;
    let (clean, _) = bot.stop().await;
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_an_update_is_waited_out_and_the_final_text_still_lands() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("One two three four five six seven eight nine ten."));
    model.stream_slowly(8, Duration::from_millis(100));
    model.hold_streams_after(1);
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "count").await;
    support::eventually("the first words", async || {
        fake.messages_in("DU1")
            .first()
            .is_some_and(|t| t.starts_with("One two"))
    })
    .await;
    fake.rate_limit("chat.update", 1);
    model.release_streams();
    let stored = support::eventually("the stored reply", async || stored_reply(bot.state())).await;
    dm_shows(&fake, &stored).await;

    let limited = fake.rate_limited_at("chat.update");
    assert_eq!(limited.len(), 1, "Slack refused one update");
    let retried = fake.calls_to("chat.update").into_iter().find(|c| c.at > limited[0]);
    let retried = retried.expect("the update was tried again");
    assert!(
        retried.at - limited[0] >= Duration::from_secs(1),
        "Retry-After waited out"
    );
    assert_eq!(fake.calls_to("chat.postMessage").len(), 1, "nothing resent");
    let (clean, _) = bot.stop().await;
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failure_before_any_text_replaces_the_placeholder_with_the_error() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some("never shown"));
    model.stream_slowly(5, Duration::from_millis(50));
    model.break_stream_after(Some(0));
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "a question").await;
    let told = "The model's reply was cut off or unreadable";
    let shown = support::eventually("the user told", async || {
        let shown = fake.messages_in("DU1");
        shown.iter().any(|t| t.starts_with(told)).then_some(shown)
    })
    .await;
    assert_eq!(shown.len(), 1, "the placeholder became the error: {shown:?}");
    // What the user was told settles the question (a restart does not ask
    // the model again), stored right after it was shown; the model's text
    // was never stored.
    let stored = support::eventually("the notice to settle the question", async || stored_reply(bot.state())).await;
    assert!(stored.starts_with(told) && !stored.contains("never shown"), "{stored}");
    let (clean, _) = bot.stop().await;
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_ends_empty_leaves_no_thinking_placeholder_behind() {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(""));
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "a question").await;
    support::eventually("the stored (empty) answer", async || stored_reply(bot.state())).await;
    let shown = support::eventually("the placeholder replaced", async || {
        let shown = fake.messages_in("DU1");
        (!shown.is_empty() && !shown.contains(&THINKING.to_string())).then_some(shown)
    })
    .await;
    let notice = to_chunks(&SlackMrkdwn, mnemo_channels::slack::EMPTY_ANSWER)[0]
        .text
        .clone();
    assert_eq!(shown, [notice], "the placeholder became the notice");
    let (clean, _) = bot.stop().await;
    assert!(clean);
}

/// Waits until the DM shows exactly `answers`, each as a one-shot send
/// would, in order.
async fn dm_shows_all(fake: &FakeSlack, answers: &[&str]) {
    let want: Vec<String> = answers
        .iter()
        .flat_map(|a| to_chunks(&SlackMrkdwn, a))
        .map(|c| c.text)
        .collect();
    support::eventually("the DM to show the answers", async || fake.messages_in("DU1") == want).await;
}

/// Issue 40: an instant model's answer, whole within the hold
/// (`streamHoldMs`, 400 ms by default), replaces the "thinking…"
/// placeholder in one `chat.update` and is never edited again — before,
/// its first words replaced the placeholder and the rest came in a second
/// update 1.2 s later; a slow answer still shows its first words before the
/// model has finished, and grows by updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_answer_is_one_update_of_the_placeholder_and_a_slow_one_still_streams() {
    let (model, model_url) = FakeModel::start().await;
    let fast = "Sencha is *grassy*; gyokuro is shaded.";
    model.answer_with(Some(fast));
    // Five pieces 20 ms apart: whole ~100 ms after its first words.
    model.stream_slowly(8, Duration::from_millis(20));
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;

    ask(&fake, "which tea?").await;
    dm_shows_all(&fake, &[fast]).await;
    assert_eq!(fake.calls_to("chat.postMessage").len(), 1, "the placeholder only");
    assert_eq!(fake.calls_to("chat.update").len(), 1, "one update: the answer, whole");

    let slow = "Gyokuro is shaded for weeks before the harvest, which makes it sweet and deep green.";
    model.answer_with(Some(slow));
    model.stream_slowly(10, Duration::from_millis(300));
    model.hold_streams_after(3);
    let done = model.streams_done.load(Ordering::SeqCst);
    fake.send(events_envelope(
        "env-2",
        "Ev2",
        dm_event("U1", "1700000002.000100", "tell me more"),
    ));
    let first_words = support::eventually("the first words", async || {
        let shown = fake.messages_in("DU1");
        shown
            .get(1)
            .filter(|t| t.starts_with("Gyokuro") && t.len() < slow.len())
            .cloned()
    })
    .await;
    assert!(slow.starts_with(&first_words), "{first_words}");
    assert_eq!(
        model.streams_done.load(Ordering::SeqCst),
        done,
        "shown before the model finished"
    );
    model.release_streams();
    dm_shows_all(&fake, &[fast, slow]).await;
    assert!(fake.calls_to("chat.update").len() >= 3, "grown by updates");
    assert_eq!(
        fake.calls_to("chat.postMessage").len(),
        2,
        "a placeholder each, nothing more"
    );
    let (clean, _) = bot.stop().await;
    assert!(clean);
}
