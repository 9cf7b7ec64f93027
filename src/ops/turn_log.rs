//! One structured log line per turn (`target: "mnemo::turn"`): channel,
//! hashed user, where the time went (queue, memory, model, send), tokens and
//! outcome — and the same turn into the metrics. Never the message text.
//!
//! The pipeline starts a [`TurnTrace`] when a message leaves its queue,
//! calls [`TurnTrace::lap`] after each phase, and [`TurnTrace::finish`]es it
//! with the [`Outcome`].

use super::metrics::metrics;
use crate::model::Usage;
use chrono::Utc;
use mnemo_channels::Inbound;
use mnemo_sessions::SafeName;
use std::time::{Duration, Instant};

/// How a turn ended (the `outcome` label and log field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The model answered and the answer was sent.
    Answered,
    /// A `/session` command, answered from memory.
    Command,
    /// Refused by the access gate or a limit; nothing stored.
    Refused,
    /// The model failed; the message is kept and the user told.
    ModelFailed,
    /// The model's streamed answer broke off (an error or the call's
    /// deadline mid-reply): what came is kept, marked as cut, and the user
    /// told.
    Cut,
    /// Saved during shutdown without a model call.
    Saved,
    /// Memory could not be written or read.
    Failed,
    /// A platform redelivered a message already stored: not answered again.
    Duplicate,
    /// Questions found unanswered after a restart were too old to answer:
    /// the user was told once.
    GaveUp,
    /// The day's model budget (the user's or the channel's) was spent:
    /// the question was stored and settled by a short notice, no model call.
    OverBudget,
    /// A message in a shared group that did not address the bot: kept in
    /// the group's memory as context (`observe: true`), not answered.
    Observed,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Command => "command",
            Outcome::Refused => "refused",
            Outcome::ModelFailed => "model_failed",
            Outcome::Cut => "cut",
            Outcome::Saved => "saved",
            Outcome::Failed => "failed",
            Outcome::Duplicate => "duplicate",
            Outcome::GaveUp => "gave_up",
            Outcome::OverBudget => "over_budget",
            Outcome::Observed => "observed",
        }
    }
}

/// The phases a turn's time is split into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Access check, `/session`, STM appends, reading the context.
    Memory,
    /// Waiting for a model slot and the model.
    Model,
    /// Handing the reply to the platform.
    Send,
}

/// One turn being timed.
pub struct TurnTrace {
    channel: String,
    user: String,
    /// From the platform's timestamp of the message to the turn's start:
    /// delivery plus the wait in the user's queue.
    queue: Duration,
    started: Instant,
    lap_start: Instant,
    memory: Duration,
    model: Duration,
    send: Duration,
    usage: Option<Usage>,
}

impl TurnTrace {
    pub fn start(message: &Inbound) -> TurnTrace {
        let now = Instant::now();
        TurnTrace {
            channel: message.channel.clone(),
            user: user_hash(&message.user_id),
            queue: (Utc::now() - message.ts).to_std().unwrap_or_default(),
            started: now,
            lap_start: now,
            memory: Duration::ZERO,
            model: Duration::ZERO,
            send: Duration::ZERO,
            usage: None,
        }
    }

    /// Books the time since the previous lap to `phase`.
    pub fn lap(&mut self, phase: Phase) {
        let now = Instant::now();
        let took = now - self.lap_start;
        self.lap_start = now;
        match phase {
            Phase::Memory => self.memory += took,
            Phase::Model => self.model += took,
            Phase::Send => self.send += took,
        }
    }

    pub fn tokens(&mut self, usage: Option<Usage>) {
        self.usage = usage;
    }

    /// Writes the log line and the turn metrics.
    pub fn finish(self, outcome: Outcome) {
        let total = self.started.elapsed();
        metrics().turn(&self.channel, outcome.label(), total);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            target: "mnemo::turn",
            channel = %self.channel,
            user = %self.user,
            outcome = outcome.label(),
            queue_ms = ms(self.queue),
            memory_ms = ms(self.memory),
            model_ms = ms(self.model),
            send_ms = ms(self.send),
            total_ms = ms(total),
            tokens_in = self.usage.map(|u| u.input_tokens),
            tokens_out = self.usage.map(|u| u.output_tokens),
            "turn"
        );
    }
}

/// A short, stable, non-reversible-at-a-glance name for a user in logs:
/// [`SafeName::log_id`] of their id, the name every warning about them uses
/// too (the channel is a field of its own).
pub fn user_hash(user_id: &str) -> String {
    SafeName::of(user_id).log_id().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_hash_is_stable_and_does_not_contain_the_id() {
        let a = user_hash("123456789");
        assert_eq!(a, user_hash("123456789"));
        assert_eq!(
            a,
            SafeName::of("123456789").log_id().to_string(),
            "the same in every warning"
        );
        assert_ne!(a, user_hash("123456780"));
        assert_eq!(a.len(), 12);
        assert!(!a.contains("123456789"));
    }

    #[test]
    fn laps_book_time_to_their_phase_only() {
        let message = mnemo_channels::Inbound {
            channel: "console".into(),
            user_id: "ada".into(),
            user_name: None,
            chat_id: "c".into(),
            chat_kind: mnemo_channels::ChatKind::Direct,
            thread_id: None,
            msg_id: "1".into(),
            text: "hi".into(),
            ts: Utc::now(),
            addressed: true,
            interaction: None,
            attachments: Vec::new(),
        };
        let mut trace = TurnTrace::start(&message);
        std::thread::sleep(Duration::from_millis(2));
        trace.lap(Phase::Model);
        assert!(trace.model >= Duration::from_millis(2));
        assert_eq!((trace.memory, trace.send), (Duration::ZERO, Duration::ZERO));
    }
}
