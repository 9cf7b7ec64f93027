//! Live replies: an answer shown while the model is still writing it. The
//! broker opens a [`LiveReply`] with [`crate::Channel::live`], hands it the
//! whole answer so far with [`LiveReply::update`] no sooner than
//! [`LiveReply::ready_at`], and the final text once with
//! [`LiveReply::finish`]. A channel that cannot edit needs nothing: the
//! default, [`SendAtFinish`], sends the reply once at the end, as before.
//!
//! [`Growing`] is the one edit-in-place logic every editing platform shares:
//! it lays the text out with the one splitter ([`Layout::next_chunk`]),
//! posts the first message, edits it as the text grows (throttled to the
//! platform's pace), closes it at a clean boundary when the text outgrows
//! one message and continues in a new one. A platform only says how to post
//! and edit one rendered message ([`Editor`]). Intermediate edits may fail
//! (the next one carries the text); the final text never is: a final edit
//! that fails after the platform's own retries is posted again as a new
//! message. Knows nothing of memory or models; logs no message text.

use crate::format::{Chunk, Doc, Layout, Markup};
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
pub struct Growing<M, E: Editor> {
    markup: M,
    editor: E,
    /// The least time between two updates (the platform's pace).
    interval: Duration,
    next_at: Instant,
    /// Where, in the laid-out answer, the open message starts.
    start: usize,
    /// The open message and the markup it shows now.
    open: Option<(E::Id, String)>,
    /// Messages posted so far.
    posted: usize,
}

impl<M: Markup + Copy + Send + Sync, E: Editor> Growing<M, E> {
    /// A reply that edits at most once per `interval`.
    pub fn new(markup: M, editor: E, interval: Duration) -> Self {
        Growing {
            markup,
            editor,
            interval,
            next_at: Instant::now(),
            start: 0,
            open: None,
            posted: 0,
        }
    }

    /// Brings the platform up to `text`: every message the text has
    /// outgrown is closed (its final form shown), the open one edited or
    /// posted. `last`: this is the final text, so every message is final.
    async fn show(&mut self, text: &str, last: bool) -> Result<(), ChannelError> {
        let markup = self.markup;
        let doc = Doc::parse(text);
        let layout = Layout::new(&markup, &doc);
        let limit = markup.max_units();
        while let Some((chunk, next)) = layout.next_chunk(self.start, limit) {
            let closed = next < layout.len();
            self.put(&chunk, closed || last).await?;
            if !closed {
                break;
            }
            self.open = None;
            self.start = next;
        }
        Ok(())
    }

    /// Shows `chunk` in the open message (posting one if none is open).
    /// A `settled` chunk is that message's final form: if the edit fails,
    /// the chunk is posted again as a new message rather than lost.
    async fn put(&mut self, chunk: &Chunk, settled: bool) -> Result<(), ChannelError> {
        let edited = match &self.open {
            Some((_, shown)) if *shown == chunk.text => return Ok(()),
            Some((id, _)) => {
                let id = id.clone();
                match self.editor.edit(&id, chunk).await {
                    Ok(()) => Some(id),
                    Err(e) if settled => {
                        tracing::warn!(error = %e, "live reply: final edit failed; posting the text again");
                        None
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "live reply: edit failed; the next one carries the text");
                        return Ok(());
                    }
                }
            }
            None => None,
        };
        let id = match edited {
            Some(id) => id,
            None => {
                let id = self.editor.post(chunk, self.posted == 0).await?;
                self.posted += 1;
                id
            }
        };
        self.open = Some((id, chunk.text.clone()));
        Ok(())
    }
}

#[async_trait]
impl<M: Markup + Copy + Send + Sync, E: Editor> LiveReply for Growing<M, E> {
    fn ready_at(&self) -> Instant {
        self.next_at
    }

    async fn update(&mut self, text: &str) {
        if let Err(e) = self.show(text, false).await {
            tracing::debug!(error = %e, "live reply: update not shown; a later one will be");
        }
        self.next_at = Instant::now() + self.interval;
    }

    async fn finish(mut self: Box<Self>, text: &str) -> Result<(), ChannelError> {
        self.show(text, true).await
    }
}
