//! The Discord adapter against a fake Discord on 127.0.0.1: recorded gateway
//! events through the real handler, replies through the real REST code
//! (serenity pointed at the fake with `HttpBuilder::proxy`), and a whole
//! gateway session (Hello → Identify → READY → MESSAGE_CREATE).
#![cfg(feature = "discord")]

#[path = "discord/fake.rs"]
mod fake;

use fake::{APP_ID, BOT_ID, FakeDiscord};
use mnemo_channels::discord::{DiscordChannel, DiscordError, DiscordSettings, MAX_MESSAGE_CHARS};
use mnemo_channels::{Channel, ChatKind, Inbound, Outbound};
use serde_json::{Value, json};
use serenity::all::{Interaction, Message, Ready};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

const TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.fake.bot-token-for-tests";
const DM_CHANNEL: &str = "1200000000000000001";
const GUILD_CHANNEL: &str = "1200000000000000002";
const THREAD: &str = "1200000000000000003";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/discord/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture json")
}

fn message(name: &str) -> Message {
    serde_json::from_value(fixture(name)).expect("a gateway MESSAGE_CREATE payload")
}

fn channel(fake: &FakeDiscord, guild_id: Option<u64>) -> DiscordChannel {
    DiscordChannel::new(DiscordSettings {
        token: TOKEN.into(),
        api_url: Some(fake.url()),
        guild_id,
    })
    .expect("valid settings")
}

/// A handler that has seen READY, and the inbox it feeds.
async fn ready_handler(
    fake: &FakeDiscord,
) -> (
    DiscordChannel,
    mnemo_channels::discord::DiscordHandler,
    mpsc::Receiver<Inbound>,
) {
    let channel = channel(fake, None);
    let (tx, rx) = mpsc::channel(16);
    let handler = channel.handler(tx);
    let ready: Ready = serde_json::from_value(fake::ready("ws://unused")).expect("READY payload");
    handler.on_ready(&ready).await;
    (channel, handler, rx)
}

async fn next(rx: &mut mpsc::Receiver<Inbound>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("an inbound in time")
        .expect("inbox open")
}

// ---- inbound: recorded gateway events through the real handler ----

#[tokio::test]
async fn a_direct_message_becomes_an_addressed_direct_inbound() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("dm.json")).await;
    let got = next(&mut rx).await;
    assert_eq!(got.channel, "discord");
    assert_eq!(got.user_id, "1100000000000000001");
    assert_eq!(got.user_name.as_deref(), Some("Alice"));
    assert_eq!(got.chat_id, DM_CHANNEL);
    assert_eq!(got.chat_kind, ChatKind::Direct);
    assert_eq!(got.thread_id, None);
    assert_eq!(got.msg_id, "1300000000000000011");
    assert_eq!(got.text, "what did I say yesterday?");
    assert_eq!(got.ts.to_rfc3339(), "2026-03-23T03:28:32.123+00:00");
    assert!(got.addressed);
    assert_eq!(got.interaction, None);
}

#[tokio::test]
async fn a_guild_mention_is_taken_with_our_mention_stripped_and_others_named() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("guild_mention.json")).await;
    let got = next(&mut rx).await;
    assert_eq!(got.chat_kind, ChatKind::Group);
    assert_eq!(got.chat_id, GUILD_CHANNEL);
    assert_eq!(got.text, "can you summarise @Bob's point?");
    assert_eq!(got.user_name.as_deref(), Some("Ali"), "the server nickname");
    assert!(got.addressed);
}

