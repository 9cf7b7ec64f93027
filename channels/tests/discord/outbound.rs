//! Replies through the real REST code to the fake: splitting, attachments,
//! interaction answers, rate limits and refusals.

use super::fake::{APP_ID, FakeDiscord};
use super::*;

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
        shard: None,
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

#[tokio::test]
async fn a_server_admin_is_its_owner_or_a_member_whose_roles_manage_it() {
    use mnemo_channels::Channel as _;
    let fake = FakeDiscord::start().await;
    let admin = "1300000000000000001";
    let member = "1300000000000000002";
    fake.set_admin(admin);
    let discord = channel(&fake, None);
    let in_server = "1200000000000000042";
    assert!(discord.is_group_admin(in_server, admin).await.unwrap());
    assert!(
        discord
            .is_group_admin(in_server, super::fake::GUILD_OWNER)
            .await
            .unwrap()
    );
    assert!(
        !discord.is_group_admin(in_server, member).await.unwrap(),
        "@everyone may not manage"
    );
    // Asked with the bot's token, of the channel, the server and the member.
    let asked: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.path.clone())
        .collect();
    assert!(
        asked.contains(&format!("/api/v10/guilds/{}/members/{member}", super::fake::GUILD)),
        "{asked:?}"
    );
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.authorization.as_deref().is_some_and(|a| a.starts_with("Bot ")))
    );
    // Anything but an id never reaches a URL; Discord failing is an error.
    assert!(discord.is_group_admin("../guilds", admin).await.is_err());
    fake.fail("/guilds/", 500, serde_json::json!({ "message": "boom", "code": 0 }), 3);
    assert!(discord.is_group_admin(in_server, admin).await.is_err());
}
