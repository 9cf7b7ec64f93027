//! The two types every adapter speaks: [`Inbound`] (a message someone sent
//! the bot) and [`Outbound`] (a reply). Platform details stop here.

use chrono::{DateTime, Utc};
use std::path::PathBuf;

/// Where a message was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatKind {
    /// A one-to-one conversation with the bot (and the console).
    Direct,
    /// A group, channel or guild where others read along.
    Group,
}

/// One message someone sent the bot, in the broker's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// The adapter's name (`console`, `telegram`, …).
    pub channel: String,
    /// The sender's stable platform id. Raw: never a path until it passes
    /// `SafeName`.
    pub user_id: String,
    pub user_name: Option<String>,
    /// Where to answer (DM, group, channel id).
    pub chat_id: String,
    pub chat_kind: ChatKind,
    /// Thread / topic the message belongs to; replies go there.
    pub thread_id: Option<String>,
    /// The platform's id of this message, unique per channel.
    pub msg_id: String,
    pub text: String,
    pub ts: DateTime<Utc>,
    /// Whether the bot was mentioned, replied to, or commanded; always true
    /// in direct chats.
    pub addressed: bool,
    /// Set when the message came as a platform command interaction (a Slack
    /// slash command's `response_url`, a Discord interaction token): an
    /// opaque handle the adapter answers through, ephemerally.
    pub interaction: Option<String>,
    /// Files sent with the message (a voice note, a photo, a document), in
    /// the platform's order; [`Inbound::text`] is the caption or the words
    /// sent with them. Described only: the broker asks the adapter to
    /// download one ([`crate::Channel::download`]) when it wants it.
    pub attachments: Vec<Attachment>,
}

/// What kind of file an [`Attachment`] is, as the broker treats it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachmentKind {
    /// A voice note recorded in the app (Telegram `voice`, a Discord voice
    /// message).
    Voice,
    /// An audio file (Telegram `audio`, an `audio/*` file elsewhere).
    Audio,
    /// A picture (Telegram `photo`, an `image/*` file elsewhere).
    Photo,
    /// Any other file.
    Document,
}

impl AttachmentKind {
    /// Lowercase, for metrics labels, logs and markers.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentKind::Voice => "voice",
            AttachmentKind::Audio => "audio",
            AttachmentKind::Photo => "photo",
            AttachmentKind::Document => "document",
        }
    }
}

/// One file that came with an [`Inbound`], as the platform described it.
/// Nothing here is downloaded yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub kind: AttachmentKind,
    /// The file's name, when the platform gives one.
    pub name: Option<String>,
    /// The MIME type the platform declared (not trusted: the broker checks
    /// a photo's bytes itself).
    pub mime: Option<String>,
    /// The size in bytes the platform declared, if any.
    pub size: Option<u64>,
    /// Voice and audio: the length in seconds the platform declared.
    pub duration_secs: Option<u32>,
    /// Where the adapter fetches it from, in the adapter's own terms (a
    /// Telegram `file_id`, a Slack `url_private_download`, a Discord CDN
    /// URL, a console path). Opaque to the broker; never logged.
    pub source: String,
}

/// What a reply carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboundBody {
    /// Plain text in the model's markdown; the adapter formats it for the
    /// platform.
    Text(String),
    /// A file (a `/session export` bundle) with a short caption.
    File { path: PathBuf, caption: String },
}

/// One reply to one [`Inbound`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outbound {
    pub channel: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    /// The message this answers, for platforms that quote it.
    pub reply_to: Option<String>,
    /// True for answers only the asker should see (slash commands).
    pub ephemeral: bool,
    /// The [`Inbound::interaction`] this answers, if any.
    pub interaction: Option<String>,
    /// Set when the reply reveals the asker's memory and was asked where
    /// others read along: the platform user id it must reach alone. The
    /// adapter delivers it privately (ephemeral message or direct message)
    /// and never to `chat_id`; where it cannot, it sends [`ASK_PRIVATELY`]
    /// to the chat instead.
    pub private_to: Option<String>,
    pub body: OutboundBody,
}

/// Said in a group when a private answer could not be delivered privately
/// (the user never opened a direct chat with the bot, or blocks it).
pub const ASK_PRIVATELY: &str = "That answer would show your memory to everyone here, so I only give it privately. \
Please open a direct chat with me and ask there.";

/// Said in a group after a private answer went to the asker's direct messages.
pub const SENT_PRIVATELY: &str = "I've sent you the answer in a direct message.";

impl Outbound {
    /// A text reply to `to`, in the same chat and thread.
    pub fn reply(to: &Inbound, text: impl Into<String>) -> Self {
        Outbound {
            channel: to.channel.clone(),
            chat_id: to.chat_id.clone(),
            thread_id: to.thread_id.clone(),
            reply_to: Some(to.msg_id.clone()),
            ephemeral: to.interaction.is_some(),
            interaction: to.interaction.clone(),
            private_to: None,
            body: OutboundBody::Text(text.into()),
        }
    }

    /// This reply, to reach only the asker of `to` if `to` came from a
    /// group (see [`Outbound::private_to`]); unchanged in a direct chat.
    pub fn privately(mut self, to: &Inbound) -> Self {
        if to.chat_kind == ChatKind::Group {
            self.private_to = Some(to.user_id.clone());
            self.ephemeral = true;
        }
        self
    }

    /// A file reply to `to`.
    pub fn file(to: &Inbound, path: PathBuf, caption: impl Into<String>) -> Self {
        Outbound {
            body: OutboundBody::File {
                path,
                caption: caption.into(),
            },
            ..Outbound::reply(to, "")
        }
    }
}