#[tokio::test]
async fn guild_messages_without_a_mention_and_messages_from_bots_are_ignored() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("guild_without_mention.json")).await;
    handler.on_message(message("bot_author.json")).await;
    // Our own reply echoed back by the gateway is a bot message too.
    let mut own: Value = fixture("dm.json");
    own["id"] = json!("1300000000000000017");
    own["author"] = json!({ "id": BOT_ID, "username": "mnemo", "discriminator": "0", "bot": true, "avatar": null });
    handler.on_message(serde_json::from_value(own).expect("message")).await;
    let mut sentinel = fixture("dm.json");
    sentinel["id"] = json!("1300000000000000099");
    handler
        .on_message(serde_json::from_value(sentinel).expect("message"))
        .await;
    assert_eq!(
        next(&mut rx).await.msg_id,
        "1300000000000000099",
        "only the sentinel DM gets through"
    );
}

#[tokio::test]
async fn a_reply_to_the_bot_addresses_it_without_a_mention() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("guild_reply_to_bot.json")).await;
    let got = next(&mut rx).await;
    assert_eq!(got.text, "tell me more");
    assert_eq!(got.chat_kind, ChatKind::Group);
}

#[tokio::test]
async fn a_thread_message_keeps_the_thread_channel_so_the_reply_lands_there() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("thread_mention.json")).await;
    let got = next(&mut rx).await;
    assert_eq!(got.chat_id, THREAD);
    assert_eq!(got.thread_id.as_deref(), Some(THREAD));
    assert_eq!(got.text, "and in this thread?");
    channel.send(Outbound::reply(&got, "yes, here")).await.expect("sent");
    let sent = fake.channel_messages(THREAD, 1).await;
    assert_eq!(sent[0].content(), "yes, here");
}

#[tokio::test]
async fn messages_reach_the_inbox_in_discord_order_even_when_handled_out_of_order() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    let numbered = |id: &str, text: &str| {
        let mut m = fixture("dm.json");
        m["id"] = json!(id);
        m["content"] = json!(text);
        serde_json::from_value::<Message>(m).expect("message")
    };
    // serenity runs each event in its own task; the later one may win the race.
    handler.on_message(numbered("1300000000000000031", "second")).await;
    handler.on_message(numbered("1300000000000000030", "first")).await;
    assert_eq!(next(&mut rx).await.text, "first");
    assert_eq!(next(&mut rx).await.text, "second");
}

#[tokio::test]
async fn session_subcommands_are_acknowledged_privately_and_become_plain_text() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    let forget: Interaction = serde_json::from_value(fixture("interaction_forget.json")).expect("interaction");
    handler.on_interaction(forget).await;
    let got = next(&mut rx).await;
    assert_eq!(got.text, "/session forget rust-notes");
    assert_eq!(got.chat_kind, ChatKind::Group);
    assert_eq!(got.user_id, "1100000000000000001", "the member's user");
    assert!(got.addressed);
    let token = "aW50ZXJhY3Rpb24tdG9rZW4tZm9yLXRlc3Rz";
    assert_eq!(
        got.interaction.as_deref(),
        Some(format!("{APP_ID}:1400000000000000021:{token}").as_str())
    );
    let acks = fake.wait_for(1, |r| r.path.ends_with("/callback")).await;
    assert_eq!(
        acks[0].path,
        format!("/api/v10/interactions/1400000000000000021/{token}/callback")
    );
    assert_eq!(acks[0].json["type"], 5, "deferred: the answer follows");
    assert_eq!(acks[0].json["data"]["flags"], 64, "ephemeral");

    let clear_all: Interaction = serde_json::from_value(fixture("interaction_clear_all.json")).expect("interaction");
    handler.on_interaction(clear_all).await;
    let got = next(&mut rx).await;
    assert_eq!(got.text, "/session clear all");
    assert_eq!(got.chat_kind, ChatKind::Direct);
}

