//! Which Discord traffic becomes an [`Inbound`], and how: every message from
//! a person, never other bots (ourselves included) or system messages;
//! `/session` application commands become the plain-text form with an
//! interaction handle. Direct messages are always addressed; a guild message
//! is addressed when it mentions or replies to the bot (the mention is
//! stripped). Unaddressed guild messages still go to the broker, with
//! `addressed: false`: the access gate drops them unless `access.json` opts
//! that channel in with `requireMention: false`, and it must be able to see
//! them for that setting to mean anything. Pure conversion: no network, no
//! logging of message text.

use crate::{Attachment, AttachmentKind, ChatKind, Inbound};
use chrono::{DateTime, Utc};
use serenity::all::{
    ApplicationId, CommandDataOption, CommandDataOptionValue, CommandInteraction, InteractionId, Message, MessageType,
    Timestamp, User, UserId,
};

/// The channel name, in `Inbound::channel` and the state folder.
pub const CHANNEL: &str = "discord";

/// The bot's own account, learned from the gateway's READY event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Me {
    pub id: UserId,
    pub name: String,
}

/// Why a message was not taken, for the debug log (never the text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    FromABot,
    SystemMessage,
    /// A guild message before READY told us who we are: no way to know
    /// whether it mentions us.
    IdentityUnknown,
    Empty,
}

/// The [`Inbound`] for a gateway message, or why it is ignored.
pub fn message(msg: &Message, me: Option<&Me>) -> Result<Inbound, Skip> {
    if msg.author.bot || msg.author.system || msg.webhook_id.is_some() {
        return Err(Skip::FromABot);
    }
    if !matches!(msg.kind, MessageType::Regular | MessageType::InlineReply) {
        return Err(Skip::SystemMessage);
    }
    let direct = msg.guild_id.is_none();
    let addressed = match (direct, me) {
        (true, _) => true,
        (false, None) => return Err(Skip::IdentityUnknown),
        (false, Some(me)) => {
            msg.mentions.iter().any(|u| u.id == me.id)
                || msg.referenced_message.as_ref().is_some_and(|r| r.author.id == me.id)
        }
    };
    let text = readable_mentions(&msg.content, msg, me.map(|m| m.id));
    let attachments: Vec<Attachment> = msg.attachments.iter().map(attachment).collect();
    if text.is_empty() && attachments.is_empty() {
        return Err(Skip::Empty);
    }
    Ok(Inbound {
        channel: CHANNEL.to_string(),
        user_id: msg.author.id.to_string(),
        user_name: Some(display_name(
            msg.member.as_ref().and_then(|m| m.nick.as_deref()),
            &msg.author,
        )),
        // A thread is a channel of its own: answering its id lands in the thread.
        chat_id: msg.channel_id.to_string(),
        chat_kind: if direct { ChatKind::Direct } else { ChatKind::Group },
        // Discord sends `position` only for messages inside a thread.
        thread_id: msg.position.map(|_| msg.channel_id.to_string()),
        msg_id: msg.id.to_string(),
        text,
        ts: utc(&msg.timestamp),
        addressed,
        interaction: None,
        attachments,
    })
}

/// A message attachment as the broker sees it: a voice message (Discord
/// gives it a `duration_secs`), an audio file, an image or a document,
/// fetched from its CDN `url`.
fn attachment(a: &serenity::all::Attachment) -> Attachment {
    let mime = a
        .content_type
        .as_deref()
        .map(|m| m.split(';').next().unwrap_or("").trim().to_string());
    let kind = match (a.duration_secs, mime.as_deref().unwrap_or("")) {
        (Some(_), _) => AttachmentKind::Voice,
        (None, m) if m.starts_with("audio/") => AttachmentKind::Audio,
        (None, m) if m.starts_with("image/") => AttachmentKind::Photo,
        _ => AttachmentKind::Document,
    };
    Attachment {
        kind,
        name: Some(a.filename.clone()),
        mime,
        size: Some(u64::from(a.size)),
        duration_secs: a
            .duration_secs
            .map(|d| d.round().clamp(0.0, f64::from(u32::MAX)) as u32),
        source: a.url.clone(),
    }
}

/// `content` with the bot's own mention removed and other users' mentions
/// (`<@123>`) written as `@name`, so the model reads names, not ids.
fn readable_mentions(content: &str, msg: &Message, me: Option<UserId>) -> String {
    let mut text = content.to_string();
    if let Some(me) = me {
        for token in [format!("<@{me}>"), format!("<@!{me}>")] {
            text = text.replace(&format!(" {token} "), " ").replace(&token, "");
        }
    }
    for user in msg.mentions.iter().filter(|u| Some(u.id) != me) {
        let name = format!("@{}", user.global_name.as_deref().unwrap_or(&user.name));
        text = text
            .replace(&format!("<@{}>", user.id), &name)
            .replace(&format!("<@!{}>", user.id), &name);
    }
    text.trim().to_string()
}

