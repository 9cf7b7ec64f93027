//! The console channel: `mnemo chat` on stdin/stdout, as the local OS user.
//! One line in is one message; each reply is printed as it comes, and a
//! streamed answer word by word as the model writes it. Input is
//! read as bytes and decoded lossily, so a line that is not UTF-8 is still
//! answered (its bad bytes shown as `�`) and the lines after it still run.
//! On a terminal it greets with a banner (what it talks to, where memory
//! lives, `/session help`), shows "thinking…" while the model works, and
//! prints no new prompt once it is stopping. Works the same when stdin is a
//! pipe (for scripts and tests): no banner, prompt or indicator then, and
//! end of input ends the channel cleanly.

use crate::{
    Attachment, AttachmentKind, Channel, ChannelError, ChatKind, Inbound, LiveReply, Outbound, OutboundBody, Shutdown,
};
use async_trait::async_trait;
use chrono::Utc;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, mpsc};

/// The console has no real limit; long replies still come in readable pieces.
const CONSOLE_MAX_CHARS: usize = 100_000;

/// Shown while the model works; erased (`\r` + clear line) by the answer.
const THINKING: &str = "thinking…";
const ERASE_LINE: &str = "\r\x1b[K";

pub struct ConsoleChannel {
    user_id: String,
    interactive: bool,
    /// Serialises writes so a reply and a prompt never interleave mid-line.
    out: Mutex<tokio::io::Stdout>,
    /// Makes message ids unique within a run; the start time makes them
    /// unique across runs.
    seq: AtomicU64,
    started_ms: i64,
    /// Printed once when receiving starts, on a terminal only.
    banner: Option<String>,
    /// Set when the broker shuts down: no fresh prompt after the last answer.
    closing: AtomicBool,
    /// "thinking…" is on screen and must be erased before the next write.
    thinking: AtomicBool,
}

impl ConsoleChannel {
    /// `user_id` is the local OS user the conversation belongs to.
    pub fn new(user_id: impl Into<String>) -> Self {
        ConsoleChannel {
            user_id: user_id.into(),
            interactive: std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
            out: Mutex::new(tokio::io::stdout()),
            seq: AtomicU64::new(0),
            started_ms: Utc::now().timestamp_millis(),
            banner: None,
            closing: AtomicBool::new(false),
            thinking: AtomicBool::new(false),
        }
    }

    /// Greets an interactive user with `banner` (ignored on a pipe).
    pub fn with_banner(mut self, banner: impl Into<String>) -> Self {
        self.banner = Some(banner.into());
        self
    }

    /// The console user: `$USER`, else `$LOGNAME`, else `local`, looked up
    /// in `env` (the broker's one reader of the environment).
    pub fn local_user(env: &dyn Fn(&str) -> Option<String>) -> String {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| env(v).filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| "local".to_string())
    }

    async fn write(&self, text: &str) -> std::io::Result<()> {
        let mut out = self.out.lock().await;
        if self.thinking.swap(false, Ordering::SeqCst) {
            out.write_all(ERASE_LINE.as_bytes()).await?;
        }
        out.write_all(text.as_bytes()).await?;
        out.flush().await
    }

    async fn prompt(&self) {
        if self.interactive && !self.closing.load(Ordering::SeqCst) {
            // A failed prompt write is not worth stopping the chat for.
            let _ = self.write("> ").await;
        }
    }

    fn inbound(&self, text: String) -> Inbound {
        let (text, attachments) = match attach_command(&text) {
            Some((attachment, words)) => (words, vec![attachment]),
            None => (help_as_session_help(text), Vec::new()),
        };
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        Inbound {
            channel: "console".to_string(),
            user_id: self.user_id.clone(),
            user_name: Some(self.user_id.clone()),
            chat_id: "console".to_string(),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: format!("console-{}-{n}", self.started_ms),
            text,
            ts: Utc::now(),
            addressed: true,
            interaction: None,
            attachments,
        }
    }
}

