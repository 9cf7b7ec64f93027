//! Slack events and slash commands → [`Inbound`], and the rules for which
//! Slack traffic is meant for the bot. Pure decisions over the typed
//! slack-morphism payloads plus the adapter's bounded memory; no network.
//!
//! Addressed to the bot are: direct messages (`message.im`), mentions in
//! channels (`app_mention`, or the `message` copy of it), and messages in a
//! channel thread the bot is already in. Other channel messages
//! (`message.channels`, `message.groups`, `message.mpim`) reach the broker
//! too, with `addressed: false`: whether the bot answers them is the access
//! gate's call (`requireMention` in `access.json`), not the adapter's. It
//! ignores bot messages, edits, deletes and other subtypes, and its own
//! messages. A redelivered event and the second copy of a mention decide
//! into the same message (`msg_id` is channel and `ts`): handing it to the
//! broker once is [`super::receipts`]' job, since whether a redelivery is
//! new depends on whether the broker took the first copy. A redelivered
//! slash command (same `trigger_id`) is dropped here: commands are
//! acknowledged at once, so only a lost ack brings one back.

use super::recent::Recent;
use crate::{ChatKind, Inbound};
use chrono::{DateTime, Utc};
use slack_morphism::prelude::*;

/// How many command trigger ids / threads to remember. Slack retries
/// within minutes, so a few thousand covers any realistic burst.
const REMEMBERED: usize = 4_096;

/// Who the bot is on this workspace (from `auth.test`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user_id: String,
    pub name: Option<String>,
}

/// What to do with one piece of Slack traffic.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Deliver(Box<Inbound>),
    /// Not for the broker; the reason is logged (never the text).
    Ignore(&'static str),
}

/// What the adapter remembers between events.
pub struct Memory {
    /// Trigger ids of slash commands handed over.
    commands: Recent,
    /// `channel:thread_ts` of channel threads the bot has been asked in.
    threads: Recent,
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            commands: Recent::new(REMEMBERED),
            threads: Recent::new(REMEMBERED),
        }
    }
}

/// The fields of a Slack message the decision needs.
struct Candidate<'a> {
    channel: &'a str,
    user: &'a str,
    ts: &'a str,
    thread_ts: Option<&'a str>,
    text: &'a str,
    kind: ChatKind,
    /// Meant for the bot: a DM, a mention, or a reply in the bot's thread.
    addressed: bool,
    /// The files shared with the message (`file_share`).
    attachments: Vec<crate::Attachment>,
}

/// Decides on one Events API callback (Socket Mode or HTTP alike).
pub fn on_event(cb: &SlackPushEventCallback, me: &Identity, memory: &mut Memory) -> Decision {
    let candidate = match &cb.event {
        SlackEventCallbackBody::Message(m) => from_message(m, me, memory),
        SlackEventCallbackBody::AppMention(m) => from_mention(m, me),
        _ => Err("event type not handled"),
    };
    let c = match candidate {
        Ok(c) => c,
        Err(reason) => return Decision::Ignore(reason),
    };
    let text = clean_text(c.text, &me.user_id);
    if text.is_empty() && c.attachments.is_empty() {
        return Decision::Ignore("no text");
    }
    let thread_id = match c.kind {
        ChatKind::Direct => c.thread_ts.map(str::to_string),
        // In channels the answer always goes in a thread, so the channel is
        // not flooded; from now on the bot is "in" that thread.
        ChatKind::Group => Some(c.thread_ts.unwrap_or(c.ts).to_string()),
    };
    // Only a message meant for the bot puts it "in" the thread: were
    // unaddressed chatter to do so, replies to chatter the access gate
    // ignores would count as addressed.
    if let (ChatKind::Group, Some(thread), true) = (c.kind, &thread_id, c.addressed) {
        memory.threads.insert(&format!("{}:{thread}", c.channel));
    }
    Decision::Deliver(Box::new(Inbound {
        channel: "slack".into(),
        user_id: c.user.to_string(),
        user_name: None,
        chat_id: c.channel.to_string(),
        chat_kind: c.kind,
        thread_id,
        msg_id: format!("{}:{}", c.channel, c.ts),
        text,
        ts: ts_to_time(c.ts),
        addressed: c.addressed,
        interaction: None,
        attachments: c.attachments,
    }))
}

