//! Discord live replies: the answer posted as a message (quoting the
//! question, like a one-shot reply) and grown by editing it — `PATCH
//! /channels/{channel.id}/messages/{message.id}` — while the model writes
//! it; an answer longer than 2,000 characters is closed at the splitter's
//! clean boundary and continues in new messages. At most one REST call a
//! second per reply: Discord allows about five messages or edits per five
//! seconds in a channel. A 429 is waited out the way every Discord send
//! is (serenity's ratelimiter on discord.com, [`super::outbound`]'s retry
//! through a proxy), which slows the next calls too. Content Discord
//! refuses (400, e.g. a length it counts differently) is sent again as the
//! chunk's plain text. Interaction answers and private replies are sent
//! once at the end. Nothing here logs message text.

use super::outbound::{describe, only_the_asker, retry, snowflake, status};
use super::{DiscordChannel, Shared};
use crate::format::{Chunk, DiscordMarkdown};
use crate::live::{Editor, Growing};
use crate::{ChannelError, LiveReply, Outbound, SendAtFinish};
use async_trait::async_trait;
use serenity::all::{ChannelId, CreateMessage, EditMessage, MessageId, MessageReference};
use std::sync::Arc;
use std::time::Duration;

/// The least time between two REST calls of one reply.
pub const EDIT_INTERVAL: Duration = Duration::from_secs(1);

/// The live reply for `out`.
pub(super) fn reply(channel: &DiscordChannel, out: Outbound) -> Box<dyn LiveReply + '_> {
    let plain = out.interaction.is_none() && out.private_to.is_none();
    let target = out.thread_id.clone().unwrap_or_else(|| out.chat_id.clone());
    match snowflake::<ChannelId>(&target) {
        Some(to) if plain => {
            let editor = DiscordEditor {
                shared: channel.shared.clone(),
                to,
                target,
                reply_to: out.reply_to.as_deref().and_then(snowflake::<MessageId>),
            };
            Box::new(Growing::new(DiscordMarkdown, editor, EDIT_INTERVAL))
        }
        _ => Box::new(SendAtFinish::new(channel, out)),
    }
}

struct DiscordEditor {
    shared: Arc<Shared>,
    /// The channel (or thread) the answer goes to.
    to: ChannelId,
    /// Its id as text, for errors.
    target: String,
    /// The question, quoted by the first message.
    reply_to: Option<MessageId>,
}

impl DiscordEditor {
    fn error(&self, e: &serenity::Error) -> ChannelError {
        self.shared.send_error(&self.target, &describe(e), None)
    }

    async fn post_text(&self, text: &str, first: bool) -> serenity::Result<MessageId> {
        let mut msg = CreateMessage::new().content(text).allowed_mentions(only_the_asker());
        if first && let Some(id) = self.reply_to {
            msg = msg.reference_message(MessageReference::from((self.to, id)).fail_if_not_exists(false));
        }
        let http = &*self.shared.http;
        retry(|| self.to.send_message(http, msg.clone())).await.map(|m| m.id)
    }

    async fn edit_text(&self, id: MessageId, text: &str) -> serenity::Result<()> {
        let edit = EditMessage::new().content(text).allowed_mentions(only_the_asker());
        let http = &*self.shared.http;
        retry(|| self.to.edit_message(http, id, edit.clone())).await.map(|_| ())
    }
}

/// Discord refused the content itself (not the channel, the token or the
/// rate): worth one more try as plain text.
fn refused_content(e: &serenity::Error, chunk: &Chunk) -> bool {
    status(e) == Some(400) && chunk.plain != chunk.text && !chunk.plain.trim().is_empty()
}

#[async_trait]
impl Editor for DiscordEditor {
    type Id = MessageId;

    async fn post(&mut self, chunk: &Chunk, first: bool) -> Result<MessageId, ChannelError> {
        match self.post_text(&chunk.text, first).await {
            Err(e) if refused_content(&e, chunk) => {
                tracing::info!(channel = super::inbound::CHANNEL, reason = %describe(&e), "discord: markdown refused; posting plain text");
                self.post_text(&chunk.plain, first).await.map_err(|e| self.error(&e))
            }
            posted => posted.map_err(|e| self.error(&e)),
        }
    }

    async fn edit(&mut self, id: &MessageId, chunk: &Chunk) -> Result<(), ChannelError> {
        match self.edit_text(*id, &chunk.text).await {
            Err(e) if refused_content(&e, chunk) => {
                tracing::info!(channel = super::inbound::CHANNEL, reason = %describe(&e), "discord: markdown refused; editing to plain text");
                self.edit_text(*id, &chunk.plain).await.map_err(|e| self.error(&e))
            }
            edited => edited.map_err(|e| self.error(&e)),
        }
    }
}