/// The [`Inbound`] for a `/session` application command: the text the broker
/// would get from the plain-text form, and a handle to answer through.
pub fn command(cmd: &CommandInteraction) -> Option<Inbound> {
    if cmd.data.name != super::commands::NAME {
        return None;
    }
    let sub = cmd.data.options.first()?;
    let mut text = format!("/session {}", sub.name.replace('-', " "));
    if let CommandDataOptionValue::SubCommand(args) = &sub.value {
        for arg in args.iter().filter_map(argument) {
            text.push(' ');
            text.push_str(&arg);
        }
    }
    Some(Inbound {
        channel: CHANNEL.to_string(),
        user_id: cmd.user.id.to_string(),
        user_name: Some(display_name(
            cmd.member.as_ref().and_then(|m| m.nick.as_deref()),
            &cmd.user,
        )),
        chat_id: cmd.channel_id.to_string(),
        chat_kind: if cmd.guild_id.is_some() {
            ChatKind::Group
        } else {
            ChatKind::Direct
        },
        thread_id: None,
        msg_id: cmd.id.to_string(),
        text,
        ts: utc(&cmd.id.created_at()),
        addressed: true,
        interaction: Some(handle(cmd.application_id, cmd.id, &cmd.token)),
        attachments: Vec::new(),
    })
}

/// The name people see: the server nickname, else the display name, else
/// the username.
fn display_name(nick: Option<&str>, user: &User) -> String {
    nick.or(user.global_name.as_deref()).unwrap_or(&user.name).to_string()
}

fn argument(option: &CommandDataOption) -> Option<String> {
    match &option.value {
        CommandDataOptionValue::String(s) => Some(s.trim().to_string()),
        CommandDataOptionValue::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `Inbound::interaction` for Discord: everything needed to answer without
/// any other state, `"{application_id}:{interaction_id}:{token}"`.
pub fn handle(app: ApplicationId, id: InteractionId, token: &str) -> String {
    format!("{app}:{id}:{token}")
}

/// The parts of a [`handle`]; `None` for anything else.
pub fn parse_handle(handle: &str) -> Option<(ApplicationId, InteractionId, &str)> {
    let mut parts = handle.splitn(3, ':');
    let app = parts.next()?.parse::<std::num::NonZeroU64>().ok()?;
    let id = parts.next()?.parse::<std::num::NonZeroU64>().ok()?;
    let token = parts.next().filter(|t| !t.is_empty())?;
    Some((app.into(), id.into(), token))
}

fn utc(ts: &Timestamp) -> DateTime<Utc> {
    ts.to_rfc3339()
        .and_then(|s| DateTime::parse_from_rfc3339(&s).ok())
        .map_or_else(Utc::now, |t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dm_with(content: &str, attachments: serde_json::Value, flags: u64) -> Message {
        serde_json::from_value(serde_json::json!({
            "id": "900", "channel_id": "77", "content": content, "type": 0,
            "author": { "id": "42", "username": "ada", "discriminator": "0", "global_name": "Ada", "avatar": null },
            "timestamp": "2026-03-23T03:28:32.000000+00:00", "edited_timestamp": null, "tts": false,
            "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": attachments,
            "embeds": [], "pinned": false, "flags": flags, "components": []
        }))
        .unwrap()
    }

    #[test]
    fn a_voice_message_and_an_image_become_attachments_from_the_cdn() {
        let voice = serde_json::json!([{
            "id": "1", "filename": "voice-message.ogg", "size": 5120, "content_type": "audio/ogg",
            "url": "https://cdn.discordapp.com/attachments/77/1/voice-message.ogg?ex=1",
            "proxy_url": "https://media.discordapp.net/attachments/77/1/voice-message.ogg",
            "duration_secs": 3.6, "waveform": "AAAA"
        }]);
        let m = message(&dm_with("", voice, 8192), None).unwrap();
        assert_eq!(m.text, "");
        assert_eq!(
            m.attachments,
            vec![Attachment {
                kind: AttachmentKind::Voice,
                name: Some("voice-message.ogg".into()),
                mime: Some("audio/ogg".into()),
                size: Some(5120),
                duration_secs: Some(4),
                source: "https://cdn.discordapp.com/attachments/77/1/voice-message.ogg?ex=1".into(),
            }]
        );
        let image = serde_json::json!([
            { "id": "2", "filename": "cat.png", "size": 10, "content_type": "image/png",
              "url": "https://cdn.discordapp.com/attachments/77/2/cat.png", "proxy_url": "https://media.discordapp.net/x" },
            { "id": "3", "filename": "notes.md", "size": 10, "content_type": "text/markdown; charset=utf-8",
              "url": "https://cdn.discordapp.com/attachments/77/3/notes.md", "proxy_url": "https://media.discordapp.net/y" },
        ]);
        let m = message(&dm_with("what is this?", image, 0), None).unwrap();
        assert_eq!(m.text, "what is this?");
        let kinds: Vec<_> = m.attachments.iter().map(|a| (a.kind, a.mime.clone())).collect();
        assert_eq!(
            kinds,
            vec![
                (AttachmentKind::Photo, Some("image/png".into())),
                (AttachmentKind::Document, Some("text/markdown".into()))
            ]
        );
        assert_eq!(message(&dm_with("", serde_json::json!([]), 0), None), Err(Skip::Empty));
    }

    #[test]
    fn a_handle_round_trips_and_garbage_is_refused() {
        let h = handle(ApplicationId::new(7), InteractionId::new(9), "tok:en");
        assert_eq!(
            parse_handle(&h),
            Some((ApplicationId::new(7), InteractionId::new(9), "tok:en"))
        );
        assert_eq!(parse_handle("0:9:t"), None);
        assert_eq!(parse_handle("7:9:"), None);
        assert_eq!(parse_handle("response_url"), None);
    }
}