/// `/attach PATH [words]` (a path with spaces in double quotes): the file
/// as an attachment, the words as the message. Its kind and type come from
/// the file's extension; the broker checks a photo's bytes itself.
fn attach_command(line: &str) -> Option<(Attachment, String)> {
    let rest = line.trim().strip_prefix("/attach")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    let (path, words) = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split_once('"')?,
        None => rest.split_once(char::is_whitespace).unwrap_or((rest, "")),
    };
    if path.is_empty() {
        return None;
    }
    let name = std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let extension = name
        .as_deref()
        .and_then(|n| n.rsplit_once('.'))
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let (kind, mime) = match extension.as_str() {
        "ogg" | "oga" | "opus" => (AttachmentKind::Voice, "audio/ogg"),
        "mp3" => (AttachmentKind::Audio, "audio/mpeg"),
        "m4a" => (AttachmentKind::Audio, "audio/mp4"),
        "wav" => (AttachmentKind::Audio, "audio/wav"),
        "webm" => (AttachmentKind::Audio, "audio/webm"),
        "flac" => (AttachmentKind::Audio, "audio/flac"),
        "png" => (AttachmentKind::Photo, "image/png"),
        "jpg" | "jpeg" => (AttachmentKind::Photo, "image/jpeg"),
        "gif" => (AttachmentKind::Photo, "image/gif"),
        "webp" => (AttachmentKind::Photo, "image/webp"),
        "pdf" => (AttachmentKind::Document, "application/pdf"),
        "md" | "markdown" => (AttachmentKind::Document, "text/markdown"),
        "csv" => (AttachmentKind::Document, "text/csv"),
        "json" => (AttachmentKind::Document, "application/json"),
        "txt" => (AttachmentKind::Document, "text/plain"),
        _ => (AttachmentKind::Document, "application/octet-stream"),
    };
    let attachment = Attachment {
        kind,
        name,
        mime: Some(mime.to_string()),
        size: std::fs::metadata(path).ok().map(|m| m.len()),
        duration_secs: None,
        source: path.to_string(),
    };
    Some((attachment, words.trim().to_string()))
}

#[async_trait]
impl Channel for ConsoleChannel {
    fn name(&self) -> &str {
        "console"
    }

    fn max_message_chars(&self) -> usize {
        CONSOLE_MAX_CHARS
    }

    /// `/attach PATH`: the local file, read within the limit.
    async fn download(
        &self,
        attachment: &Attachment,
        limits: crate::DownloadLimits,
    ) -> Result<Vec<u8>, crate::DownloadError> {
        crate::download::read_file(std::path::Path::new(&attachment.source), limits).await
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let mut input = BufReader::new(tokio::io::stdin());
        if let Some(banner) = self.banner.as_deref().filter(|_| self.interactive) {
            // A failed banner write is not worth stopping the chat for.
            let _ = self.write(&format!("{banner}\n\n")).await;
        }
        self.prompt().await;
        let mut bytes = Vec::new();
        loop {
            bytes.clear();
            let read = tokio::select! {
                read = input.read_until(b'\n', &mut bytes) => read,
                _ = shutdown.changed() => {
                    self.closing.store(true, Ordering::SeqCst);
                    return Ok(());
                }
            };
            let read = read.map_err(|e| ChannelError::Receive {
                channel: "console".into(),
                reason: format!("could not read stdin: {e}"),
            })?;
            if read == 0 {
                return Ok(());
            }
            let line = decode_line(&bytes);
            if line.trim().is_empty() {
                self.prompt().await;
                continue;
            }
            inbox
                .send(self.inbound(line))
                .await
                .map_err(|_| ChannelError::InboxClosed {
                    channel: "console".into(),
                })?;
        }
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        let text = match out.body {
            OutboundBody::Text(text) => text,
            OutboundBody::File { path, caption } => format!("{caption}\n{}", path.display()),
        };
        self.write(&format!("{text}{}", self.reply_end()))
            .await
            .map_err(send_error)
    }

    /// Prints the answer's text as it comes (no pace: a terminal takes it).
    fn live(&self, _out: Outbound) -> Box<dyn LiveReply + '_> {
        Box::new(Printing {
            console: self,
            printed: String::new(),
        })
    }

    /// "thinking…" on a terminal, erased by whatever is written next.
    async fn typing(&self, _to: &Inbound) {
        if self.interactive && !self.thinking.load(Ordering::SeqCst) {
            let mut out = self.out.lock().await;
            // Marked before writing: the broker may cancel this call at any
            // await once the answer is ready, and the next write must still
            // erase whatever part of the indicator got out.
            self.thinking.store(true, Ordering::SeqCst);
            let _ = out.write_all(THINKING.as_bytes()).await;
            let _ = out.flush().await;
        }
    }
}

