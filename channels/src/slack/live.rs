//! Slack live replies: the "thinking…" placeholder becomes the answer's
//! first message and grows with `chat.update` while the model writes it;
//! an answer longer than one message continues in new posts in the same
//! thread. At most one Web API call every 1.2 s per reply (`chat.update`
//! is Tier 3, about 50 a minute); a 429 is waited out by the Web API's own
//! retry (its `Retry-After`), which slows the next calls too. The
//! placeholder never stays behind: an error before any text replaces it
//! with the error sentence the broker finishes with, and a final text that
//! shows nothing (an empty answer) with [`EMPTY_ANSWER`]. Slash-command
//! answers, ephemeral and private replies are sent once at the end.

use super::{Shared, SlackChannel};
use crate::format::{Chunk, SlackMrkdwn, to_chunks};
use crate::live::{Editor, Growing};
use crate::{ChannelError, LiveReply, Outbound, SendAtFinish};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// The least time between two calls of one reply.
pub const EDIT_INTERVAL: Duration = Duration::from_millis(1200);

/// What the placeholder becomes when the answer shows nothing at all
/// (markdown, like every answer).
pub const EMPTY_ANSWER: &str = "The model's answer was empty. Your message is saved; please try again.";

/// The live reply for `out`.
pub(super) fn reply(channel: &SlackChannel, out: Outbound) -> Box<dyn LiveReply + '_> {
    let plain = out.interaction.is_none() && !out.ephemeral && out.private_to.is_none();
    if !plain {
        return Box::new(SendAtFinish::new(channel, out));
    }
    let editor = SlackEditor {
        shared: channel.shared.clone(),
        out,
    };
    Box::new(NeverThinking(Growing::new(SlackMrkdwn, editor, EDIT_INTERVAL)))
}

/// [`Growing`] whose final state always replaces the placeholder: a final
/// text that renders to no message at all would otherwise leave
/// "thinking…" on screen for good.
struct NeverThinking(Growing<SlackMrkdwn, SlackEditor>);

#[async_trait]
impl LiveReply for NeverThinking {
    fn ready_at(&self) -> tokio::time::Instant {
        self.0.ready_at()
    }

    async fn update(&mut self, text: &str) {
        self.0.update(text).await;
    }

    async fn finish(self: Box<Self>, text: &str) -> Result<(), ChannelError> {
        let text = match to_chunks(&SlackMrkdwn, text).is_empty() {
            true => EMPTY_ANSWER,
            false => text,
        };
        Box::new(self.0).finish(text).await
    }
}

struct SlackEditor {
    shared: Arc<Shared>,
    out: Outbound,
}

impl SlackEditor {
    fn error(&self, e: super::WebError) -> ChannelError {
        ChannelError::Send {
            channel: "slack".into(),
            target: self.out.chat_id.clone(),
            reason: e.to_string(),
        }
    }
}

#[async_trait]
impl Editor for SlackEditor {
    /// A message's `ts`.
    type Id = String;

    /// The first message takes over the placeholder, if one was posted;
    /// every other is a new post in the thread.
    async fn post(&mut self, chunk: &Chunk, first: bool) -> Result<String, ChannelError> {
        let placeholder = match first {
            true => self.shared.take_placeholder(self.out.reply_to.as_deref()).await,
            false => None,
        };
        let (chat, thread) = (&self.out.chat_id, self.out.thread_id.as_deref());
        if let Some(ts) = placeholder {
            match self.shared.web.update(chat, &ts, &chunk.text).await {
                Ok(()) => return Ok(ts),
                Err(e) => {
                    tracing::warn!(error = %e, "slack: placeholder not updated; posting the answer instead");
                    self.shared.remove(chat, Some(ts)).await;
                }
            }
        }
        self.shared
            .web
            .post(chat, thread, &chunk.text)
            .await
            .map_err(|e| self.error(e))
    }

    async fn edit(&mut self, ts: &String, chunk: &Chunk) -> Result<(), ChannelError> {
        self.shared
            .web
            .update(&self.out.chat_id, ts, &chunk.text)
            .await
            .map_err(|e| self.error(e))
    }
}
