//! Deciding what one Telegram update means for the broker: a message to
//! answer (as an [`Inbound`], with its voice note, audio, photo or
//! document as an [`Attachment`] and its caption as the text), a sticker,
//! video or the like that only gets the "text only" note, or nothing at
//! all. Pure: no network, no logging of text.
//!
//! Private chats: every message, addressed. Groups and supergroups: every
//! message from a person, with [`Inbound::addressed`] set when the bot is
//! mentioned (`@botname`, removed from the text), replied to, or given a
//! command (`/cmd` or `/cmd@botname`); the rest arrives unaddressed with its
//! text untouched, and the broker's access rules (`requireMention`) decide.
//! A command for another bot (`/cmd@otherbot`) is not ours and is skipped,
//! as is a group message without text that does not address the bot (the
//! "text only" note is for people talking to us). Forum topics keep their
//! `message_thread_id` so the reply lands in the same topic.

use crate::{Attachment, AttachmentKind, ChatKind, Inbound};
use teloxide::types::{MediaKind, Message, MessageCommon, MessageKind, Update, UpdateKind};

/// The bot itself, as `getMe` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Me {
    pub id: u64,
    /// Without `@`; every bot has one.
    pub username: String,
}

/// What an update asks of the adapter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Routed {
    /// A message for the broker.
    Message(Inbound),
    /// A sticker, video, location … without a caption: the sender is told
    /// that only text (and voice, audio, photos, documents) is understood (the [`Inbound`] says where; its text
    /// is empty).
    TextOnly(Inbound),
    /// Not for us; the reason is for the debug log.
    Ignored(&'static str),
}

/// Routes one update for the bot `me`.
pub(crate) fn route(update: &Update, me: &Me) -> Routed {
    let UpdateKind::Message(message) = &update.kind else {
        return Routed::Ignored("not a new message");
    };
    let Some(from) = &message.from else {
        return Routed::Ignored("no sender");
    };
    if from.is_bot {
        return Routed::Ignored("sent by a bot");
    }
    let MessageKind::Common(MessageCommon { media_kind, .. }) = &message.kind else {
        return Routed::Ignored("service message");
    };
    if matches!(media_kind, MediaKind::Migration(_)) {
        return Routed::Ignored("service message");
    }
    let chat_kind = if message.chat.is_private() {
        ChatKind::Direct
    } else if message.chat.is_group() || message.chat.is_supergroup() {
        ChatKind::Group
    } else {
        return Routed::Ignored("channel post");
    };
    let raw = message.text().or_else(|| message.caption()).unwrap_or("");
    let addressed = chat_kind == ChatKind::Direct
        || mentions(raw, &me.username)
        || commands_us(raw, &me.username)
        || replies_to(message, me.id);
    if !addressed && command_for(raw).is_some_and(|to| to.is_some()) {
        return Routed::Ignored("a command for another bot");
    }
    let text = if addressed {
        greeting_as_help(strip_mention(raw, &me.username))
    } else {
        raw.to_string()
    };
    let inbound = Inbound {
        channel: super::CHANNEL.to_string(),
        user_id: from.id.0.to_string(),
        user_name: Some(from.full_name()),
        chat_id: message.chat.id.0.to_string(),
        chat_kind,
        thread_id: message
            .is_topic_message
            .then_some(message.thread_id)
            .flatten()
            .map(|t| t.0.0.to_string()),
        msg_id: msg_id(message.chat.id.0, message.id.0),
        text,
        ts: message.date,
        addressed,
        interaction: None,
        attachments: attachment(media_kind).into_iter().collect(),
    };
    // Media without a caption, in a group, is for the bot only when it
    // addresses it (a reply to the bot).
    if !addressed && inbound.text.trim().is_empty() {
        return Routed::Ignored("group message without text, not addressed to the bot");
    }
    match (
        inbound.text.trim().is_empty() && inbound.attachments.is_empty(),
        addressed,
        matches!(media_kind, MediaKind::Text(_)),
    ) {
        (false, _, _) => Routed::Message(inbound),
        (true, false, _) => Routed::Ignored("group message without text, not addressed to the bot"),
        (true, true, false) => Routed::TextOnly(inbound),
        (true, true, true) => Routed::Ignored("nothing left but the mention"),
    }
}

