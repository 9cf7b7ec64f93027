//! Documents sent with a message (text, Markdown, CSV, JSON, PDF) becoming
//! memory. This version only refuses: the documents side of issue 36
//! (extraction, document records in both stores, recall of them) replaces
//! [`take`] with the real thing, behind the same signature.

use crate::channel_memory::ChannelMemory;
use mnemo_channels::Inbound;
use mnemo_sessions::SafeName;

/// What became of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DocumentOutcome {
    /// Kept as the user's document; `marker` stands for it in the stored
    /// message (e.g. `[document lease.pdf, 12 pages]`).
    Stored { marker: String },
    /// Not kept; `reply` tells the sender why (the message's own words are
    /// still answered).
    Refused { reply: String },
}

/// Said while documents cannot be read.
pub const NO_DOCUMENTS: &str = "I can't read documents yet.";

/// Takes the document `name` (declared type `mime`, its downloaded
/// `bytes`, within `limits.maxAttachmentBytes`) that `message` from `user`
/// brought on the channel whose memory is `memory`. Called at intake,
/// after the access check and before the message is stored, so the marker
/// is part of the stored message.
pub async fn take(
    memory: &ChannelMemory,
    user: &SafeName,
    message: &Inbound,
    name: &str,
    mime: Option<&str>,
    bytes: Vec<u8>,
) -> DocumentOutcome {
    let _ = (memory, user, message, name, mime, bytes);
    DocumentOutcome::Refused {
        reply: NO_DOCUMENTS.into(),
    }
}
