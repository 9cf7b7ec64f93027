//! The files a message brings, at intake (after the access check, before
//! the message is stored): each is downloaded through its channel within
//! `limits.maxAttachmentBytes` and the stall timeout, then a voice note or
//! audio file is transcribed (the `transcription` block) into the turn's
//! text behind a marker (`[voice 0:42] …`, `[audio 3:10 talk.mp3] …`), a
//! photo is checked to be an image and kept for this turn's model call
//! only (`model.vision`), its stored trace the marker `[photo]`, and a
//! document goes to [`super::documents::take`]. Whatever fails gets a
//! short reply saying what happened; the message's own words are kept
//! and answered either way. Logs and metrics see kinds, sizes and
//! outcomes, never a file's content or a transcript.

use super::Pipeline;
use super::documents::{self, DocumentOutcome};
use crate::channel_memory::ChannelMemory;
use crate::documents::Bounds;
use crate::model::image::Image;
use crate::model::transcribe::{TranscribeError, Transcriber};
use mnemo_channels::{Attachment, AttachmentKind, Channel, DownloadError, DownloadLimits, Inbound};
use mnemo_sessions::SafeName;
use mnemo_sessions::documents::{clean_name, id_of};
use mnemo_sessions::kept::{KeptFile, KeptMeta};
use std::sync::Arc;
use std::time::Duration;

/// How the broker treats attachments, from the app config.
#[derive(Clone, Debug)]
pub struct AttachmentSettings {
    /// `limits.maxAttachmentBytes`.
    pub max_bytes: u64,
    /// `limits.attachmentStallSecs`.
    pub stall: Duration,
    /// `model.vision`: photos go to the model.
    pub vision: bool,
    /// The `transcription` block's client; `None`: voice is not set up.
    pub transcriber: Option<Arc<Transcriber>>,
    /// What reading one document may cost (`limits.maxDocumentPages`).
    pub documents: Bounds,
    /// `attachments.keep`: the files themselves are kept as the sender's.
    pub keep: bool,
}

impl Default for AttachmentSettings {
    fn default() -> Self {
        AttachmentSettings {
            max_bytes: crate::config::DEFAULT_MAX_ATTACHMENT_BYTES,
            stall: Duration::from_secs(30),
            vision: false,
            transcriber: None,
            documents: Bounds {
                max_pages: 300,
                max_inflated: Bounds::MAX_INFLATED,
            },
            keep: false,
        }
    }
}

pub const VOICE_NOT_SET_UP: &str =
    "I can't listen to voice messages here: transcription is not set up. Please type your message instead.";
pub const NO_VISION: &str = "I can't see images with the model I use here, so I only got your words, not the picture.";
pub const NOT_AN_IMAGE: &str =
    "That photo's file is not an image I can read (JPEG, PNG, GIF or WebP), so I didn't look at it.";
pub const TRANSCRIPTION_FAILED: &str = "I couldn't transcribe your voice message just now";
pub const NOTHING_HEARD: &str = "I couldn't make out any words in your voice message.";

pub const NOT_KEPT_FILE: &str =
    "I took what your file says, but could not keep the file itself because of a storage problem on my side.";

/// Keeps the file `data` of `attachment` as the sender's
/// (`attachments.keep`); a failure is told, the turn goes on.
async fn keep_file(
    memory: &ChannelMemory,
    user: &SafeName,
    message: &Inbound,
    attachment: &Attachment,
    data: Vec<u8>,
    prepared: &mut Prepared,
) {
    let kind = attachment.kind.as_str();
    let file = KeptFile {
        meta: KeptMeta {
            id: id_of(&data),
            name: clean_name(attachment.name.as_deref().unwrap_or(kind)),
            kind: kind.to_string(),
            mime: attachment.mime.clone(),
            bytes: data.len() as u64,
            added: message.ts,
        },
        data,
    };
    let kept = match memory.store.user(user).await {
        Ok(mut mine) => mine.keep_file(&file).await,
        Err(e) => Err(e),
    };
    if let Err(e) = kept {
        tracing::warn!(user = %user.log_id(), kind, error = %e, "attachment not kept");
        prepared.notes.push(NOT_KEPT_FILE.into());
    }
}

/// What a message's files made of it.
#[derive(Debug, Default)]
pub(super) struct Prepared {
    /// The turn's text: markers (with transcripts) and the caption.
    pub text: String,
    /// Photos for this turn's model call.
    pub images: Vec<Image>,
    /// Replies saying what could not be taken, in order.
    pub notes: Vec<String>,
}

/// One file's contribution to the turn's text.
struct Piece {
    text: String,
    /// A marker alone (`[photo]`): the caption follows on the same line.
    bare: bool,
}