/// The file a message carries that the broker takes: a voice note, an
/// audio file, a photo (its largest size) or a document. The source is the
/// `file_id` that `getFile` resolves.
fn attachment(media: &MediaKind) -> Option<Attachment> {
    let (kind, file, name, mime, duration) = match media {
        MediaKind::Voice(v) => (
            AttachmentKind::Voice,
            &v.voice.file,
            None,
            mime(&v.voice.mime_type),
            Some(v.voice.duration.seconds()),
        ),
        MediaKind::Audio(a) => (
            AttachmentKind::Audio,
            &a.audio.file,
            a.audio.file_name.clone(),
            mime(&a.audio.mime_type),
            Some(a.audio.duration.seconds()),
        ),
        MediaKind::Photo(p) => {
            let largest = p
                .photo
                .iter()
                .max_by_key(|s| u64::from(s.width) * u64::from(s.height))?;
            (AttachmentKind::Photo, &largest.file, None, None, None)
        }
        MediaKind::Document(d) => (
            AttachmentKind::Document,
            &d.document.file,
            d.document.file_name.clone(),
            mime(&d.document.mime_type),
            None,
        ),
        _ => return None,
    };
    Some(Attachment {
        kind,
        name,
        mime,
        // teloxide reads a missing `file_size` as u32::MAX (and 0 says nothing).
        size: (file.size > 0 && file.size < u32::MAX).then_some(u64::from(file.size)),
        duration_secs: duration,
        source: file.id.0.clone(),
    })
}

/// A declared MIME type without its parameters.
fn mime<T: std::fmt::Display>(m: &Option<T>) -> Option<String> {
    let text = m.as_ref()?.to_string();
    Some(text.split(';').next().unwrap_or("").trim().to_string())
}

/// Telegram's conventional `/start` (sent when someone opens the bot, maybe
/// with a payload) and `/help` (in every bot's menu) become the broker's
/// `/session help`, so they are answered by mnemo and never reach the model.
fn greeting_as_help(text: String) -> String {
    let word = text.split_whitespace().next().unwrap_or("");
    let command = word.strip_prefix('/').map(|c| c.split_once('@').map_or(c, |(c, _)| c));
    match command {
        Some(c) if c.eq_ignore_ascii_case("start") || c.eq_ignore_ascii_case("help") => "/session help".to_string(),
        _ => text,
    }
}

/// [`Inbound::msg_id`]: Telegram numbers messages per chat, the broker
/// needs ids unique per channel, so the chat is part of it.
pub(crate) fn msg_id(chat: i64, message: i32) -> String {
    format!("{chat}:{message}")
}

