//! Specifications of which Slack traffic reaches the broker, and how.

use super::*;
use serde_json::{Value, json};

fn me() -> Identity {
    Identity {
        user_id: "UBOT".into(),
        name: Some("mnemo".into()),
    }
}

fn callback(event_id: &str, event: Value) -> SlackPushEventCallback {
    serde_json::from_value(json!({
        "team_id": "T1", "api_app_id": "A1", "event_id": event_id, "event_time": 1_700_000_000,
        "type": "event_callback", "event": event,
    }))
    .expect("a valid event callback")
}

fn dm(ts: &str, text: &str) -> Value {
    json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U1", "text": text, "ts": ts})
}

fn delivered(d: Decision) -> Inbound {
    match d {
        Decision::Deliver(m) => *m,
        Decision::Ignore(why) => panic!("expected delivery, ignored: {why}"),
    }
}

#[test]
fn a_direct_message_is_delivered_addressed_with_its_ids() {
    let m = delivered(on_event(
        &callback("Ev1", dm("1700000000.000100", "hello &amp; bye")),
        &me(),
        &mut Memory::default(),
    ));
    assert_eq!(m.channel, "slack");
    assert_eq!(m.user_id, "U1");
    assert_eq!(m.chat_id, "D1");
    assert_eq!(m.chat_kind, ChatKind::Direct);
    assert_eq!(m.thread_id, None, "a top-level DM is answered top-level");
    assert_eq!(m.msg_id, "D1:1700000000.000100");
    assert_eq!(m.text, "hello & bye");
    assert_eq!(m.ts.timestamp_micros(), 1_700_000_000_000_100);
    assert!(m.addressed);
    assert_eq!(m.interaction, None);
}

#[test]
fn a_dm_written_in_a_thread_is_answered_in_that_thread() {
    let mut event = dm("1700000001.000200", "more");
    event["thread_ts"] = json!("1700000000.000100");
    let m = delivered(on_event(&callback("Ev1", event), &me(), &mut Memory::default()));
    assert_eq!(m.thread_id.as_deref(), Some("1700000000.000100"));
}

#[test]
fn a_redelivered_event_is_the_same_message_again() {
    // Whether it reaches the broker again depends on whether the first copy
    // was taken: the receipts' call (`receipts.rs`), by this msg_id.
    let mut memory = Memory::default();
    let first = delivered(on_event(&callback("Ev1", dm("1.1", "hi")), &me(), &mut memory));
    let again = delivered(on_event(&callback("Ev1", dm("1.1", "hi")), &me(), &mut memory));
    assert_eq!(first, again);
}

#[test]
fn both_copies_slack_sends_of_a_channel_mention_are_one_message() {
    let mut memory = Memory::default();
    let mention =
        json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> what is up?", "ts": "5.5"});
    let m = delivered(on_event(&callback("Ev1", mention), &me(), &mut memory));
    assert_eq!(m.text, "what is up?");
    assert!(m.addressed);
    assert_eq!(m.chat_kind, ChatKind::Group);
    assert_eq!(
        m.thread_id.as_deref(),
        Some("5.5"),
        "channel answers go in the message's thread"
    );
    let copy = json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "<@UBOT> what is up?", "ts": "5.5"});
    assert_eq!(delivered(on_event(&callback("Ev2", copy), &me(), &mut memory)), m);
}

#[test]
fn channel_chatter_is_delivered_unaddressed_in_its_own_thread_for_the_access_gate_to_judge() {
    let mut memory = Memory::default();
    let chatter = json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U2", "text": "lunch <@U3|bo>?", "ts": "6.0"});
    let m = delivered(on_event(&callback("Ev1", chatter), &me(), &mut memory));
    assert!(!m.addressed);
    assert_eq!(m.chat_kind, ChatKind::Group);
    assert_eq!(m.text, "lunch @bo?");
    assert_eq!(m.thread_id.as_deref(), Some("6.0"), "an answer would go in its thread");
    let private = json!({"type": "message", "channel": "G1", "channel_type": "group", "user": "U2", "text": "hi all", "ts": "6.1"});
    assert!(!delivered(on_event(&callback("Ev2", private), &me(), &mut memory)).addressed);

    let reply = json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "tacos", "ts": "6.2", "thread_ts": "6.0"});
    assert!(
        !delivered(on_event(&callback("Ev3", reply), &me(), &mut memory)).addressed,
        "delivering chatter does not put the bot in its thread"
    );
}

#[test]
fn the_message_copy_of_a_mention_arriving_first_is_delivered_addressed_as_the_same_message() {
    let mut memory = Memory::default();
    let copy = json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "<@UBOT> hi", "ts": "5.5"});
    let m = delivered(on_event(&callback("Ev1", copy), &me(), &mut memory));
    assert!(m.addressed);
    assert_eq!(m.text, "hi");
    let mention = json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> hi", "ts": "5.5"});
    assert_eq!(delivered(on_event(&callback("Ev2", mention), &me(), &mut memory)), m);
}

#[test]
fn replies_in_the_bots_thread_are_delivered_addressed() {
    let mut memory = Memory::default();
    let mention = json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> start", "ts": "7.0"});
    delivered(on_event(&callback("Ev2", mention), &me(), &mut memory));
    let reply = json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U2", "text": "and then?", "ts": "8.0", "thread_ts": "7.0"});
    let m = delivered(on_event(&callback("Ev3", reply), &me(), &mut memory));
    assert_eq!(m.thread_id.as_deref(), Some("7.0"));
    assert_eq!(m.user_id, "U2");
    assert!(m.addressed);
}

