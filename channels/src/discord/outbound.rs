//! Sending replies to Discord: text as Discord markdown split under the
//! limit, files as attachments, and answers to `/session` interactions
//! (editing the deferred "thinking…" response, then follow-ups); answers
//! marked private go to the asker's DM, never to a server channel. A reply
//! never pings anyone but the asker, so model output cannot `@everyone` a
//! server. Errors say what failed with secrets redacted; nothing here logs
//! message text.

use super::{Shared, inbound};
use crate::format::{self, DiscordMarkdown};
use crate::retry::{Gave, RetryPolicy, Verdict};
use crate::{ASK_PRIVATELY, ChannelError, Outbound, OutboundBody, SENT_PRIVATELY};
use serenity::all::{
    Builder, ChannelId, CreateAllowedMentions, CreateAttachment, CreateInteractionResponseFollowup, CreateMessage,
    EditInteractionResponse, HttpError, MessageId, MessageReference, UserId,
};
use std::num::NonZeroU64;
use std::path::Path;
use std::time::Duration;

/// The largest upload a bot may make without a boosted server.
pub const UPLOAD_LIMIT_BYTES: u64 = 10 * 1024 * 1024;

/// Retries of a request that got 429: 3, after about 0.5 s, 1 s, 2 s. Only
/// reached through a REST proxy (serenity's own ratelimiter waits and
/// retries by itself otherwise).
const RETRY: RetryPolicy = RetryPolicy {
    max_retries: 3,
    base_delay: Duration::from_millis(500),
    max_delay: Duration::from_secs(2),
    max_retry_after: Duration::from_secs(60),
};

/// The text of a deferred interaction that got an empty reply, so it does
/// not stay on "thinking…" until Discord gives up.
const EMPTY_REPLY: &str = "(no reply)";

/// One Discord message of a reply: text and, on the first, the file.
struct Part {
    text: String,
    file: Option<CreateAttachment>,
}

/// A Discord id from its decimal form; `None` for anything else (0 included,
/// which serenity's ids cannot hold).
pub(crate) fn snowflake<T: From<NonZeroU64>>(s: &str) -> Option<T> {
    s.trim().parse::<NonZeroU64>().ok().map(T::from)
}

pub(crate) async fn send(shared: &Shared, out: Outbound) -> Result<(), ChannelError> {
    if let Some(handle) = out.interaction.as_deref() {
        return answer_interaction(shared, handle, out.ephemeral, out.body).await;
    }
    match out.private_to.clone() {
        Some(user) => send_privately(shared, out, &user).await,
        None => send_to_channel(shared, out).await,
    }
}

/// A memory-revealing answer asked in a server channel: it goes to the
/// asker's DM, and the channel hears only that it did (or, when Discord
/// refuses the DM, that the asker should ask in one).
async fn send_privately(shared: &Shared, out: Outbound, user: &str) -> Result<(), ChannelError> {
    let dm = match snowflake::<UserId>(user) {
        Some(id) => retry(|| id.create_dm_channel(&*shared.http))
            .await
            .map_err(|e| shared.send_error(user, &describe(&e), None)),
        None => Err(shared.send_error(user, "not a Discord user id (a decimal snowflake)", None)),
    };
    let delivered = match dm {
        Ok(dm) => {
            let private = Outbound {
                chat_id: dm.id.to_string(),
                thread_id: None,
                reply_to: None,
                private_to: None,
                ..out.clone()
            };
            send_to_channel(shared, private).await
        }
        Err(e) => Err(e),
    };
    let note = match delivered {
        Ok(()) => SENT_PRIVATELY,
        Err(e) => {
            tracing::info!(channel = inbound::CHANNEL, error = %e, "private answer not delivered by DM; asking for a DM");
            ASK_PRIVATELY
        }
    };
    send_to_channel(
        shared,
        Outbound {
            private_to: None,
            ephemeral: false,
            body: OutboundBody::Text(note.into()),
            ..out
        },
    )
    .await
}

async fn send_to_channel(shared: &Shared, out: Outbound) -> Result<(), ChannelError> {
    let target = out.thread_id.as_deref().unwrap_or(&out.chat_id);
    let channel = snowflake::<ChannelId>(target)
        .ok_or_else(|| shared.send_error(target, "not a Discord channel id (a decimal snowflake)", None))?;
    let reply_to = out.reply_to.as_deref().and_then(snowflake::<MessageId>);
    for (i, part) in parts(shared, target, out.body).await?.into_iter().enumerate() {
        let mut msg = CreateMessage::new()
            .content(part.text)
            .allowed_mentions(only_the_asker());
        if let Some(file) = part.file {
            msg = msg.add_file(file);
        }
        if i == 0
            && let Some(id) = reply_to
        {
            msg = msg.reference_message(MessageReference::from((channel, id)).fail_if_not_exists(false));
        }
        retry(|| channel.send_message(&*shared.http, msg.clone()))
            .await
            .map_err(|e| shared.send_error(target, &describe(&e), None))?;
    }
    Ok(())
}