/// The Telegram message id inside an [`Inbound::msg_id`] (or a bare id).
pub(crate) fn message_number(msg_id: &str) -> Option<i32> {
    msg_id.rsplit(':').next()?.parse().ok()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Byte ranges of `@username` in `text` as a whole word (not inside an
/// e-mail address or a longer name), compared case-insensitively.
fn mention_ranges(text: &str, username: &str) -> Vec<(usize, usize)> {
    let needle = format!("@{}", username.to_ascii_lowercase());
    let lower = text.to_ascii_lowercase();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find(&needle) {
        let (start, end) = (from + found, from + found + needle.len());
        let before = text[..start].chars().next_back().is_some_and(is_name_char);
        let after = text[end..].chars().next().is_some_and(is_name_char);
        if !before && !after {
            ranges.push((start, end));
        }
        from = end;
    }
    ranges
}

fn mentions(text: &str, username: &str) -> bool {
    !username.is_empty() && !mention_ranges(text, username).is_empty()
}

/// `/cmd` (for every bot in the group) or `/cmd@us`.
fn commands_us(text: &str, username: &str) -> bool {
    command_for(text).is_some_and(|to| to.is_none_or(|to| to.eq_ignore_ascii_case(username)))
}

/// Whom a leading command is for: `None` when `text` is not a command,
/// `Some(None)` for `/cmd` (every bot in the group), `Some(Some(name))` for
/// `/cmd@name`. `cmd` is what Telegram itself takes for a command: 1–32 of
/// `A-Za-z0-9_`.
fn command_for(text: &str) -> Option<Option<&str>> {
    let command = text.split_whitespace().next()?.strip_prefix('/')?;
    let (word, to) = match command.split_once('@') {
        Some((word, to)) => (word, Some(to)),
        None => (command, None),
    };
    ((1..=32).contains(&word.len()) && word.chars().all(is_name_char)).then_some(to)
}

/// A reply to one of our messages. In a forum topic every message "replies"
/// to the topic's first message, which is not a reply to us.
fn replies_to(message: &Message, bot: u64) -> bool {
    let Some(original) = message.reply_to_message() else {
        return false;
    };
    let topic_root = message.is_topic_message && message.thread_id.is_some_and(|t| t.0 == original.id);
    !topic_root && original.from.as_ref().is_some_and(|u| u.id.0 == bot)
}

/// `text` without `@username` (and a `,`/`:` right after a leading
/// mention, as in "@bot, hello"), trimmed.
fn strip_mention(text: &str, username: &str) -> String {
    if username.is_empty() {
        return text.trim().to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end) in mention_ranges(text, username) {
        out.push_str(&text[last..start]);
        // One space around a mention goes with it, so no gap is left.
        last = if text[end..].starts_with(' ') && (out.is_empty() || out.ends_with(' ')) {
            end + 1
        } else {
            end
        };
    }
    out.push_str(&text[last..]);
    let trimmed = out.trim();
    let trimmed = match trimmed.strip_prefix([',', ':']) {
        Some(rest)
            if mention_ranges(text.trim_start(), username)
                .first()
                .is_some_and(|r| r.0 == 0) =>
        {
            rest
        }
        _ => trimmed,
    };
    trimmed.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn me() -> Me {
        Me {
            id: 999,
            username: "mnemo_bot".into(),
        }
    }

    /// Parsed from text, as the adapter does: teloxide's `Update` does not
    /// deserialize from a `serde_json::Value`.
    fn update(message: Value) -> Update {
        serde_json::from_str(&json!({ "update_id": 1, "message": message }).to_string()).unwrap()
    }

    fn private(text: &str) -> Value {
        json!({
            "message_id": 7, "date": 1_774_236_512,
            "chat": { "id": 42, "type": "private", "first_name": "Ada" },
            "from": { "id": 42, "is_bot": false, "first_name": "Ada", "last_name": "L" },
            "text": text,
        })
    }

    fn group(text: &str) -> Value {
        json!({
            "message_id": 8, "date": 1_774_236_512,
            "chat": { "id": -100_500, "type": "supergroup", "title": "Team" },
            "from": { "id": 42, "is_bot": false, "first_name": "Ada" },
            "text": text,
        })
    }

    fn message(routed: Routed) -> Inbound {
        match routed {
            Routed::Message(inbound) => inbound,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    #[test]
    fn a_private_message_becomes_an_inbound_with_every_field() {
        let inbound = message(route(&update(private("hello")), &me()));
        assert_eq!(inbound.channel, "telegram");
        assert_eq!(inbound.user_id, "42");
        assert_eq!(inbound.user_name.as_deref(), Some("Ada L"));
        assert_eq!(inbound.chat_id, "42");
        assert_eq!(inbound.chat_kind, ChatKind::Direct);
        assert_eq!(inbound.thread_id, None);
        assert_eq!(inbound.msg_id, "42:7");
        assert_eq!(inbound.text, "hello");
        assert_eq!(inbound.ts.timestamp(), 1_774_236_512);
        assert!(inbound.addressed);
        assert_eq!(inbound.interaction, None);
    }

    #[test]
    fn group_chatter_arrives_unaddressed_with_its_text_unchanged() {
        for text in [
            "hello all",
            "mail me at x@mnemo_bot.org",
            "@mnemo_bottle hi",
            " spaced out ",
        ] {
            let inbound = message(route(&update(group(text)), &me()));
            assert!(!inbound.addressed, "{text}");
            assert_eq!(inbound.text, text);
            assert_eq!(inbound.chat_kind, ChatKind::Group);
            assert_eq!(inbound.msg_id, "-100500:8");
        }
    }

    #[test]
    fn a_command_for_another_bot_is_ignored() {
        for text in ["/start@other_bot", "/session@other_bot status"] {
            assert!(
                matches!(route(&update(group(text)), &me()), Routed::Ignored(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn a_mention_addresses_the_bot_and_is_removed() {
        for (text, expected) in [
            ("@mnemo_bot what is 2+2?", "what is 2+2?"),
            ("@Mnemo_Bot, hi", "hi"),
            ("tell me @mnemo_bot about rust", "tell me about rust"),
            ("thanks @mnemo_bot", "thanks"),
        ] {
            let inbound = message(route(&update(group(text)), &me()));
            assert_eq!(inbound.text, expected);
            assert_eq!(inbound.chat_kind, ChatKind::Group);
            assert!(inbound.addressed);
        }
    }

    #[test]
    fn commands_for_us_or_for_everyone_are_addressed_and_kept_whole() {
        for text in ["/session status", "/session@mnemo_bot status", "/weather"] {
            assert_eq!(message(route(&update(group(text)), &me())).text, text);
        }
    }

    #[test]
    fn start_and_help_become_the_brokers_help() {
        for text in ["/start", "/start ref-42", "/help", "/help@mnemo_bot"] {
            assert_eq!(
                message(route(&update(group(text)), &me())).text,
                "/session help",
                "{text}"
            );
        }
    }

    #[test]
    fn a_reply_to_the_bot_is_addressed() {
        let mut reply = group("and then?");
        reply["reply_to_message"] = json!({
            "message_id": 5, "date": 1_774_236_000,
            "chat": { "id": -100_500, "type": "supergroup", "title": "Team" },
            "from": { "id": 999, "is_bot": true, "first_name": "Mnemo", "username": "mnemo_bot" },
            "text": "an answer",
        });
        assert_eq!(message(route(&update(reply), &me())).text, "and then?");
    }

    #[test]
    fn forum_topics_keep_their_thread_and_the_topic_root_is_not_a_reply() {
        let mut in_topic = group("hi all");
        in_topic["is_topic_message"] = json!(true);
        in_topic["message_thread_id"] = json!(3);
        in_topic["reply_to_message"] = json!({
            "message_id": 3, "date": 1_774_236_000,
            "chat": { "id": -100_500, "type": "supergroup", "title": "Team", "is_forum": true },
            "from": { "id": 999, "is_bot": true, "first_name": "Mnemo", "username": "mnemo_bot" },
            "forum_topic_created": { "name": "Topic", "icon_color": 7_322_096 },
        });
        let chatter = message(route(&update(in_topic.clone()), &me()));
        assert!(!chatter.addressed, "the topic root is not a reply to the bot");
        assert_eq!(chatter.thread_id.as_deref(), Some("3"));
        in_topic["text"] = json!("@mnemo_bot hi");
        let inbound = message(route(&update(in_topic), &me()));
        assert!(inbound.addressed);
        assert_eq!(inbound.thread_id.as_deref(), Some("3"));
    }

    #[test]
    fn media_we_do_not_take_gets_the_text_only_note() {
        let mut location = private("");
        location.as_object_mut().unwrap().remove("text");
        location["location"] = json!({ "latitude": 52.5, "longitude": 13.4 });
        let routed = route(&update(location), &me());
        assert!(matches!(routed, Routed::TextOnly(i) if i.msg_id == "42:7" && i.attachments.is_empty()));
    }

    fn media(field: &str, value: Value, caption: Option<&str>) -> Value {
        let mut m = private("");
        m.as_object_mut().unwrap().remove("text");
        m[field] = value;
        if let Some(caption) = caption {
            m["caption"] = json!(caption);
        }
        m
    }

    #[test]
    fn a_voice_note_becomes_an_attachment_with_its_duration_and_no_text() {
        let voice = json!({ "file_id": "VOICE-1", "file_unique_id": "u", "duration": 42,
                            "mime_type": "audio/ogg", "file_size": 9000 });
        let inbound = message(route(&update(media("voice", voice, None)), &me()));
        assert_eq!(inbound.text, "");
        assert_eq!(
            inbound.attachments,
            vec![Attachment {
                kind: AttachmentKind::Voice,
                name: None,
                mime: Some("audio/ogg".into()),
                size: Some(9000),
                duration_secs: Some(42),
                source: "VOICE-1".into(),
            }]
        );
        let unsized_voice =
            json!({ "file_id": "VOICE-2", "file_unique_id": "u", "duration": 1, "mime_type": "audio/ogg" });
        let inbound = message(route(&update(media("voice", unsized_voice, None)), &me()));
        assert_eq!(inbound.attachments[0].size, None, "no file_size is no declared size");
    }

    #[test]
    fn audio_a_document_and_the_largest_photo_size_are_taken_with_their_caption() {
        let audio = json!({ "file_id": "A", "file_unique_id": "u", "duration": 190,
                            "file_name": "talk.mp3", "mime_type": "audio/mpeg", "file_size": 12 });
        let inbound = message(route(&update(media("audio", audio, Some("my talk"))), &me()));
        assert_eq!(inbound.text, "my talk");
        let a = &inbound.attachments[0];
        assert_eq!(
            (a.kind, a.name.as_deref(), a.duration_secs),
            (AttachmentKind::Audio, Some("talk.mp3"), Some(190))
        );

        let document = json!({ "file_id": "D", "file_unique_id": "u", "file_name": "lease.pdf",
                               "mime_type": "application/pdf", "file_size": 3000 });
        let inbound = message(route(&update(media("document", document, None)), &me()));
        let d = &inbound.attachments[0];
        assert_eq!(
            (d.kind, d.name.as_deref(), d.mime.as_deref(), d.size),
            (
                AttachmentKind::Document,
                Some("lease.pdf"),
                Some("application/pdf"),
                Some(3000)
            )
        );

        let sizes = json!([
            { "file_id": "small", "file_unique_id": "u1", "width": 90, "height": 60 },
            { "file_id": "large", "file_unique_id": "u3", "width": 1280, "height": 853, "file_size": 120_000 },
            { "file_id": "medium", "file_unique_id": "u2", "width": 320, "height": 213 },
        ]);
        let inbound = message(route(&update(media("photo", sizes, Some("what is this?"))), &me()));
        assert_eq!(inbound.text, "what is this?");
        let p = &inbound.attachments[0];
        assert_eq!(
            (p.kind, p.source.as_str(), p.size),
            (AttachmentKind::Photo, "large", Some(120_000))
        );
    }

    #[test]
    fn a_photo_without_a_caption_in_a_group_is_ignored_unless_it_replies_to_the_bot() {
        let mut photo = group("");
        photo.as_object_mut().unwrap().remove("text");
        photo["photo"] = json!([{ "file_id": "f", "file_unique_id": "u", "width": 1, "height": 1 }]);
        assert!(matches!(route(&update(photo.clone()), &me()), Routed::Ignored(_)));
        photo["caption"] = json!("@mnemo_bot what is this?");
        let inbound = message(route(&update(photo), &me()));
        assert!(inbound.addressed);
        assert_eq!(inbound.text, "what is this?");
        assert_eq!(inbound.attachments.len(), 1);
    }

    #[test]
    fn a_sticker_in_a_group_is_ignored_unless_it_replies_to_the_bot() {
        let mut sticker = group("");
        sticker.as_object_mut().unwrap().remove("text");
        sticker["sticker"] = json!({
            "file_id": "s", "file_unique_id": "u", "type": "regular", "width": 1, "height": 1,
            "is_animated": false, "is_video": false,
        });
        assert!(matches!(route(&update(sticker.clone()), &me()), Routed::Ignored(_)));
        sticker["reply_to_message"] = json!({
            "message_id": 5, "date": 1_774_236_000,
            "chat": { "id": -100_500, "type": "supergroup", "title": "Team" },
            "from": { "id": 999, "is_bot": true, "first_name": "Mnemo", "username": "mnemo_bot" },
            "text": "an answer",
        });
        assert!(matches!(route(&update(sticker), &me()), Routed::TextOnly(i) if i.addressed));
    }

    #[test]
    fn messages_from_bots_and_service_messages_are_ignored() {
        for mut from_bot in [private("hi"), group("hi"), group("@mnemo_bot hi")] {
            from_bot["from"]["is_bot"] = json!(true);
            assert!(matches!(route(&update(from_bot), &me()), Routed::Ignored(_)));
        }
        let mut own = group("an answer");
        own["from"] = json!({ "id": 999, "is_bot": true, "first_name": "Mnemo", "username": "mnemo_bot" });
        assert!(matches!(route(&update(own), &me()), Routed::Ignored(_)));
        let edited: Update =
            serde_json::from_str(&json!({ "update_id": 2, "edited_message": group("hello all, edited") }).to_string())
                .unwrap();
        assert!(matches!(route(&edited, &me()), Routed::Ignored(_)));
        let mut joined = group("");
        joined.as_object_mut().unwrap().remove("text");
        joined["new_chat_members"] = json!([{ "id": 5, "is_bot": false, "first_name": "B" }]);
        assert!(matches!(route(&update(joined), &me()), Routed::Ignored(_)));
    }

    #[test]
    fn message_ids_round_trip() {
        assert_eq!(message_number(&msg_id(-100_500, 12)), Some(12));
        assert_eq!(message_number("12"), Some(12));
        assert_eq!(message_number("console-1"), None);
    }
}
