//! Recovery (issue 42): questions stored on intake that no answer settles
//! (`mnemo_sessions::pending`), because the process died between storing
//! and answering them, or (on Postgres) the broker that stored them did.
//! Each one is queued for its answer in its user's queue, in order; those
//! older than `limits.answerStaleAfterMinutes` are given up instead, their
//! user told once (one message, stored as the answer of each). Every turn checks again that its question is still
//! unsettled, so a question found twice is still answered once.
//!
//! When: at start, before any channel takes a message (a platform's
//! repeat of a stored message then finds it stored and is not queued
//! twice); on Postgres also every [`SWEEP_EVERY`], for questions another
//! broker stored and left (its turn lock died with it).

use super::App;
use crate::pipeline::Taken;
use chrono::{DateTime, TimeDelta, Utc};
use mnemo_channels::{ChatKind, Inbound};
use mnemo_sessions::store::Look;
use mnemo_sessions::{Record, SafeName};
use std::time::Duration;

/// How often a broker on Postgres looks for questions other brokers left.
/// With [`LEFT_AFTER`], a question a dead broker stored is answered within
/// a minute of being stored (issue 38 asks for that).
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// How long a question waits on Postgres before the sweep takes it as
/// left by a dead broker. A live broker answers most of its queue within
/// this; a question it still holds is answered by whichever broker takes
/// the user's lock first, once (the turn's check under the lock), and in
/// order (each broker's queue is).
const LEFT_AFTER: TimeDelta = TimeDelta::seconds(30);

/// How far back recovery looks: a question older than this is neither
/// answered nor given up (a message a version before this one saved
/// unanswered, say, or one an operator restored from a backup).
const HORIZON: TimeDelta = TimeDelta::hours(24);

/// What one recovery pass queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Questions queued for their answer.
    pub answered: usize,
    /// Questions given up as stale (their users told once).
    pub stale: usize,
}

impl App {
    /// Queues every question stored and left unanswered, on every channel
    /// (at start: nothing of this process is in flight yet).
    pub async fn recover(&self) -> Recovered {
        self.recover_stored_before(Utc::now(), false).await
    }

    /// On Postgres: queues the questions other brokers stored and left
    /// (stored over 30 s ago, of users this broker has no queue
    /// for), in short-term memory. [`App::serve`] runs it every
    /// [`SWEEP_EVERY`].
    pub async fn sweep(&self) -> Recovered {
        self.recover_stored_before(Utc::now() - LEFT_AFTER, true).await
    }

    async fn recover_stored_before(&self, before: DateTime<Utc>, postgres_only: bool) -> Recovered {
        let mut total = Recovered::default();
        for (channel, memory) in self.memories.iter() {
            let since = Utc::now() - HORIZON;
            if postgres_only && !memory.store.shared() {
                continue;
            }
            let look = if postgres_only {
                Look::Unfolded
            } else {
                Look::Everywhere
            };
            let found = memory.store.pending(before, since, look).await;
            let found = match found {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!(%channel, error = %e, "recovery: could not look for unanswered questions; the next start looks again");
                    continue;
                }
            };
            for (user, questions) in found {
                // This broker is at work on the user: its turns settle them.
                if postgres_only && self.dispatcher.has_queue(channel, user.as_str()) {
                    continue;
                }
                let queued = self.queue_recovered(channel, &user, &questions);
                total.answered += queued.answered;
                total.stale += queued.stale;
            }
        }
        if total != Recovered::default() {
            tracing::info!(
                answered = total.answered,
                stale = total.stale,
                "recovery: questions stored but not answered were found"
            );
        }
        total
    }

    /// Queues one user's unsettled questions (oldest first): the stale ones
    /// as one notice, the others each for its answer.
    fn queue_recovered(&self, channel: &str, user: &SafeName, questions: &[Record]) -> Recovered {
        let oldest_kept = Utc::now() - self.parts.limits.answer_stale_after();
        let (stale, fresh): (Vec<&Record>, Vec<&Record>) = questions.iter().partition(|q| q.ts < oldest_kept);
        let mut queued = Recovered::default();
        if let Some((last, earlier)) = stale.split_last() {
            let earlier = earlier.iter().map(|q| q.msg_id.clone()).collect();
            let taken = Taken::give_up(self.inbound_of(channel, user, last), user.clone(), channel, earlier);
            if self.dispatcher.submit_taken(channel, user.as_str(), taken).is_ok() {
                queued.stale = stale.len();
            }
        }
        for question in fresh {
            tracing::info!(%channel, user = %user.log_id(), msg_id = %question.msg_id, age_secs = (Utc::now() - question.ts).num_seconds(), "recovery: a stored question was not answered; queued for its answer");
            let taken = Taken::recovered(self.inbound_of(channel, user, question), user.clone(), channel);
            if self.dispatcher.submit_taken(channel, user.as_str(), taken).is_ok() {
                queued.answered += 1;
            }
        }
        crate::ops::metrics::metrics().recovered(channel, "answered", queued.answered);
        queued
    }

    /// [`inbound_of`], answered on the platform the question came from:
    /// a linked account's question is kept in its home's store, which
    /// may be another platform's (its record names its own).
    fn inbound_of(&self, store: &str, user: &SafeName, question: &Record) -> Inbound {
        let came_from = match self.memories.contains_key(&question.channel) {
            true => question.channel.as_str(),
            false => store,
        };
        inbound_of(came_from, user, question)
    }
}

/// The message a stored question came as, for its turn and its reply (to
/// the chat and thread it was asked in). A recovered question is never a
/// command, so the chat's kind only says whether it was a private chat.
fn inbound_of(channel: &str, user: &SafeName, question: &Record) -> Inbound {
    let user_id = user.decode().unwrap_or_else(|| user.as_str().to_string());
    let chat_id = question.chat_id.clone().unwrap_or_else(|| user_id.clone());
    Inbound {
        channel: channel.to_string(),
        chat_kind: if chat_id == user_id {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        user_id,
        user_name: question.user_name.clone(),
        chat_id,
        thread_id: question.thread_id.clone(),
        msg_id: question.msg_id.clone(),
        text: question.text.clone(),
        ts: question.ts,
        addressed: true,
        interaction: None,
        attachments: Vec::new(),
    }
}
