//! Recorded gateway events (MESSAGE_CREATE, INTERACTION_CREATE, READY)
//! through the real handler into the inbox, or ignored.

use super::fake::{self, APP_ID, BOT_ID, FakeDiscord};
use super::*;

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
async fn a_guild_message_without_a_mention_arrives_unaddressed_for_the_access_gate() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("guild_without_mention.json")).await;
    let got = next(&mut rx).await;
    assert!(!got.addressed, "no mention, no reply to us");
    assert_eq!(got.chat_kind, ChatKind::Group);
    assert_eq!(got.chat_id, GUILD_CHANNEL);
    assert_eq!(got.thread_id, None);
    assert_eq!(got.msg_id, "1300000000000000013");
    assert_eq!(got.text, "just chatting with @Bob", "others named as in a mention");
}

#[tokio::test]
async fn messages_from_bots_and_our_own_are_ignored() {
    let fake = FakeDiscord::start().await;
    let (_channel, handler, mut rx) = ready_handler(&fake).await;
    handler.on_message(message("bot_author.json")).await;
    // Our own reply echoed back by the gateway is a bot message too.
    let mut own: Value = fixture("dm.json");
    own["id"] = json!("1300000000000000017");
    own["author"] = json!({ "id": BOT_ID, "username": "mnemo", "discriminator": "0", "bot": true, "avatar": null });
    handler.on_message(serde_json::from_value(own).expect("message")).await;
    // ... also in a server channel, where nothing addresses us.
    let mut own_in_guild: Value = fixture("guild_without_mention.json");
    own_in_guild["id"] = json!("1300000000000000018");
    own_in_guild["author"] =
        json!({ "id": BOT_ID, "username": "mnemo", "discriminator": "0", "bot": true, "avatar": null });
    handler
        .on_message(serde_json::from_value(own_in_guild).expect("message"))
        .await;
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
    assert!(got.addressed);
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
    assert!(got.addressed);
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

    // Two options, in their order: `remind` reads as the text form.
    let mut remind = fixture("interaction_clear_all.json");
    remind["id"] = serde_json::json!("1400000000000000099");
    remind["data"]["options"][0] = serde_json::json!({"name": "remind", "type": 1, "options": [
        {"name": "when", "type": 3, "value": "+10m"},
        {"name": "text", "type": 3, "value": "call the bank"}
    ]});
    let remind: Interaction = serde_json::from_value(remind).expect("interaction");
    handler.on_interaction(remind).await;
    assert_eq!(next(&mut rx).await.text, "/session remind +10m call the bank");
    let mut cancel = fixture("interaction_clear_all.json");
    cancel["id"] = serde_json::json!("1400000000000000098");
    cancel["data"]["options"][0] = serde_json::json!({"name": "reminders-cancel", "type": 1, "options": [
        {"name": "id", "type": 3, "value": "k3f9qa"}
    ]});
    let cancel: Interaction = serde_json::from_value(cancel).expect("interaction");
    handler.on_interaction(cancel).await;
    assert_eq!(next(&mut rx).await.text, "/session reminders cancel k3f9qa");
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
    let names: Vec<_> = put[0].json[0]["options"]
        .as_array()
        .expect("subcommands")
        .iter()
        .map(|o| o["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "status",
            "clear",
            "clear-all",
            "profile",
            "forget",
            "forget-confirm",
            "export",
            "search",
            "remember",
            "history",
            "undo",
            "remind",
            "reminders",
            "reminders-cancel",
            "timezone",
            "documents",
            "clear-group",
            "link",
            "unlink",
            "help"
        ]
    );
    assert_eq!(put[0].authorization.as_deref(), Some(format!("Bot {TOKEN}").as_str()));
    assert_eq!(channel.bot_name().as_deref(), Some("mnemo"));
}