#[tokio::test]
async fn ready_registers_the_session_command_globally_once_without_a_guild() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, _rx) = ready_handler(&fake).await;
    // The gateway re-identified: READY again, registration not repeated.
    let again: Ready = serde_json::from_value(fake::ready("ws://unused")).expect("READY payload");
    handler.on_ready(&again).await;
    let put: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/commands"))
        .collect();
    assert_eq!(put.len(), 1, "{put:#?}");
    assert_eq!(put[0].path, format!("/api/v10/applications/{APP_ID}/commands"));
    assert_eq!(put[0].json[0]["name"], "session");
    assert_eq!(put[0].json[0]["options"].as_array().map(Vec::len), Some(7));
    assert_eq!(put[0].authorization.as_deref(), Some(format!("Bot {TOKEN}").as_str()));
    assert_eq!(channel.bot_name().as_deref(), Some("mnemo"));
}

// ---- outbound: replies through the real REST code ----

async fn dm_inbound(fake: &FakeDiscord) -> (DiscordChannel, Inbound) {
    let (channel, handler, mut rx) = ready_handler(fake).await;
    handler.on_message(message("dm.json")).await;
    (channel, next(&mut rx).await)
}

/// A reply of about 5,000 characters with a Rust block across a boundary.
fn long_reply() -> String {
    let prose: String = (0..18)
        .map(|i| format!("Paragraph {i} says something useful about memory. "))
        .collect();
    let code: String = (0..60)
        .map(|i| format!("    let value_{i} = compute({i});\n"))
        .collect();
    format!("{prose}\n\n```rust\nfn main() {{\n{code}}}\n```\n\n{prose}\n\n{prose}")
}

#[tokio::test]
async fn a_5000_character_reply_with_code_arrives_as_valid_messages_under_2000() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let text = long_reply();
    assert!((4500..6000).contains(&text.chars().count()), "{}", text.chars().count());
    channel.send(Outbound::reply(&to, text.clone())).await.expect("sent");
    let sent = fake.channel_messages(DM_CHANNEL, 3).await;
    for (i, m) in sent.iter().enumerate() {
        let content = m.content();
        assert!(
            content.chars().count() <= MAX_MESSAGE_CHARS,
            "message {i} is {} chars",
            content.chars().count()
        );
        assert!(
            content.matches("```").count().is_multiple_of(2),
            "message {i} leaves a code block open:\n{content}"
        );
        assert_eq!(
            m.json["allowed_mentions"]["parse"],
            json!([]),
            "no mass pings from model text"
        );
    }
    assert_eq!(
        sent[0].json["message_reference"]["message_id"], "1300000000000000011",
        "the first quotes the question"
    );
    assert!(
        sent[1..]
            .iter()
            .all(|m| m.json.get("message_reference").is_none_or(Value::is_null))
    );
    assert!(
        sent.iter().any(|m| m.content().starts_with("```rust\n")),
        "the block is reopened with its language"
    );
    let strip = |s: &str| {
        s.replace("```rust", "")
            .replace("```", "")
            .split_whitespace()
            .collect::<String>()
    };
    let joined: String = sent.iter().map(|m| m.content()).collect();
    assert_eq!(strip(&joined), strip(&text), "nothing lost or added");
}

#[tokio::test]
async fn an_export_is_uploaded_as_an_attachment() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("alice-export.tar.gz");
    std::fs::write(&path, b"\x1f\x8b fake archive bytes").expect("write");
    channel
        .send(Outbound::file(&to, path, "Your data export"))
        .await
        .expect("sent");
    let sent = fake.channel_messages(DM_CHANNEL, 1).await;
    assert_eq!(sent[0].content(), "Your data export");
    assert_eq!(
        sent[0].files,
        vec![(
            "alice-export.tar.gz".to_string(),
            b"\x1f\x8b fake archive bytes".to_vec()
        )]
    );
}

#[tokio::test]
async fn an_export_too_large_to_upload_becomes_a_note_for_the_operator() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.tar.gz");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(11 * 1024 * 1024))
        .expect("sparse file");
    channel
        .send(Outbound::file(&to, path.clone(), "Your data export"))
        .await
        .expect("sent");
    let sent = fake.channel_messages(DM_CHANNEL, 1).await;
    assert!(sent[0].files.is_empty());
    assert!(sent[0].content().contains("too large") && sent[0].content().contains(&path.display().to_string()));
}

