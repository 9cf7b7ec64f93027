//! The two stand-ins `mnemo bench` puts at the edges of the real `App`: a
//! model that answers at once (so the numbers are the broker's own work)
//! and a channel that notes when each user's reply is sent. Neither touches
//! the network or a memory file.

use crate::model::{DeltaStream, Model, ModelError, ModelReply, ModelRequest};
use async_trait::async_trait;
use mnemo_channels::{Channel, ChannelError, Inbound, Outbound, Shutdown};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::mpsc;

/// The channel name bench traffic uses (its memory is `channels/bench/`).
pub const CHANNEL: &str = "bench";

/// Answers every request at once with a short text that depends on the
/// context it was given (so the context really is built and read).
pub struct InstantModel;

#[async_trait]
impl Model for InstantModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            text: format!(
                "Noted. ({} chars of context, {} recent messages)",
                request.context.system.len(),
                request.context.turns.len()
            ),
            usage: None,
            tool_calls: Vec::new(),
        })
    }

    async fn stream(&self, _: &ModelRequest) -> Result<DeltaStream, ModelError> {
        Err(ModelError::Protocol {
            detail: "the bench model does not stream".into(),
        })
    }

    fn describe(&self) -> String {
        "instant (bench)".into()
    }
}

/// A channel whose `send` tells the waiting user task when the reply left
/// the broker. One sender per chat id (one chat per bench user).
pub struct TimedChannel {
    /// A `std` mutex: one map lookup per send, never held across `.await`.
    waiting: Mutex<HashMap<String, mpsc::UnboundedSender<Instant>>>,
}

impl TimedChannel {
    pub fn new() -> Self {
        TimedChannel {
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Where the send times of replies in `chat_id` arrive.
    pub fn listen(&self, chat_id: &str) -> mpsc::UnboundedReceiver<Instant> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(chat_id.to_string(), tx);
        rx
    }
}

impl Default for TimedChannel {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Channel for TimedChannel {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn max_message_chars(&self) -> usize {
        4000
    }

    async fn receive(&self, _: mpsc::Sender<Inbound>, _: Shutdown) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        let sent = Instant::now();
        let waiting = self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = waiting.get(&out.chat_id) {
            // The user task may have given up (an error ends the run).
            let _ = tx.send(sent);
        }
        Ok(())
    }
}
