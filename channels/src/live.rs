//! Live replies: an answer shown while the model is still writing it. The
//! broker opens a [`LiveReply`] with [`crate::Channel::live`], hands it the
//! whole answer so far with [`LiveReply::update`] no sooner than
//! [`LiveReply::ready_at`], and the final text once with
//! [`LiveReply::finish`]. A channel that cannot edit needs nothing: the
//! default, [`SendAtFinish`], sends the reply once at the end, as before.
//!
//! [`Growing`] is the one edit-in-place logic every editing platform shares:
//! it lays the text out with the one splitter, posts the first message,
//! edits it as the text grows (throttled to the platform's pace: one call
//! per interval, and a 429's wait, taken inside the platform's call, slows
//! the next one too), closes it at a clean boundary when the text outgrows
//! one message and continues in a new one. A platform only says how to post
//! and edit one rendered message ([`Editor`]). Intermediate edits may fail
//! (the next one carries the text); the final text is never lost: a final
//! edit that fails after the platform's own retries is posted again as a
//! new message. Knows nothing of memory or models; logs no message text.

use crate::format::{Chunk, Markup, to_chunks};
use crate::{Channel, ChannelError, Outbound, OutboundBody};
use async_trait::async_trait;
use std::time::Duration;
use tokio::time::Instant;

/// One reply that grows in place. Not shared: one turn drives it.
#[async_trait]
pub trait LiveReply: Send {
    /// When the next [`LiveReply::update`] may go out without breaking the
    /// platform's rate limits; the broker keeps newer text until then.
    fn ready_at(&self) -> Instant;

    /// Shows `text`, the whole answer so far (the model's markdown). A
    /// failure is logged and left to the next update or to `finish`.
    async fn update(&mut self, text: &str);

    /// Shows the final `text` and ends the reply. An error means the final
    /// text could not be delivered at all.
    async fn finish(self: Box<Self>, text: &str) -> Result<(), ChannelError>;
}

/// The reply of a channel that cannot edit: nothing until the end, then one
/// ordinary [`Channel::send`].
pub struct SendAtFinish<'c, C: ?Sized> {
    channel: &'c C,
    out: Outbound,
}

impl<'c, C: Channel + ?Sized> SendAtFinish<'c, C> {
    /// A reply to be sent as `out` (its text replaced at the end).
    pub fn new(channel: &'c C, out: Outbound) -> Self {
        SendAtFinish { channel, out }
    }
}

#[async_trait]
impl<C: Channel + ?Sized> LiveReply for SendAtFinish<'_, C> {
    fn ready_at(&self) -> Instant {
        // Never worth waking for: updates are ignored.
        Instant::now() + Duration::from_secs(3600)
    }

    async fn update(&mut self, _text: &str) {}

    async fn finish(self: Box<Self>, text: &str) -> Result<(), ChannelError> {
        let out = Outbound {
            body: OutboundBody::Text(text.to_string()),
            ..self.out
        };
        self.channel.send(out).await
    }
}

/// How one platform posts and edits a single rendered message. Both calls
/// use the platform's own retry policy (429 waits included), so a slow
/// platform slows the edits down rather than losing them.
#[async_trait]
pub trait Editor: Send + Sync {
    /// The platform's id of a posted message.
    type Id: Clone + Send + Sync;

    /// Posts `chunk` as a new message; `first` for the first message of the
    /// reply (which may quote the question). Falls back to `chunk.plain` if
    /// the platform refuses the markup.
    async fn post(&mut self, chunk: &Chunk, first: bool) -> Result<Self::Id, ChannelError>;

    /// Replaces the text of message `id` with `chunk`, falling back to
    /// `chunk.plain` if the platform refuses the markup.
    async fn edit(&mut self, id: &Self::Id, chunk: &Chunk) -> Result<(), ChannelError>;
}

