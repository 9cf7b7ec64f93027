//! Streaming an answer to a channel while the model writes it (issue 17):
//! the model's deltas are read as fast as they come, and the channel's
//! [`LiveReply`] is shown the answer so far whenever its platform allows
//! the next edit. Reading and showing run side by side, so a slow or
//! rate-limited platform never stalls the model's stream: edits simply
//! carry more text each.
//!
//! Owns three rules: the typing indicator stops at the first text; the
//! answer stops at `limits.maxReplyChars` (the rest of the stream is
//! dropped and the answer cut visibly, as `reply_limit` does); a stream
//! that breaks after some text keeps that text, marked as cut. It never
//! touches memory and never finishes the live reply: the pipeline stores
//! the final text first, then finishes it.

use crate::model::{DeltaStream, ModelError};
use futures_util::StreamExt;
use mnemo_channels::LiveReply;
use tokio::sync::watch;
use tokio::time::Instant;

/// Appended to an answer the model stopped writing (an error or a timeout
/// mid-stream), so the stored reply and the chat both say it is not whole.
pub const CUT_BY_MODEL: &str = "\n\n[answer cut off here: the model stopped before finishing]";

/// What a streamed answer came to.
pub struct Streamed {
    /// The final text: what is stored and shown last.
    pub text: String,
    /// The error that ended the stream early, if one did (after some text).
    pub broken: Option<ModelError>,
    /// When the model's first text arrived and when the channel was first
    /// asked to show text, for the time-to-first-text measurement.
    pub first_delta: Option<Instant>,
    pub first_shown: Option<Instant>,
}

/// Reads `deltas` to the end (or to `max_chars`), showing the growing
/// answer through `live` meanwhile. `typing` (the indicator's guard) is
/// dropped at the first text. An error before any text comes back as
/// `Err`, as a failed call would.
pub async fn relay<T: Send>(
    deltas: DeltaStream,
    live: &mut dyn LiveReply,
    typing: T,
    max_chars: usize,
) -> Result<Streamed, ModelError> {
    let (tx, rx) = watch::channel(String::new());
    let read = read(deltas, tx, typing, max_chars);
    let show = show_while_growing(live, rx);
    let ((text, broken, first_delta), first_shown) = tokio::join!(read, show);
    let text = match broken {
        Some(e) if text.trim().is_empty() => return Err(e),
        Some(_) => format!("{}{CUT_BY_MODEL}", text.trim_end()),
        None => text,
    };
    Ok(Streamed {
        text: crate::reply_limit::cut(&text, max_chars).into_owned(),
        broken,
        first_delta,
        first_shown,
    })
}

/// Appends each delta to the shared text until the stream ends, breaks or
/// passes `max_chars`; drops `typing` at the first text. Dropping `tx` at
/// the end tells the shower the text is final.
async fn read<T>(
    mut deltas: DeltaStream,
    tx: watch::Sender<String>,
    typing: T,
    max_chars: usize,
) -> (String, Option<ModelError>, Option<Instant>) {
    let mut typing = Some(typing);
    let mut first = None;
    let mut chars = 0;
    let mut broken = None;
    while let Some(item) = deltas.next().await {
        match item {
            Ok(delta) => {
                first.get_or_insert_with(Instant::now);
                drop(typing.take());
                chars += delta.chars().count();
                tx.send_modify(|text| text.push_str(&delta));
                if chars > max_chars {
                    break;
                }
            }
            Err(e) => {
                broken = Some(e);
                break;
            }
        }
    }
    let text = tx.borrow().clone();
    (text, broken, first)
}

/// Shows the newest text whenever the live reply is ready for it; returns
/// once the text is final (the reader is done), with when it first showed
/// text.
async fn show_while_growing(live: &mut dyn LiveReply, mut rx: watch::Receiver<String>) -> Option<Instant> {
    let mut first_shown = None;
    while rx.changed().await.is_ok() {
        let at = live.ready_at();
        if at > Instant::now() {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = closed(&mut rx) => break,
            }
        }
        let text = rx.borrow_and_update().clone();
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
mod tests {
    use super::*;
    use async_trait::async_trait;
    use mnemo_channels::ChannelError;
    use std::time::Duration;

    /// A live reply that records what it was shown, ready every second.
    #[derive(Default)]
    struct Recorder {
        shown: Vec<String>,
        next: Option<Instant>,
    }

    #[async_trait]
    impl LiveReply for Recorder {
        fn ready_at(&self) -> Instant {
            self.next.unwrap_or_else(Instant::now)
        }
        async fn update(&mut self, text: &str) {
            self.shown.push(text.to_string());
            self.next = Some(Instant::now() + Duration::from_secs(1));
        }
        async fn finish(self: Box<Self>, _: &str) -> Result<(), ChannelError> {
            Ok(())
        }
    }

    fn slow(parts: Vec<Result<&'static str, ModelError>>, every: Duration) -> DeltaStream {
        futures_util::stream::iter(parts)
            .then(move |p| async move {
                tokio::time::sleep(every).await;
                p.map(str::to_string)
            })
            .boxed()
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_text_is_shown_at_once_and_later_text_at_the_platforms_pace() {
        let mut live = Recorder::default();
        let parts = (0..10).map(|_| Ok("ab ")).collect();
        let out = relay(slow(parts, Duration::from_millis(300)), &mut live, (), 1000)
            .await
            .unwrap();
        assert_eq!(out.text, "ab ".repeat(10));
        assert_eq!(live.shown[0], "ab ", "the first delta is shown alone");
        // 3 s of text at one update a second: the first, then about three.
        assert!(live.shown.len() <= 5, "{:?}", live.shown);
        assert!(live.shown.windows(2).all(|w| w[1].starts_with(&w[0])));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_broken_after_some_text_keeps_it_marked_as_cut() {
        let mut live = Recorder::default();
        let broken = ModelError::Timeout {
            after: Duration::from_secs(5),
        };
        let parts = vec![Ok("half of "), Ok("it "), Err(broken)];
        let out = relay(slow(parts, Duration::from_millis(10)), &mut live, (), 1000)
            .await
            .unwrap();
        assert_eq!(out.text, format!("half of it{CUT_BY_MODEL}"));
        assert!(matches!(out.broken, Some(ModelError::Timeout { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_broken_before_any_text_is_a_failed_call() {
        let mut live = Recorder::default();
        let parts = vec![Err(ModelError::Protocol { detail: "x".into() })];
        let out = relay(slow(parts, Duration::from_millis(10)), &mut live, (), 1000).await;
        assert!(matches!(out, Err(ModelError::Protocol { .. })));
        assert!(live.shown.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_past_the_reply_limit_stops_the_stream_and_is_cut_visibly() {
        let mut live = Recorder::default();
        let parts = (0..1000).map(|_| Ok("word ")).collect();
        let out = relay(slow(parts, Duration::from_millis(1)), &mut live, (), 200)
            .await
            .unwrap();
        assert!(out.text.chars().count() <= 200);
        assert!(out.text.ends_with("[answer cut here: it was longer than 200 characters]"));
    }
}
