//! Streaming an answer to a channel while the model writes it (issue 17):
//! every round of the tool loop is streamed ([`Streamer`], a
//! [`tools::Ask`]), its text kept in a watch as it grows, and the channel's
//! [`LiveReply`] is shown the newest text whenever its platform allows the
//! next edit. Reading and showing run side by side, so a slow or
//! rate-limited platform never stalls the model's stream: edits simply
//! carry more text each.
//!
//! A fast answer is one message (issue 40): the first words wait a short
//! hold (`channels.<name>.streamHoldMs`) before they are shown, and an
//! answer the model finishes within it is never shown while growing: the
//! pipeline's `finish` sends it once, with no edit. A longer answer streams
//! as before, its first words the hold later.
//!
//! Owns four rules: the typing indicator stops at the first text; a round
//! that turns into tool calls is replaced on screen by the next round's
//! text (what is shown last is the answer, and only the answer is stored);
//! the answer stops at `limits.maxReplyChars` (the rest of the stream is
//! dropped and the answer cut visibly, at a word boundary that keeps all
//! that was shown: `reply_limit::cut_streamed`); a stream
//! that breaks after some text keeps that text, marked as cut. It never
//! touches memory and never finishes the live reply: the pipeline stores
//! the final text first, then finishes it.

use crate::model::tools::{self, Ask, ToolExecutor, ToolLimits};
use crate::model::{Model, ModelError, ModelReply, ModelRequest, StreamPart, Usage};
use async_trait::async_trait;
use futures_util::StreamExt;
use mnemo_channels::LiveReply;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Appended to an answer the model stopped writing (an error or a timeout
/// mid-stream), so the stored reply and the chat both say it is not whole.
pub const CUT_BY_MODEL: &str = "\n\n[answer cut off here: the model stopped before finishing]";

/// What a streamed answer came to.
#[derive(Debug)]
pub struct Streamed {
    /// The final text: what is stored and shown last.
    pub text: String,
    /// The first call's tokens (`answer`) and the later calls' (`tools`).
    pub usage: Option<Usage>,
    pub tool_usage: Option<Usage>,
    /// The error that ended the stream early, if one did (after some text).
    pub broken: Option<ModelError>,
    /// When the model's first text arrived, and when the channel was first
    /// asked to show it (or, for an answer finished within the hold, handed
    /// it whole): mnemo's added latency to the first token, the hold
    /// included.
    pub first_text: Option<Instant>,
    pub first_shown: Option<Instant>,
}

/// How a streamed answer is shown.
#[derive(Clone, Copy, Debug)]
pub struct Showing {
    /// `limits.maxReplyChars`: the answer is cut there.
    pub max_chars: usize,
    /// How long the first words wait: an answer finished within it is
    /// shown once, whole (`channels.<name>.streamHoldMs`).
    pub hold: Duration,
}

/// Answers `request` with the tool loop, every round streamed, showing the
/// growing answer through `live` meanwhile (its first words `showing.hold`
/// after they came, unless the answer is whole by then). `typing` (the
/// indicator's guard) is dropped at the first text. An error before any
/// text of a round comes back as `Err`, as a failed call would.
pub async fn answer<T: Send>(
    model: &dyn Model,
    request: ModelRequest,
    tools: Option<&dyn ToolExecutor>,
    limits: ToolLimits,
    live: &mut dyn LiveReply,
    typing: T,
    showing: Showing,
) -> Result<Streamed, ModelError> {
    let Showing { max_chars, hold } = showing;
    let (tx, rx) = watch::channel(String::new());
    let mut streamer = Streamer {
        tx,
        typing: Some(typing),
        max_chars,
        show_chars: crate::reply_limit::shown_while_streaming(max_chars),
        broken: None,
        first_text: None,
    };
    let read = async move {
        let reply = tools::answer_with(model, request, tools, limits, &mut streamer).await;
        // Dropping the streamer (and its sender) tells the shower the text is final.
        (reply, streamer.broken, streamer.first_text)
    };
    let ((reply, broken, first_text), first_shown) = tokio::join!(read, show_while_growing(live, rx, hold));
    let reply = reply?;
    let text = crate::reply_limit::cut_streamed(&reply.text, max_chars);
    let text = match &broken {
        Some(_) => format!("{}{CUT_BY_MODEL}", text.trim_end()),
        None => text.into_owned(),
    };
    Ok(Streamed {
        text,
        usage: reply.usage,
        tool_usage: reply.tool_usage,
        broken,
        first_text,
        first_shown,
    })
}

/// Streams each round, publishing the round's text so far.
struct Streamer<T> {
    tx: watch::Sender<String>,
    typing: Option<T>,
    max_chars: usize,
    /// Characters of a round shown at most until it ends: what a cut at
    /// `max_chars` keeps, so nothing shown is taken back.
    show_chars: usize,
    broken: Option<ModelError>,
    first_text: Option<Instant>,
}

#[async_trait]
impl<T: Send> Ask for Streamer<T> {
    async fn ask(&mut self, model: &dyn Model, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let mut parts = model.stream(request).await?;
        let mut reply = ModelReply {
            text: String::new(),
            usage: None,
            tool_calls: Vec::new(),
        };
        let mut chars = 0;
        while let Some(part) = parts.next().await {
            match part {
                Ok(StreamPart::Text(delta)) => {
                    self.first_text.get_or_insert_with(Instant::now);
                    drop(self.typing.take());
                    let fresh = reply.text.is_empty();
                    let room = self.show_chars.saturating_sub(chars);
                    chars += delta.chars().count();
                    reply.text.push_str(&delta);
                    // A new round's first text replaces the last round's.
                    self.tx.send_modify(|shown| {
                        if fresh {
                            shown.clear();
                        }
                        shown.extend(delta.chars().take(room));
                    });
                    if chars > self.max_chars {
                        // The rest would be cut anyway: stop reading, answer now.
                        reply.tool_calls.clear();
                        break;
                    }
                }
                Ok(StreamPart::Call(call)) => reply.tool_calls.push(call),
                Ok(StreamPart::Usage(usage)) => reply.usage = Some(usage),
                Err(e) if reply.text.trim().is_empty() => return Err(e),
                Err(e) => {
                    // Calls not yet whole are dropped: what came is the answer.
                    self.broken = Some(e);
                    reply.tool_calls.clear();
                    break;
                }
            }
        }
        Ok(reply)
    }
}

/// Shows the newest text whenever the live reply is ready for it, the
/// first words no sooner than `hold` after they came; returns once the
/// text is final (the reader is done), with when it first showed text (or
/// when the reader finished, if that came first: the final text is then
/// shown by `finish` alone).
async fn show_while_growing(
    live: &mut dyn LiveReply,
    mut rx: watch::Receiver<String>,
    hold: Duration,
) -> Option<Instant> {
    let mut first_shown = None;
    let mut due = None;
    while rx.changed().await.is_ok() {
        if rx.borrow_and_update().trim().is_empty() {
            continue;
        }
        let due = *due.get_or_insert_with(|| Instant::now() + hold);
        let at = live.ready_at().max(due);
        if at > Instant::now() {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = closed(&mut rx) => {
                    first_shown.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        let text = rx.borrow_and_update().clone();
        if text.trim().is_empty() {
            continue;
        }
        first_shown.get_or_insert_with(Instant::now);
        live.update(&text).await;
    }
    first_shown
}

/// Resolves once the reader has dropped its sender.
async fn closed(rx: &mut watch::Receiver<String>) {
    while rx.changed().await.is_ok() {}
}

#[cfg(test)]
#[path = "streaming_tests.rs"]
mod tests;