#[tokio::test]
async fn an_interaction_answer_replaces_thinking_then_follows_up_privately() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    let forget: Interaction = serde_json::from_value(fixture("interaction_forget.json")).expect("interaction");
    handler.on_interaction(forget).await;
    let to = next(&mut rx).await;
    channel.send(Outbound::reply(&to, long_reply())).await.expect("sent");
    let token = "aW50ZXJhY3Rpb24tdG9rZW4tZm9yLXRlc3Rz";
    let edits = fake.wait_for(1, |r| r.method == "PATCH").await;
    assert_eq!(
        edits[0].path,
        format!("/api/v10/webhooks/{APP_ID}/{token}/messages/@original")
    );
    let follow_ups = fake
        .wait_for(2, |r| r.method == "POST" && r.path.starts_with("/api/v10/webhooks/"))
        .await;
    for m in edits.iter().chain(&follow_ups) {
        assert!(m.content().chars().count() <= MAX_MESSAGE_CHARS);
    }
    assert!(
        follow_ups.iter().all(|m| m.json["flags"] == 64),
        "follow-ups stay ephemeral"
    );
    assert!(
        fake.requests().iter().all(|r| !r.path.contains("/channels/")),
        "nothing posted publicly"
    );
}

#[tokio::test]
async fn an_export_asked_by_slash_command_is_attached_to_the_private_answer() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    let export: Interaction = serde_json::from_value(fixture("interaction_clear_all.json")).expect("interaction");
    handler.on_interaction(export).await;
    let to = next(&mut rx).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("export.tar.gz");
    std::fs::write(&path, b"archive").expect("write");
    channel
        .send(Outbound::file(&to, path, "Your data export"))
        .await
        .expect("sent");
    let edit = fake.wait_for(1, |r| r.method == "PATCH").await;
    assert_eq!(edit[0].content(), "Your data export");
    assert_eq!(edit[0].files, vec![("export.tar.gz".to_string(), b"archive".to_vec())]);
}

#[tokio::test]
async fn a_rate_limited_send_is_retried_and_arrives() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let limited = json!({ "message": "You are being rate limited.", "retry_after": 0.2, "global": false, "code": 0 });
    fake.fail(&format!("/channels/{DM_CHANNEL}/messages"), 429, limited, 1);
    channel
        .send(Outbound::reply(&to, "after the wait"))
        .await
        .expect("delivered after the 429");
    let posts = fake.channel_messages(DM_CHANNEL, 2).await;
    assert_eq!(posts.len(), 2, "one refused, one delivered");
    assert!(posts.iter().all(|p| p.content() == "after the wait"));
}

#[tokio::test]
async fn a_refused_send_says_why_and_never_shows_the_token() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    fake.fail(
        "/messages",
        403,
        json!({ "code": 50013, "message": "Missing Permissions" }),
        1,
    );
    let err = channel
        .send(Outbound::reply(&to, "hello"))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("403") && err.contains("Missing Permissions") && err.contains(DM_CHANNEL),
        "{err}"
    );
    assert!(!err.contains(TOKEN) && !err.contains("bot-token"), "{err}");
}

#[tokio::test]
async fn a_failed_interaction_answer_never_shows_the_interaction_token() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    handler
        .on_interaction(serde_json::from_value(fixture("interaction_forget.json")).expect("interaction"))
        .await;
    let to = next(&mut rx).await;
    fake.fail(
        "/webhooks/",
        404,
        json!({ "code": 10015, "message": "Unknown Webhook" }),
        1,
    );
    let err = channel
        .send(Outbound::reply(&to, "gone"))
        .await
        .expect_err("expired")
        .to_string();
    assert!(err.contains("404") && err.contains("Unknown Webhook"), "{err}");
    assert!(!err.contains("aW50ZXJhY3Rpb24tdG9rZW4tZm9yLXRlc3Rz"), "{err}");
}