fn send_error(e: std::io::Error) -> ChannelError {
    ChannelError::Send {
        channel: "console".into(),
        target: "stdout".into(),
        reason: e.to_string(),
    }
}

impl ConsoleChannel {
    /// What follows a whole reply: a blank line and a fresh prompt on a
    /// terminal that is not closing, else one line break.
    fn reply_end(&self) -> &'static str {
        if self.interactive && !self.closing.load(Ordering::SeqCst) {
            "\n\n> "
        } else {
            "\n"
        }
    }
}

/// A console answer printed as the model writes it: each update prints
/// only what was not printed yet. A text that does not continue what is
/// printed (a tool round's words replaced by the answer) starts on a new
/// line; a terminal cannot take words back.
struct Printing<'c> {
    console: &'c ConsoleChannel,
    printed: String,
}

impl Printing<'_> {
    /// Prints `text` (only what is new); until the end, only up to its last
    /// whole word, so a cut answer never takes back half a word.
    async fn print(&mut self, text: &str, last: bool) -> std::io::Result<()> {
        let text = match text.rfind(char::is_whitespace) {
            Some(at) if !last => text[..at].trim_end(),
            None if !last => "",
            _ => text,
        };
        let new = match text.strip_prefix(self.printed.as_str()) {
            Some(rest) => rest.to_string(),
            None if self.printed.is_empty() => text.to_string(),
            None => format!("\n{text}"),
        };
        self.printed = text.to_string();
        if new.is_empty() {
            return Ok(());
        }
        self.console.write(&new).await
    }
}

#[async_trait]
impl LiveReply for Printing<'_> {
    fn ready_at(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }

    async fn update(&mut self, text: &str) {
        if let Err(e) = self.print(text, false).await {
            tracing::debug!(error = %e, "console: could not print the answer so far");
        }
    }

    async fn finish(mut self: Box<Self>, text: &str) -> Result<(), ChannelError> {
        self.print(text, true).await.map_err(send_error)?;
        self.console.write(self.console.reply_end()).await.map_err(send_error)
    }
}

/// One line of input without its line ending, invalid UTF-8 replaced by `�`.
fn decode_line(bytes: &[u8]) -> String {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

/// `/help` (what people type in any chat program) is the broker's
/// `/session help`, as Telegram's `/help` is: answered by mnemo, never
/// sent to the model.
fn help_as_session_help(text: String) -> String {
    if text.trim().eq_ignore_ascii_case("/help") {
        "/session help".to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_takes_a_path_its_words_and_guesses_the_kind_from_the_extension() {
        let (a, words) = attach_command("/attach /tmp/note.ogg remind me of this").unwrap();
        assert_eq!(
            (a.kind, a.source.as_str(), a.name.as_deref()),
            (AttachmentKind::Voice, "/tmp/note.ogg", Some("note.ogg"))
        );
        assert_eq!(words, "remind me of this");
        let (a, words) = attach_command("/attach \"/tmp/my cat.JPG\"").unwrap();
        assert_eq!(
            (a.kind, a.mime.as_deref(), a.source.as_str()),
            (AttachmentKind::Photo, Some("image/jpeg"), "/tmp/my cat.JPG")
        );
        assert_eq!(words, "");
        assert_eq!(
            attach_command("/attach lease.pdf").unwrap().0.kind,
            AttachmentKind::Document
        );
        assert_eq!(
            attach_command("/attach talk.mp3").unwrap().0.kind,
            AttachmentKind::Audio
        );
        assert!(attach_command("/attach").is_none());
        assert!(attach_command("/attachment x").is_none());
        assert!(attach_command("please /attach x").is_none());
    }

    #[test]
    fn help_is_the_brokers_help_and_other_text_is_kept() {
        for text in ["/help", " /HELP "] {
            assert_eq!(help_as_session_help(text.to_string()), "/session help");
        }
        for text in ["/help me write a poem", "help", "/helpful"] {
            assert_eq!(help_as_session_help(text.to_string()), text);
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_decoded_lossily_without_its_line_ending() {
        assert_eq!(decode_line(b"caf\xe9 ok\r\n"), "caf\u{fffd} ok");
        assert_eq!(decode_line(b"last"), "last");
    }
}