/// Edit-in-place for any [`Editor`], laid out with markup `M`.
///
/// Every update lays the whole answer so far out with the one splitter
/// ([`to_chunks`], built on [`crate::format::Layout::next_chunk`]): the
/// reply's messages always show exactly what a one-shot send of the same
/// text would, so the final state equals today's reply. Message `i` shows
/// chunk `i`: a chunk whose markup did not change costs no call, a changed
/// one is an edit, a new one a post. A text that outgrew a message is so
/// closed at the splitter's clean boundary and continued in a new one.
pub struct Growing<M, E: Editor> {
    markup: M,
    editor: E,
    /// The least time between two platform calls (the platform's pace).
    interval: Duration,
    next_at: Instant,
    /// The messages posted so far, in order, with the markup each shows.
    posted: Vec<(E::Id, String)>,
    /// The last text shown and its messages: the final text is most often
    /// the last one streamed, and is not formatted again.
    shaped: Option<(String, Vec<Chunk>)>,
}

/// What a message the answer no longer needs is edited to (a reply that
/// shrank, e.g. a tool round's preamble replaced by a shorter answer).
const RETIRED: &str = "…";

impl<M: Markup + Send + Sync, E: Editor> Growing<M, E> {
    /// A reply that makes at most one platform call per `interval`.
    pub fn new(markup: M, editor: E, interval: Duration) -> Self {
        Growing {
            markup,
            editor,
            interval,
            next_at: Instant::now(),
            posted: Vec::new(),
            shaped: None,
        }
    }

    /// Brings the platform up to `text`. `last`: this is the final text, so
    /// a failed edit is posted again as a new message rather than lost, and
    /// messages beyond the text are retired.
    async fn show(&mut self, text: &str, last: bool) -> Result<(), ChannelError> {
        let chunks = match self.shaped.take() {
            Some((shaped, chunks)) if shaped == text => chunks,
            _ => to_chunks(&self.markup, text),
        };
        for (i, chunk) in chunks.iter().enumerate() {
            self.put(i, chunk, last).await?;
        }
        if last {
            let retired = Chunk {
                text: RETIRED.into(),
                plain: RETIRED.into(),
            };
            for i in chunks.len()..self.posted.len() {
                self.put(i, &retired, false).await?;
            }
        }
        self.shaped = Some((text.to_string(), chunks));
        Ok(())
    }

    /// Shows `chunk` in message `i` (posting it if there is none yet),
    /// each platform call one interval after the last one ended.
    async fn put(&mut self, i: usize, chunk: &Chunk, settled: bool) -> Result<(), ChannelError> {
        if let Some((id, shown)) = self.posted.get(i) {
            if *shown == chunk.text {
                return Ok(());
            }
            let id = id.clone();
            self.pace().await;
            let edited = self.editor.edit(&id, chunk).await;
            self.paced();
            match edited {
                Ok(()) => {
                    self.posted[i].1.clone_from(&chunk.text);
                    return Ok(());
                }
                Err(e) if settled => {
                    tracing::warn!(error = %e, "live reply: final edit failed; posting the text again");
                    self.pace().await;
                    let posted = self.editor.post(chunk, false).await;
                    self.paced();
                    let id = posted?;
                    self.posted[i] = (id, chunk.text.clone());
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(error = %e, "live reply: edit failed; the next one carries the text");
                    return Ok(());
                }
            }
        }
        self.pace().await;
        let posted = self.editor.post(chunk, i == 0).await;
        self.paced();
        self.posted.push((posted?, chunk.text.clone()));
        Ok(())
    }

    /// Waits until the platform may take the next call.
    async fn pace(&self) {
        tokio::time::sleep_until(self.next_at).await;
    }

    /// A call just ended: the next may go out one interval from now.
    fn paced(&mut self) {
        self.next_at = Instant::now() + self.interval;
    }
}

#[async_trait]
impl<M: Markup + Send + Sync, E: Editor> LiveReply for Growing<M, E> {
    fn ready_at(&self) -> Instant {
        self.next_at
    }

    async fn update(&mut self, text: &str) {
        if let Err(e) = self.show(text, false).await {
            tracing::debug!(error = %e, "live reply: update not shown; a later one will be");
        }
    }

    async fn finish(mut self: Box<Self>, text: &str) -> Result<(), ChannelError> {
        self.show(text, true).await
    }
}