impl Pipeline {
    /// Takes `message`'s files: the turn's text, the photos for its model
    /// call, and the notes to send.
    pub(super) async fn take_attachments(
        &self,
        memory: &ChannelMemory,
        user: &SafeName,
        message: &Inbound,
    ) -> Prepared {
        let mut prepared = Prepared::default();
        let Some(channel) = self.channels.get(&message.channel).cloned() else {
            prepared.text = message.text.clone();
            return prepared;
        };
        let mut pieces = Vec::new();
        for attachment in &message.attachments {
            let (outcome, piece) = self
                .take_one(&*channel, memory, user, message, attachment, &mut prepared)
                .await;
            let kind = attachment.kind.as_str();
            crate::ops::metrics::metrics().attachment(&message.channel, kind, outcome);
            tracing::info!(channel = %message.channel, msg_id = %message.msg_id, kind, declared_bytes = attachment.size, outcome, "attachment");
            pieces.extend(piece);
        }
        prepared.text = join(pieces, message.text.trim());
        prepared
    }

    /// One file: its outcome label and its piece of the text, if any.
    async fn take_one(
        &self,
        channel: &dyn Channel,
        memory: &ChannelMemory,
        user: &SafeName,
        message: &Inbound,
        attachment: &Attachment,
        prepared: &mut Prepared,
    ) -> (&'static str, Option<Piece>) {
        let settings = &self.parts.attachments;
        let what = attachment.kind.as_str();
        let transcriber = match attachment.kind {
            AttachmentKind::Voice | AttachmentKind::Audio => match &settings.transcriber {
                Some(t) => Some(t.clone()),
                None => {
                    prepared.notes.push(VOICE_NOT_SET_UP.into());
                    return ("not_set_up", None);
                }
            },
            AttachmentKind::Photo if !settings.vision => {
                prepared.notes.push(NO_VISION.into());
                return ("no_vision", None);
            }
            _ => None,
        };
        let limits = DownloadLimits {
            max_bytes: settings.max_bytes,
            stall: settings.stall,
        };
        let bytes = match channel.download(attachment, limits).await {
            Ok(bytes) => bytes,
            Err(e) => {
                prepared.notes.push(download_note(what, &e));
                return (download_outcome(&e), None);
            }
        };
        tracing::debug!(channel = %message.channel, kind = what, bytes = bytes.len(), "attachment downloaded");
        let copy = settings.keep.then(|| bytes.clone());
        let (outcome, piece) = match attachment.kind {
            AttachmentKind::Voice | AttachmentKind::Audio => {
                let Some(transcriber) = transcriber else {
                    return ("not_set_up", None);
                };
                self.transcribed(&transcriber, attachment, &bytes, prepared).await
            }
            AttachmentKind::Photo => match Image::from_bytes(&bytes) {
                Some(image) => {
                    prepared.images.push(image);
                    (
                        "seen",
                        Some(Piece {
                            text: "[photo]".into(),
                            bare: true,
                        }),
                    )
                }
                None => {
                    prepared.notes.push(NOT_AN_IMAGE.into());
                    ("not_an_image", None)
                }
            },
            AttachmentKind::Document => {
                let name = attachment.name.as_deref().unwrap_or("document");
                let bounds = settings.documents;
                match documents::take(memory, user, message, name, attachment.mime.as_deref(), bytes, bounds).await {
                    DocumentOutcome::Stored { marker } => (
                        "stored",
                        Some(Piece {
                            text: marker,
                            bare: true,
                        }),
                    ),
                    DocumentOutcome::Refused { reply } => {
                        prepared.notes.push(reply);
                        ("refused", None)
                    }
                }
            }
        };
        // Only a file whose content was taken is kept.
        if let (Some(data), Some(_)) = (copy, &piece) {
            keep_file(memory, user, message, attachment, data, prepared).await;
        }
        (outcome, piece)
    }

    /// A voice note or audio file as text behind its marker.
    async fn transcribed(
        &self,
        transcriber: &Transcriber,
        attachment: &Attachment,
        bytes: &[u8],
        prepared: &mut Prepared,
    ) -> (&'static str, Option<Piece>) {
        let voice = attachment.kind == AttachmentKind::Voice;
        let name = attachment
            .name
            .clone()
            .unwrap_or_else(|| if voice { "voice.ogg" } else { "audio.mp3" }.into());
        let mime = attachment.mime.as_deref().unwrap_or("application/octet-stream");
        match transcriber.transcribe(bytes, &name, mime).await {
            Ok(text) if text.trim().is_empty() => {
                prepared.notes.push(NOTHING_HEARD.into());
                ("empty", None)
            }
            Ok(text) => {
                let text: String = text.chars().take(self.parts.limits.max_message_chars).collect();
                (
                    "transcribed",
                    Some(Piece {
                        text: format!("{} {text}", marker(attachment)),
                        bare: false,
                    }),
                )
            }
            Err(e) => {
                prepared.notes.push(transcription_note(&e));
                ("transcription_failed", None)
            }
        }
    }
}