fn from_message<'a>(m: &'a SlackMessageEvent, me: &Identity, memory: &Memory) -> Result<Candidate<'a>, &'static str> {
    match &m.subtype {
        None | Some(SlackMessageEventType::FileShare | SlackMessageEventType::ThreadBroadcast) => {}
        Some(SlackMessageEventType::MessageChanged | SlackMessageEventType::MessageDeleted) => {
            return Err("edit or delete");
        }
        Some(SlackMessageEventType::BotMessage) => return Err("bot message"),
        Some(_) => return Err("system message subtype"),
    }
    if m.sender.bot_id.is_some() {
        return Err("bot message");
    }
    if m.hidden == Some(true) {
        return Err("hidden message");
    }
    let user = m.sender.user.as_ref().ok_or("message without a user")?;
    if user.0 == me.user_id {
        return Err("the bot's own message");
    }
    let channel = m.origin.channel.as_ref().ok_or("message without a channel")?;
    let text = m.content.as_ref().and_then(|c| c.text.as_deref()).unwrap_or("");
    let kind = match m.origin.channel_type.as_ref().map(|t| t.0.as_str()) {
        Some("im") => ChatKind::Direct,
        Some(_) => ChatKind::Group,
        None if channel.0.starts_with('D') => ChatKind::Direct,
        None => ChatKind::Group,
    };
    let thread_ts = m.origin.thread_ts.as_ref().map(|t| t.0.as_str());
    let addressed = match kind {
        ChatKind::Direct => true,
        ChatKind::Group => {
            let mentioned = text.contains(&format!("<@{}", me.user_id));
            mentioned || thread_ts.is_some_and(|t| memory.threads.contains(&format!("{}:{t}", channel.0)))
        }
    };
    Ok(Candidate {
        channel: &channel.0,
        user: &user.0,
        ts: &m.origin.ts.0,
        thread_ts,
        text,
        kind,
        addressed,
        attachments: super::files::attachments(m.content.as_ref().and_then(|c| c.files.as_ref())),
    })
}

fn from_mention<'a>(m: &'a SlackAppMentionEvent, me: &Identity) -> Result<Candidate<'a>, &'static str> {
    if m.user.0 == me.user_id {
        return Err("the bot's own message");
    }
    if m.edited.is_some() {
        return Err("edit");
    }
    Ok(Candidate {
        channel: &m.channel.0,
        user: &m.user.0,
        ts: &m.origin.ts.0,
        thread_ts: m.origin.thread_ts.as_ref().map(|t| t.0.as_str()),
        text: m.content.text.as_deref().unwrap_or(""),
        kind: if m.channel.0.starts_with('D') {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        addressed: true,
        // Either copy of a mention may come first: both carry the files.
        attachments: super::files::attachments(m.content.files.as_ref()),
    })
}

/// Decides on one slash command: `/session status` arrives as command
/// `/session` with text `status`, and goes to the broker as the plain-text
/// form with the `response_url` as the interaction to answer through.
pub fn on_command(ev: &SlackCommandEvent, memory: &mut Memory) -> Decision {
    if !memory.commands.insert(&ev.trigger_id.0) {
        return Decision::Ignore("redelivery of a command already handled");
    }
    let args = ev.text.as_deref().map(str::trim).unwrap_or("");
    let text = if args.is_empty() {
        ev.command.0.clone()
    } else {
        format!("{} {args}", ev.command.0)
    };
    Decision::Deliver(Box::new(Inbound {
        channel: "slack".into(),
        user_id: ev.user_id.0.clone(),
        user_name: None,
        chat_id: ev.channel_id.0.clone(),
        chat_kind: if ev.channel_id.0.starts_with('D') {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        thread_id: None,
        msg_id: format!("cmd:{}", ev.trigger_id.0),
        text,
        ts: Utc::now(),
        addressed: true,
        interaction: Some(ev.response_url.0.to_string()),
        attachments: Vec::new(),
    }))
}

/// Slack's wire text → what the person typed: the bot's own mention is
/// removed, other mentions/channels/links become readable, entities are
/// unescaped.
pub fn clean_text(text: &str, bot_user_id: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let (target, label) = match inner.split_once('|') {
            Some((t, l)) => (t, Some(l)),
            None => (inner, None),
        };
        rest = &after[end + 1..];
        if let Some(user) = target.strip_prefix('@') {
            if user == bot_user_id {
                // Drop the mention with the space that separated it.
                if out.is_empty() || out.ends_with(' ') {
                    rest = rest.strip_prefix(' ').unwrap_or(rest);
                }
            } else {
                out.push('@');
                out.push_str(label.unwrap_or(user));
            }
        } else if let Some(channel) = target.strip_prefix('#') {
            out.push('#');
            out.push_str(label.unwrap_or(channel));
        } else if let Some(special) = target.strip_prefix('!') {
            out.push('@');
            out.push_str(label.unwrap_or(special));
        } else {
            match label {
                Some(l) if l != target => out.push_str(&format!("{l} ({target})")),
                _ => out.push_str(target),
            }
        }
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .trim()
        .to_string()
}

/// Slack's `ts` ("1700000000.000100") as a time; now if it does not parse.
fn ts_to_time(ts: &str) -> DateTime<Utc> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let micros: u32 = format!("{frac:0<6}").get(..6).and_then(|f| f.parse().ok()).unwrap_or(0);
    secs.parse::<i64>()
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, micros * 1_000))
        .unwrap_or_else(Utc::now)
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