#[test]
fn bots_edits_deletes_and_the_bots_own_messages_are_ignored() {
    let mut memory = Memory::default();
    let cases = [
        json!({"type": "message", "channel": "D1", "channel_type": "im", "bot_id": "B9", "text": "beep", "ts": "1.0"}),
        json!({"type": "message", "subtype": "bot_message", "channel": "D1", "channel_type": "im", "text": "beep", "ts": "1.1"}),
        json!({"type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im", "ts": "1.2",
               "message": {"user": "U1", "text": "edited", "ts": "1.0"}}),
        json!({"type": "message", "subtype": "message_deleted", "channel": "D1", "channel_type": "im", "ts": "1.3", "deleted_ts": "1.0"}),
        json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "UBOT", "text": "my own answer", "ts": "1.4"}),
        json!({"type": "message", "subtype": "channel_join", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "joined", "ts": "1.5"}),
        json!({"type": "message", "channel": "C1", "channel_type": "channel", "bot_id": "B9", "text": "beep", "ts": "1.6"}),
        json!({"type": "message", "subtype": "bot_message", "channel": "C1", "channel_type": "channel", "text": "beep", "ts": "1.7"}),
        json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "UBOT", "text": "my own answer", "ts": "1.8"}),
        json!({"type": "message", "subtype": "message_changed", "channel": "C1", "channel_type": "channel", "ts": "1.9",
               "message": {"user": "U1", "text": "edited", "ts": "1.0"}}),
    ];
    for (i, event) in cases.into_iter().enumerate() {
        let decision = on_event(&callback(&format!("Ev{i}"), event), &me(), &mut memory);
        assert!(matches!(decision, Decision::Ignore(_)), "case {i} was delivered");
    }
}

#[test]
fn other_event_types_and_empty_mentions_are_ignored() {
    let mut memory = Memory::default();
    let reaction = json!({"type": "reaction_added", "user": "U1", "reaction": "+1", "item_user": "UBOT",
                          "item": {"type": "message", "channel": "C1", "ts": "1.0"}, "event_ts": "2.0"});
    assert!(matches!(
        on_event(&callback("Ev1", reaction), &me(), &mut memory),
        Decision::Ignore(_)
    ));
    let bare = json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT>", "ts": "3.0"});
    assert_eq!(
        on_event(&callback("Ev2", bare), &me(), &mut memory),
        Decision::Ignore("no text")
    );
}

#[test]
fn a_slash_command_becomes_the_plain_text_form_with_its_response_url() {
    let ev: SlackCommandEvent = serde_json::from_value(json!({
        "team_id": "T1", "channel_id": "C1", "user_id": "U1", "command": "/session", "text": " status ",
        "response_url": "https://hooks.slack.com/commands/T1/1/abc", "trigger_id": "tr1",
    }))
    .expect("a valid command");
    let mut memory = Memory::default();
    let m = delivered(on_command(&ev, &mut memory));
    assert_eq!(m.text, "/session status");
    assert_eq!(
        m.interaction.as_deref(),
        Some("https://hooks.slack.com/commands/T1/1/abc")
    );
    assert_eq!(m.chat_kind, ChatKind::Group);
    assert_eq!(m.msg_id, "cmd:tr1");
    assert!(
        matches!(on_command(&ev, &mut memory), Decision::Ignore(_)),
        "a redelivered command runs once"
    );
}

#[test]
fn slack_markup_in_incoming_text_is_made_readable() {
    assert_eq!(
        clean_text("<@UBOT> hi <@U2|ann>, see <#C1|general>", "UBOT"),
        "hi @ann, see #general"
    );
    assert_eq!(
        clean_text("<https://x.io|x.io> and <https://y.io|docs> <!here>", "UBOT"),
        "x.io (https://x.io) and docs (https://y.io) @here"
    );
    assert_eq!(clean_text("a &lt;b&gt; &amp; c", "UBOT"), "a <b> & c");
    assert_eq!(clean_text("keep\n    indented code", "UBOT"), "keep\n    indented code");
}

#[test]
fn a_shared_file_arrives_as_an_attachment_with_its_caption_or_none() {
    let mut event = dm("1700000000.000300", "");
    event["subtype"] = json!("file_share");
    event["files"] = json!([{
        "id": "F1", "name": "cat.png", "mimetype": "image/png", "filetype": "png",
        "url_private": "https://files.slack.com/files-pri/T1-F1/cat.png",
        "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/cat.png",
    }]);
    let m = delivered(on_event(&callback("Ev9", event.clone()), &me(), &mut Memory::default()));
    assert_eq!(m.text, "");
    assert_eq!(
        m.attachments,
        vec![crate::Attachment {
            kind: crate::AttachmentKind::Photo,
            name: Some("cat.png".into()),
            mime: Some("image/png".into()),
            size: None,
            duration_secs: None,
            source: "https://files.slack.com/files-pri/T1-F1/download/cat.png".into(),
        }]
    );
    event["text"] = json!("what breed?");
    event["files"][0]["mimetype"] = json!("audio/webm");
    let m = delivered(on_event(&callback("Ev10", event), &me(), &mut Memory::default()));
    assert_eq!(m.text, "what breed?");
    assert_eq!(m.attachments[0].kind, crate::AttachmentKind::Audio);
}

#[test]
fn a_mention_with_a_file_carries_it_whichever_copy_comes_first() {
    let mut mention =
        json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> look", "ts": "9.5"});
    mention["files"] = json!([{
        "id": "F2", "name": "plan.pdf", "mimetype": "application/pdf",
        "url_private_download": "https://files.slack.com/files-pri/T1-F2/download/plan.pdf",
    }]);
    let m = delivered(on_event(&callback("Ev11", mention), &me(), &mut Memory::default()));
    assert_eq!(m.text, "look");
    assert_eq!(m.attachments.len(), 1);
    assert_eq!(m.attachments[0].kind, crate::AttachmentKind::Document);
}
