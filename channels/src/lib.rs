//! mnemo's platform adapters. Each turns one platform's traffic into
//! [`Inbound`] messages and sends [`Outbound`] replies. Knows nothing of
//! memory: no file here reads or writes the sessions folder, and no adapter
//! decides what to answer — the broker does.

#![forbid(unsafe_code)]

pub mod console;
#[cfg(feature = "discord")]
pub mod discord;
pub mod download;
pub mod format;
pub mod http1;
mod link;
pub mod live;
mod message;
pub mod printable;
pub mod retry;
#[cfg(feature = "slack")]
pub mod slack;
#[cfg(feature = "telegram")]
pub mod telegram;

pub use download::{DownloadError, DownloadLimits};
pub use link::{Link, LinkState, LinkStatus};
pub use live::{LiveReply, SendAtFinish};
pub use message::{
    ASK_PRIVATELY, Attachment, AttachmentKind, ChatKind, Inbound, Outbound, OutboundBody, SENT_PRIVATELY,
};

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

/// Why a channel could not receive or send.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("{channel}: could not send to {target}: {reason}")]
    Send {
        channel: String,
        target: String,
        reason: String,
    },
    #[error("{channel}: {reason}")]
    Receive { channel: String, reason: String },
    #[error("{channel}: the broker stopped taking messages")]
    InboxClosed { channel: String },
}

/// How often the broker renews a typing indicator while the model works
/// (Telegram's lasts about 5 s).
pub const TYPING_REFRESH: std::time::Duration = std::time::Duration::from_secs(4);

/// Fires once when the broker shuts down; channels stop taking new traffic.
pub type Shutdown = watch::Receiver<bool>;

/// One platform adapter. A new platform is one new type behind this trait.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The channel's name, used for the state folder (`console`, `slack`, …).
    fn name(&self) -> &str;

    /// The longest text one platform message may carry (informational: for
    /// status and tests; [`Channel::send`] does the splitting).
    fn max_message_chars(&self) -> usize;

    /// Receives platform traffic until `shutdown` fires or the source ends,
    /// pushing each message into `inbox` in arrival order.
    async fn receive(&self, inbox: mpsc::Sender<Inbound>, shutdown: Shutdown) -> Result<(), ChannelError>;

    /// Sends one whole reply. The adapter formats it for the platform (the
    /// text is the model's markdown) and splits it under the platform's
    /// limit *after* formatting, so escaping can never push a message over
    /// it ([`format`] does the rendering and the boundary work).
    async fn send(&self, out: Outbound) -> Result<(), ChannelError>;

    /// Opens a reply that grows while the model writes it (`out` says where
    /// it goes; its text is replaced by what [`LiveReply::update`] and
    /// [`LiveReply::finish`] are given). Channels that can edit a sent
    /// message return a [`live::Growing`]; the default sends once, at
    /// `finish`, so a channel that cannot edit needs nothing.
    fn live(&self, out: Outbound) -> Box<dyn LiveReply + '_> {
        Box::new(SendAtFinish::new(self, out))
    }

    /// Shows that an answer is being prepared (typing indicator). The broker
    /// calls it when the model is asked and again every
    /// [`TYPING_REFRESH`] until the reply is sent; platforms without one
    /// ignore it.
    async fn typing(&self, _to: &Inbound) {}

    /// The bot's own user name on the platform (without `@`), once known, so
    /// `/session@otherbot` in a group is not taken as ours.
    fn bot_name(&self) -> Option<String> {
        None
    }

    /// Whether the platform is reachable right now, for the broker's
    /// readiness check. Channels with nothing remote report
    /// [`LinkStatus::LOCAL`].
    fn link(&self) -> LinkStatus {
        LinkStatus::LOCAL
    }

    /// The broker is done taking the message `msg_id` this channel handed
    /// over: it is stored durably (on Postgres: committed), or it was
    /// deliberately not kept and its sender told why (refused by access or
    /// a limit, a full queue), or it was a `/session` command that was
    /// answered. A channel that acknowledges deliveries to its platform
    /// only once they are safe (Telegram's webhook) acknowledges it now;
    /// the others ignore it.
    fn taken(&self, _msg_id: &str) {}

    /// The broker could not keep the message `msg_id` (the store failed, or
    /// it is shutting down and no longer takes messages): a channel whose
    /// platform delivers again what was not acknowledged (Telegram's
    /// webhook) refuses the delivery now, so it comes again, and says so
    /// (true): the broker then does not ask the user to send it again.
    fn not_taken(&self, _msg_id: &str) -> bool {
        false
    }

    /// One cheap authenticated call that sends nothing to anyone (Telegram
    /// `getMe`, Slack `auth.test`, Discord `gateway/bot`), for `mnemo config
    /// check --online`: who the platform says we are, or why it refused.
    async fn probe(&self) -> Result<String, ChannelError> {
        Ok("nothing remote to check".into())
    }

    /// Downloads one of an [`Inbound`]'s attachments: at most
    /// `limits.max_bytes` (a larger file is refused, declared or as it
    /// streams in, and the buffer never grows past the limit), giving up
    /// when no bytes come for `limits.stall`. A channel that cannot fetch
    /// files says so.
    async fn download(&self, _attachment: &Attachment, _limits: DownloadLimits) -> Result<Vec<u8>, DownloadError> {
        Err(DownloadError::Unsupported)
    }

    /// Whether `user_id` is one of the group `chat_id`'s admins, as the
    /// platform says (`/session clear group`): Telegram's owner and
    /// administrators, Slack's workspace admins and owners, Discord's
    /// members who may manage the server or its messages. Asked anew each
    /// time (rights change). A channel that cannot tell says so, an error,
    /// so what needs an admin is refused.
    async fn is_group_admin(&self, _chat_id: &str, _user_id: &str) -> Result<bool, ChannelError> {
        Err(ChannelError::Receive {
            channel: self.name().to_string(),
            reason: "this platform cannot tell who is a group admin".into(),
        })
    }
}
