//! Documents sent with a message (text, Markdown, CSV, JSON, PDF) becoming
//! memory: the text is taken out ([`crate::documents::extract`], on the
//! blocking pool, under [`EXTRACT_TIMEOUT`]) and kept through the store
//! seam as the user's document ([`UserMemory::add_document`]), which
//! recall and search find from then on. The stored message holds only a
//! marker (`[document lease.pdf, 12 pages]`); the text lives in the
//! document. Nothing of the content is logged.

use crate::channel_memory::ChannelMemory;
use crate::documents::{Bounds, Refusal, extract};
use mnemo_channels::Inbound;
use mnemo_sessions::SafeName;
use mnemo_sessions::documents::{Document, DocumentMeta, clean_name, id_of};
use std::time::Duration;

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

/// Longest a document's text may take to come out: a parser stuck on a
/// hostile file must not hold the user's turn.
pub const EXTRACT_TIMEOUT: Duration = Duration::from_secs(60);

pub const TOO_SLOW: &str =
    "That document took too long to read, so I gave up on it. Send a smaller file, or the part that matters.";
pub const NOT_KEPT: &str = "I read that document but could not keep it because of a storage problem on my side. \
The operator can see the details in the log.";

/// Takes the document `name` (declared type `mime`, its downloaded
/// `bytes`, within `limits.maxAttachmentBytes`) that `message` from `user`
/// brought on the channel whose memory is `memory`, within `bounds`.
/// Called at intake, after the access check and before the message is
/// stored, so the marker is part of the stored message.
pub async fn take(
    memory: &ChannelMemory,
    user: &SafeName,
    message: &Inbound,
    name: &str,
    mime: Option<&str>,
    bytes: Vec<u8>,
    bounds: Bounds,
) -> DocumentOutcome {
    let name = clean_name(name);
    let size = bytes.len() as u64;
    let (shown, declared) = (name.clone(), mime.map(str::to_string));
    let work = tokio::task::spawn_blocking(move || {
        let id = id_of(&bytes);
        extract(&shown, declared.as_deref(), &bytes, bounds).map(|e| (id, e))
    });
    let (id, extracted) = match tokio::time::timeout(EXTRACT_TIMEOUT, work).await {
        Ok(Ok(Ok(done))) => done,
        Ok(Ok(Err(refusal))) => {
            tracing::info!(user = %user.log_id(), bytes = size, refusal = refusal.kind(), "document refused");
            return DocumentOutcome::Refused {
                reply: refusal.to_string(),
            };
        }
        Ok(Err(e)) => {
            tracing::warn!(user = %user.log_id(), bytes = size, error = %e, "document extraction failed");
            return DocumentOutcome::Refused {
                reply: Refusal::Corrupt.to_string(),
            };
        }
        Err(_) => {
            tracing::warn!(user = %user.log_id(), bytes = size, "document extraction timed out");
            return DocumentOutcome::Refused { reply: TOO_SLOW.into() };
        }
    };
    let doc = Document {
        meta: DocumentMeta {
            id,
            name: name.clone(),
            kind: extracted.kind,
            pages: extracted.pages,
            added: message.ts,
            bytes: size,
            chars: extracted.text.chars().count(),
        },
        text: extracted.text,
    };
    let kept = match memory.store.user(user).await {
        Ok(mut mine) => mine.add_document(&doc).await,
        Err(e) => Err(e),
    };
    match kept {
        Ok(new) => {
            tracing::info!(user = %user.log_id(), bytes = size, kind = doc.meta.kind.as_str(), new, "document kept");
            DocumentOutcome::Stored {
                marker: marker(&doc.meta),
            }
        }
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "document not kept");
            DocumentOutcome::Refused { reply: NOT_KEPT.into() }
        }
    }
}

/// `[document lease.pdf, 12 pages]`: what the stored message says of it.
pub fn marker(meta: &DocumentMeta) -> String {
    match meta.pages {
        Some(1) => format!("[document {}, 1 page]", meta.name),
        Some(n) => format!("[document {}, {n} pages]", meta.name),
        None => format!("[document {}]", meta.name),
    }
}