/// `[voice 0:42]`, `[audio 3:10 talk.mp3]`: the kind, the length if known,
/// an audio file's name.
pub fn marker(attachment: &Attachment) -> String {
    let mut parts = vec![attachment.kind.as_str().to_string()];
    if let Some(secs) = attachment.duration_secs {
        parts.push(format!("{}:{:02}", secs / 60, secs % 60));
    }
    if attachment.kind == AttachmentKind::Audio
        && let Some(name) = &attachment.name
    {
        parts.push(name.replace(['[', ']', '\n'], " ").trim().to_string());
    }
    format!("[{}]", parts.join(" "))
}

/// The pieces, then the caption: after a bare marker on the same line,
/// after a transcript on a line of its own.
fn join(pieces: Vec<Piece>, caption: &str) -> String {
    let last_bare = pieces.last().is_some_and(|p| p.bare);
    let mut text = pieces.into_iter().map(|p| p.text).collect::<Vec<_>>().join("\n");
    match (text.is_empty(), caption.is_empty()) {
        (true, _) => caption.to_string(),
        (false, true) => text,
        (false, false) => {
            text.push(if last_bare { ' ' } else { '\n' });
            text.push_str(caption);
            text
        }
    }
}

fn download_outcome(e: &DownloadError) -> &'static str {
    match e {
        DownloadError::TooLarge { .. } => "too_large",
        DownloadError::Stalled(_) => "stalled",
        DownloadError::Failed(_) | DownloadError::Unsupported => "download_failed",
    }
}

/// What the sender is told when their file could not be fetched.
pub fn download_note(what: &str, e: &DownloadError) -> String {
    match e {
        DownloadError::TooLarge { limit } => format!(
            "Your {what} is too large for me (the limit is {}), so I didn't take it.",
            human_bytes(*limit)
        ),
        DownloadError::Stalled(_) => {
            format!("Downloading your {what} stalled, so I didn't take it. Please send it again.")
        }
        DownloadError::Failed(_) => {
            format!("I couldn't download your {what}, so I didn't take it. Please send it again.")
        }
        DownloadError::Unsupported => format!("I can't fetch files on this channel, so I didn't take your {what}."),
    }
}

fn transcription_note(e: &TranscribeError) -> String {
    let why = match e {
        TranscribeError::Timeout(_) => "(the transcription service took too long)",
        TranscribeError::Connect => "(the transcription service could not be reached)",
        TranscribeError::Status(_) | TranscribeError::Unreadable => "(the transcription service refused it)",
    };
    format!("{TRANSCRIPTION_FAILED} {why}. Please try again, or type it.")
}

/// `20 MB`, `512 KB`, `900 bytes`.
fn human_bytes(n: u64) -> String {
    const MB: u64 = 1024 * 1024;
    match n {
        n if n >= MB && n % MB == 0 => format!("{} MB", n / MB),
        n if n >= MB => format!("{:.1} MB", n as f64 / MB as f64),
        n if n >= 1024 => format!("{} KB", n / 1024),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(kind: AttachmentKind, name: Option<&str>, secs: Option<u32>) -> Attachment {
        Attachment {
            kind,
            name: name.map(str::to_string),
            mime: None,
            size: None,
            duration_secs: secs,
            source: String::new(),
        }
    }

    #[test]
    fn markers_say_the_kind_the_length_and_an_audio_files_name() {
        assert_eq!(
            marker(&attachment(AttachmentKind::Voice, None, Some(42))),
            "[voice 0:42]"
        );
        assert_eq!(
            marker(&attachment(AttachmentKind::Audio, Some("talk.mp3"), Some(190))),
            "[audio 3:10 talk.mp3]"
        );
        assert_eq!(
            marker(&attachment(AttachmentKind::Voice, Some("v.ogg"), None)),
            "[voice]"
        );
    }

    #[test]
    fn the_caption_follows_a_bare_marker_on_its_line_and_a_transcript_below() {
        let bare = || Piece {
            text: "[photo]".into(),
            bare: true,
        };
        let said = || Piece {
            text: "[voice 0:03] hello".into(),
            bare: false,
        };
        assert_eq!(join(vec![bare()], "what is this?"), "[photo] what is this?");
        assert_eq!(join(vec![bare()], ""), "[photo]");
        assert_eq!(join(vec![said()], "note"), "[voice 0:03] hello\nnote");
        assert_eq!(join(vec![], "just words"), "just words");
        assert_eq!(join(vec![said(), bare()], ""), "[voice 0:03] hello\n[photo]");
    }

    #[test]
    fn download_failures_are_told_in_plain_words() {
        let too_large = download_note(
            "photo",
            &DownloadError::TooLarge {
                limit: 20 * 1024 * 1024,
            },
        );
        assert_eq!(
            too_large,
            "Your photo is too large for me (the limit is 20 MB), so I didn't take it."
        );
        assert!(download_note("voice", &DownloadError::Stalled(Duration::from_secs(3))).contains("stalled"));
        assert_eq!(human_bytes(1500), "1 KB");
        assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MB");
    }
}