#[tokio::test]
async fn typing_shows_in_the_chat_but_not_for_interactions() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    handler
        .on_interaction(serde_json::from_value(fixture("interaction_forget.json")).expect("interaction"))
        .await;
    let command = next(&mut rx).await;
    channel.typing(&command).await;
    handler.on_message(message("thread_mention.json")).await;
    let in_thread = next(&mut rx).await;
    channel.typing(&in_thread).await;
    let typing = fake.wait_for(1, |r| r.path.ends_with("/typing")).await;
    assert_eq!(typing.len(), 1);
    assert_eq!(typing[0].path, format!("/api/v10/channels/{THREAD}/typing"));
}

#[test]
fn unusable_settings_are_refused_with_a_way_out() {
    let settings = |token: &str, api_url: Option<&str>, guild_id| DiscordSettings {
        token: token.into(),
        api_url: api_url.map(String::from),
        guild_id,
    };
    assert!(matches!(
        DiscordChannel::new(settings(" ", None, None)),
        Err(DiscordError::MissingToken)
    ));
    let bad = DiscordChannel::new(settings(TOKEN, Some("discord.example/api"), None))
        .err()
        .map(|e| e.to_string());
    assert!(bad.is_some_and(|e| e.contains("http://")));
    assert!(matches!(
        DiscordChannel::new(settings(TOKEN, None, Some(0))),
        Err(DiscordError::BadGuildId)
    ));
    assert!(
        !format!("{:?}", settings(TOKEN, None, None)).contains(TOKEN),
        "Debug hides the token"
    );
}

// ---- a whole gateway session ----

#[tokio::test]
async fn receive_identifies_registers_in_the_guild_delivers_resumes_after_a_drop_and_stops_on_shutdown() {
    let fake = FakeDiscord::start().await;
    let channel = std::sync::Arc::new(channel(&fake, Some(1500000000000000001)));
    let (tx, mut rx) = mpsc::channel(16);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn({
        let channel = channel.clone();
        async move { channel.receive(tx, shutdown).await }
    });

    let identify = fake.identify().await;
    assert_eq!(identify["token"], format!("Bot {TOKEN}"));
    let intents = identify["intents"].as_u64().expect("intents");
    for (bit, name) in [
        (1 << 12, "DIRECT_MESSAGES"),
        (1 << 9, "GUILD_MESSAGES"),
        (1 << 15, "MESSAGE_CONTENT"),
    ] {
        assert_ne!(intents & bit, 0, "{name} requested");
    }
    let put = fake.wait_for(1, |r| r.path.ends_with("/commands")).await;
    assert_eq!(
        put[0].path,
        format!("/api/v10/applications/{APP_ID}/guilds/1500000000000000001/commands")
    );

    fake.dispatch("MESSAGE_CREATE", fixture("guild_without_mention.json"));
    fake.dispatch("MESSAGE_CREATE", fixture("dm.json"));
    fake.dispatch("MESSAGE_CREATE", fixture("guild_mention.json"));
    assert_eq!(next(&mut rx).await.text, "what did I say yesterday?");
    assert_eq!(next(&mut rx).await.text, "can you summarise @Bob's point?");

    // A network failure: serenity reconnects and resumes the session, and
    // traffic flows again.
    fake.drop_connection();
    let resume = fake.resumed().await;
    assert_eq!(resume["session_id"], "fake-session");
    assert_eq!(resume["token"], format!("Bot {TOKEN}"));
    let mut after = fixture("dm.json");
    after["id"] = json!("1300000000000000050");
    after["content"] = json!("still there?");
    fake.dispatch("MESSAGE_CREATE", after);
    assert_eq!(next(&mut rx).await.text, "still there?");

    stop.send(true).expect("receiver alive");
    let ended = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("receive returns on shutdown");
    ended.expect("task").expect("clean shutdown");
}