/// Answers a `/session` interaction that the handler deferred: the first
/// part replaces "thinking…", the rest follow (ephemeral like it).
async fn answer_interaction(
    shared: &Shared,
    handle: &str,
    ephemeral: bool,
    body: OutboundBody,
) -> Result<(), ChannelError> {
    let (app, _, token) = inbound::parse_handle(handle)
        .ok_or_else(|| shared.send_error("interaction", "not a Discord interaction handle", Some(handle)))?;
    let fail = |e: serenity::Error| shared.send_error("interaction", &describe(&e), Some(token));
    shared.http.set_application_id(app);
    let mut parts = parts(shared, "interaction", body).await?;
    if parts.is_empty() {
        parts.push(Part {
            text: EMPTY_REPLY.to_string(),
            file: None,
        });
    }
    for (i, part) in parts.into_iter().enumerate() {
        if i == 0 {
            let mut edit = EditInteractionResponse::new()
                .content(part.text)
                .allowed_mentions(only_the_asker());
            if let Some(file) = part.file {
                edit = edit.new_attachment(file);
            }
            retry(|| edit.clone().execute(&*shared.http, token))
                .await
                .map_err(fail)?;
        } else {
            let follow = CreateInteractionResponseFollowup::new()
                .content(part.text)
                .ephemeral(ephemeral)
                .allowed_mentions(only_the_asker());
            retry(|| follow.clone().execute(&*shared.http, (None, token)))
                .await
                .map_err(fail)?;
        }
    }
    Ok(())
}

/// The messages a reply becomes. A file too large to upload becomes a note
/// telling the user to ask the operator for it (DESIGN §5).
async fn parts(shared: &Shared, target: &str, body: OutboundBody) -> Result<Vec<Part>, ChannelError> {
    let text_parts = |text: &str| -> Vec<Part> {
        format::to_chunks(&DiscordMarkdown, text)
            .into_iter()
            .map(|chunk| Part {
                text: chunk.text,
                file: None,
            })
            .collect()
    };
    let (path, caption) = match body {
        OutboundBody::Text(text) => return Ok(text_parts(&text)),
        OutboundBody::File { path, caption } => (path, caption),
    };
    let size = tokio::fs::metadata(&path)
        .await
        .map_err(|e| shared.send_error(target, &format!("could not read {}: {e}", path.display()), None))?
        .len();
    if size > UPLOAD_LIMIT_BYTES {
        return Ok(text_parts(&too_large_note(&caption, &path, size)));
    }
    let file = CreateAttachment::path(&path)
        .await
        .map_err(|e| shared.send_error(target, &format!("could not read {}: {e}", path.display()), None))?;
    let mut parts = text_parts(&caption);
    match parts.first_mut() {
        Some(first) => first.file = Some(file),
        None => parts.push(Part {
            text: String::new(),
            file: Some(file),
        }),
    }
    Ok(parts)
}

fn too_large_note(caption: &str, path: &Path, size: u64) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    format!(
        "{caption}\n\nThe file is too large to upload here ({:.1} MiB; Discord allows {:.0} MiB). \
         Ask the operator for `{}`.",
        mib(size),
        mib(UPLOAD_LIMIT_BYTES),
        path.display()
    )
}

/// No `@everyone`, role or user pings from model text; the asker is pinged
/// by the reply itself so a slow answer is noticed.
pub(super) fn only_the_asker() -> CreateAllowedMentions {
    CreateAllowedMentions::new().replied_user(true)
}

/// Runs `call`, again after a wait when Discord (or the proxy) answers 429.
/// No shutdown cuts these waits: replies are still sent while the broker
/// drains, and the waits are bounded.
pub(super) async fn retry<T, F, Fut>(call: F) -> serenity::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = serenity::Result<T>>,
{
    let judge = |e: &serenity::Error| {
        if status(e) == Some(429) {
            Verdict::Retry(None)
        } else {
            Verdict::Fail
        }
    };
    RETRY
        .run(inbound::CHANNEL, None, judge, call)
        .await
        .map_err(Gave::into_error)
}

pub(super) fn status(e: &serenity::Error) -> Option<u16> {
    match e {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(r)) => Some(r.status_code.as_u16()),
        _ => None,
    }
}

/// A failed request in words a person can act on (before redaction).
pub(super) fn describe(e: &serenity::Error) -> String {
    let hint = match status(e) {
        Some(401) => " (the bot token was refused: check the token's environment variable)",
        Some(403) => " (the bot lacks a permission here: View Channel, Send Messages, Attach Files)",
        Some(404) => " (unknown channel, or the interaction expired)",
        Some(429) => " (still rate limited after retrying)",
        _ => "",
    };
    match status(e) {
        Some(code) => format!("Discord answered HTTP {code}: {e}{hint}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_decimal_non_zero_ids_are_snowflakes() {
        assert_eq!(snowflake::<ChannelId>("123"), Some(ChannelId::new(123)));
        assert_eq!(snowflake::<ChannelId>("0"), None);
        assert_eq!(snowflake::<ChannelId>("console"), None);
    }

    #[test]
    fn replies_allow_no_mass_or_role_pings() {
        let json = serde_json::to_value(only_the_asker()).unwrap_or_default();
        assert_eq!(json["parse"], serde_json::json!([]));
        assert_eq!(json["replied_user"], true);
    }

    #[test]
    fn a_file_too_large_becomes_a_note_naming_it() {
        let note = too_large_note("Your export", Path::new("/srv/x.tar.gz"), 30 * 1024 * 1024);
        assert!(note.starts_with("Your export"));
        assert!(note.contains("30.0 MiB") && note.contains("`/srv/x.tar.gz`"), "{note}");
    }
}
