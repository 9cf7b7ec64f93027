//! Telegram live replies: the answer posted with `sendMessage` and grown
//! with `editMessageText` (HTML, plain text where Telegram refuses the
//! markup), at most one edit a second in a private chat and one every three
//! seconds in a group (Telegram's flood limits: about one message a second
//! per chat, twenty a minute per group). Flood waits (429) are waited out
//! by [`Api::call`], which slows the edits down. Private answers, and
//! anything not aimed at a plain chat, are sent once at the end.

use super::api::{Api, Failure, Target};
use super::{CHANNEL, TelegramChannel, target};
use crate::format::{Chunk, TelegramHtml};
use crate::live::{Editor, Growing};
use crate::{ChannelError, LiveReply, Outbound, SendAtFinish};
use async_trait::async_trait;
use std::time::Duration;
use teloxide::types::{ChatId, MessageId};

/// The least time between two edits in a private chat.
pub const PRIVATE_EDIT_INTERVAL: Duration = Duration::from_secs(1);
/// The least time between two edits in a group.
pub const GROUP_EDIT_INTERVAL: Duration = Duration::from_secs(3);

/// The live reply for `out`.
pub(super) fn reply<'c>(channel: &'c TelegramChannel, api: &Api, out: Outbound) -> Box<dyn LiveReply + 'c> {
    let plain_chat = out.private_to.is_none() && out.interaction.is_none();
    match target(&out) {
        Ok(to) if plain_chat => {
            let interval = if to.chat.0 < 0 {
                GROUP_EDIT_INTERVAL
            } else {
                PRIVATE_EDIT_INTERVAL
            };
            let editor = TelegramEditor { api: api.clone(), to };
            Box::new(Growing::new(TelegramHtml, editor, interval))
        }
        _ => Box::new(SendAtFinish::new(channel, out)),
    }
}

struct TelegramEditor {
    api: Api,
    to: Target,
}

impl TelegramEditor {
    fn error(&self, failure: Failure) -> ChannelError {
        ChannelError::Send {
            channel: CHANNEL.into(),
            target: self.to.chat.0.to_string(),
            reason: failure.to_string(),
        }
    }
}

#[async_trait]
impl Editor for TelegramEditor {
    type Id = MessageId;

    async fn post(&mut self, chunk: &Chunk, first: bool) -> Result<MessageId, ChannelError> {
        let to = Target {
            reply_to: self.to.reply_to.filter(|_| first),
            ..self.to
        };
        match self.api.send_chunk(to, chunk).await {
            Err(Failure::Migrated(chat)) => {
                tracing::info!(from = to.chat.0, to = chat, "telegram: group moved to a supergroup");
                self.to.chat = ChatId(chat);
                let to = Target {
                    chat: ChatId(chat),
                    ..to
                };
                self.api.send_chunk(to, chunk).await.map_err(|f| self.error(f))
            }
            sent => sent.map_err(|f| self.error(f)),
        }
    }

    async fn edit(&mut self, id: &MessageId, chunk: &Chunk) -> Result<(), ChannelError> {
        self.api
            .edit_chunk(self.to.chat, *id, chunk)
            .await
            .map_err(|f| self.error(f))
    }
}
