//! Intake, the first step of a user's queue (`crate::dispatch`): the
//! access check and abuse limits, then the message stored (durable) and
//! indexed, and its platform told it is safe (`Channel::taken`), at once,
//! before it waits for the turns of the user's earlier messages (issue
//! 42: what waited unstored was lost by a crash). A `/session` command is
//! not stored: it waits its turn, and its platform is told once it is
//! answered. Also: what a taken message's turn is to do ([`Taken`]), and
//! the dispatcher's [`TurnHandler`] over the whole pipeline.
//!
//! What it must not do: call the model, or store a message the access
//! check refused.

use super::{Pipeline, QUEUE_FULL, SAVED_WHILE_STOPPING, TurnError};
use crate::access::Admission;
use crate::channel_memory::ChannelMemory;
use crate::config::LimitsConfig;
use crate::dispatch::{Backlog, TurnHandler};
use crate::ops::turn_log::{Outcome, TurnTrace};
use async_trait::async_trait;
use chrono::Utc;
use mnemo_channels::Inbound;
use mnemo_sessions::commands::{self, SessionCommand};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::session::ContextView;
use mnemo_sessions::store::Intake;
use mnemo_sessions::{Record, Role, SafeName, pending};

/// A message taken in and waiting for its turn in its user's queue.
pub struct Taken {
    pub(super) message: Inbound,
    /// Whose memory it is: the name the store keys the user by (a linked
    /// account's home, a shared group's name).
    pub(super) user: SafeName,
    /// The channel whose store holds that memory (a linked account's may
    /// be another platform's).
    pub(super) home: String,
    pub(super) work: Work,
    /// Photos the message brought, for its model call only (never stored:
    /// a question recovered after a restart has none).
    pub(super) images: Vec<crate::model::image::Image>,
    /// What its files could not be (too large, not set up …), said at the
    /// start of its turn, so it follows the answers to earlier messages.
    pub(super) notes: Vec<String>,
}

/// What a taken message's turn does.
pub(super) enum Work {
    /// A question stored on intake: the model answers it.
    Question,
    /// A `/session` command: answered in its turn, after the user's
    /// earlier questions; never stored, and its platform told it was
    /// taken only once it is answered.
    Command(SessionCommand),
    /// A question found stored and unanswered at start (or left by a dead
    /// broker): answered like a question, unless something settled it.
    Recovered,
    /// A message with nothing left to keep or answer (its files could not
    /// be taken and it had no words): its turn only says why.
    Notes,
    /// The last of the questions found unanswered and older than
    /// `limits.answerStaleAfterMinutes` (`earlier`: the others' ids): its
    /// user is told once.
    GiveUp { earlier: Vec<String> },
}

impl Taken {
    /// The turn of a question found stored without its answer.
    pub(crate) fn recovered(message: Inbound, user: SafeName, home: &str) -> Taken {
        Taken {
            message,
            user,
            home: home.to_string(),
            work: Work::Recovered,
            images: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The notice for stale questions: `last` the newest of them,
    /// `earlier` the others' ids.
    pub(crate) fn give_up(last: Inbound, user: SafeName, home: &str, earlier: Vec<String>) -> Taken {
        Taken {
            message: last,
            user,
            home: home.to_string(),
            work: Work::GiveUp { earlier },
            images: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// How many of a user's newest records a turn reads, and the intake looks
/// through for a repeat: the context window, the message being answered,
/// and the questions that may wait behind it in the user's queue (stored
/// after it, left out of its context by [`answering`]).
pub(super) fn recent_keep(config: &SessionConfig, limits: &LimitsConfig) -> usize {
    config.stm.context_window + 1 + limits.user_queue_depth
}

/// Whether a `/session` command sent in a shared group is about the
/// group's memory (answered from it, in the group); any other is about
/// the sender's own, answered privately.
fn of_the_group(command: &SessionCommand) -> bool {
    matches!(command, SessionCommand::Status | SessionCommand::ClearGroup)
}

/// `view` as the turn answering `msg_id` shows it to the model: without
/// the questions stored after it (not asked yet), the last `n` records.
pub(super) fn answering(mut view: ContextView, msg_id: &str, n: usize) -> ContextView {
    let mut recent: Vec<_> = pending::before_answering(&view.recent, msg_id)
        .into_iter()
        .cloned()
        .collect();
    recent.drain(..recent.len().saturating_sub(n));
    view.recent = recent;
    view
}

/// The record that settles the question `to`: its answer or a notice.
pub(super) fn reply_record(to: &Inbound, text: String) -> Record {
    Record {
        ts: Utc::now(),
        role: Role::Assistant,
        text,
        msg_id: pending::reply_id(&to.msg_id),
        channel: to.channel.clone(),
        thread_id: to.thread_id.clone(),
        chat_id: Some(to.chat_id.clone()),
        user_name: None,
    }
}

impl Pipeline {
    /// The whole path of one message at once: intake, then its turn (what
    /// the dispatcher does in two steps). For tests that drive the
    /// pipeline without a dispatcher.
    pub async fn handle(&self, message: Inbound) {
        if let Some(taken) = self.intake(message).await {
            TurnHandler::answer(self, taken, &Backlog::none()).await;
        }
    }

    /// Intake: the access check and abuse limits (DESIGN §2: a refused
    /// message is not stored, not sent to the model, and not logged with
    /// its text), then the message stored (durable) and indexed before it
    /// waits for its turn, and its platform told it is safe. A `/session`
    /// command waits unstored.
    async fn intake(&self, mut message: Inbound) -> Option<Taken> {
        let Some(memory) = self.memories.get(&message.channel) else {
            tracing::error!(channel = %message.channel, "message from a channel with no memory; dropped");
            let _ = self.settle(&message.channel, &message.msg_id, false);
            return None;
        };
        // A message that ends here (refused, a repeat, not stored) is logged
        // and counted as a turn; one that goes on is, by its turn.
        let ended = |message: &Inbound, outcome| TurnTrace::start(message).finish(outcome);
        let user = self.admitted(memory, &message).await?;
        // A linked account's memory is its home's (maybe another platform's).
        let (mut home, mut user, memory) = self.home_of(&message, user).await?;
        let bot_name = self.channels.get(&message.channel).and_then(|c| c.bot_name());
        if let Some(command) = commands::parse(&message.text, bot_name.as_deref()) {
            // In a shared group, only what is about the group's memory is
            // answered from it; the rest is the asker's own, privately.
            if user.is_group() && !of_the_group(&command) {
                (home, user) = match self.whose_memory(&message).await {
                    Ok(found) => found,
                    Err(_) => (message.channel.clone(), SafeName::of(&message.user_id)),
                };
            }
            return Some(Taken {
                message,
                user,
                home,
                work: Work::Command(command),
                images: Vec::new(),
                notes: Vec::new(),
            });
        }
        let (images, notes) = match self.attachments_of(memory, &user, &mut message).await {
            Ok(taken) => taken,
            Err(notes) => {
                // Nothing the user said is left to keep or answer: not
                // stored, and its turn says why.
                self.settle(&message.channel, &message.msg_id, true);
                let work = Work::Notes;
                let images = Vec::new();
                return Some(Taken {
                    message,
                    user,
                    home,
                    work,
                    images,
                    notes,
                });
            }
        };
        let record = Record {
            ts: message.ts,
            role: Role::User,
            text: message.text.clone(),
            msg_id: message.msg_id.clone(),
            channel: message.channel.clone(),
            thread_id: message.thread_id.clone(),
            chat_id: Some(message.chat_id.clone()),
            user_name: message.user_name.clone(),
        };
        let keep = recent_keep(memory.store.config(), &self.parts.limits);
        let stored = memory.store.intake(&user, &record, Utc::now(), keep).await;
        match stored {
            Ok(intake) => {
                // Stored: the platform may stop delivering it.
                self.settle(&message.channel, &message.msg_id, true);
                if intake == Intake::Repeat {
                    tracing::info!(channel = %message.channel, msg_id = %message.msg_id, "a repeated delivery of a stored message; not queued again");
                    ended(&message, Outcome::Duplicate);
                    return None;
                }
                Some(Taken {
                    message,
                    user,
                    home,
                    work: Work::Question,
                    images,
                    notes,
                })
            }
            Err(e) => {
                tracing::error!(channel = %message.channel, msg_id = %message.msg_id, error = %e, "message could not be stored");
                ended(&message, Outcome::Failed);
                // The platform brings it back: asking the user to send it
                // again would only double it (and repeat at every retry).
                if !self.settle(&message.channel, &message.msg_id, false) {
                    self.reply(&message, NOT_STORED).await;
                }
                None
            }
        }
    }
}

impl Pipeline {
    /// The access check and abuse limits of `message`: whose memory it
    /// goes to (the sender's, or a shared group's), or `None` when it ends
    /// here (refused and maybe told why, only observed, or the rules could
    /// not be read).
    async fn admitted(&self, memory: &ChannelMemory, message: &Inbound) -> Option<SafeName> {
        let ended = |outcome| TurnTrace::start(message).finish(outcome);
        match self.access.admit(message, Utc::now()).await {
            Admission::Refused { reply } => {
                if let Some(text) = reply {
                    self.reply(message, &text).await;
                }
                ended(Outcome::Refused);
                // Refused on purpose and answered: not to be delivered again.
                self.settle(&message.channel, &message.msg_id, true);
                None
            }
            Admission::Proceed { greeting } => {
                if let Some(text) = greeting {
                    self.reply(message, &text).await;
                }
                Some(SafeName::of(&message.user_id))
            }
            // Only kept, as the group's context: nothing to answer.
            Admission::Group { answer: false } => {
                self.observe(memory, message).await;
                None
            }
            // The group's own memory, never the asker's.
            Admission::Group { answer: true } => Some(SafeName::group(&message.chat_id)),
            // Nothing stored and nothing said (the sender may be a
            // stranger); not taken, so a platform that redelivers brings it
            // back once the database answers.
            Admission::Unavailable => {
                tracing::error!(channel = %message.channel, msg_id = %message.msg_id, "access rules could not be read; message not taken");
                ended(Outcome::Failed);
                let _ = self.settle(&message.channel, &message.msg_id, false);
                None
            }
        }
    }

    /// `message`'s files taken (its text now the markers and the caption):
    /// the photos for its model call and the notes for its turn; `Err`
    /// with the notes when nothing is left to keep.
    async fn attachments_of(
        &self,
        memory: &ChannelMemory,
        user: &SafeName,
        message: &mut Inbound,
    ) -> Result<(Vec<crate::model::image::Image>, Vec<String>), Vec<String>> {
        if message.attachments.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let prepared = self.take_attachments(memory, user, message).await;
        if prepared.text.trim().is_empty() {
            return Err(prepared.notes);
        }
        message.text = prepared.text;
        Ok((prepared.images, prepared.notes))
    }
}

pub const NOT_STORED: &str =
    "Sorry — I couldn't save your message, so I didn't answer it. Please try again in a moment.";
pub const NOT_ANSWERED: &str = "Sorry — I couldn't answer your message just now. Please try again in a moment.";

#[async_trait]
impl TurnHandler for Pipeline {
    type Taken = Taken;

    /// The user as the store names them: the same queue for a message
    /// that arrives and one found stored at start.
    fn queue_key(&self, message: &Inbound) -> String {
        SafeName::of(&message.user_id).as_str().to_string()
    }

    async fn take(&self, message: Inbound) -> Option<Taken> {
        self.intake(message).await
    }

    /// A command runs on the memory as the user's earlier messages left
    /// it, and before any later one is stored.
    fn holds_intake(&self, taken: &Taken) -> bool {
        matches!(taken.work, Work::Command(_))
    }

    async fn answer(&self, taken: Taken, backlog: &Backlog) {
        let Some(memory) = self.memories.get(&taken.home) else {
            tracing::error!(channel = %taken.message.channel, "message from a channel with no memory; dropped");
            return;
        };
        let echo = taken.message.clone();
        let command = matches!(taken.work, Work::Command(_));
        let mut trace = TurnTrace::start(&echo);
        let outcome = match &taken.work {
            // Linking looks at both accounts' memory itself: no turn's memory is held.
            Work::Command(link @ (SessionCommand::Link { .. } | SessionCommand::Unlink { .. })) => {
                self.linking(&taken.message, link).await
            }
            _ => self.turn(memory, taken, backlog, &mut trace).await,
        };
        trace.finish(*outcome.as_ref().unwrap_or(&Outcome::Failed));
        // A command is done with once answered; one that failed is left for
        // the platform to deliver again. (A question was settled on intake.)
        let again = command && self.settle(&echo.channel, &echo.msg_id, outcome.is_ok());
        let Err(e) = outcome else { return };
        tracing::error!(channel = %echo.channel, msg_id = %echo.msg_id, error = %e, "turn failed");
        if again {
            return;
        }
        let text = match e {
            TurnError::Closed => SAVED_WHILE_STOPPING,
            // A stored question stays unanswered in the log: the next start
            // (or, on Postgres, another broker) answers it.
            TurnError::Store(_) if !command => NOT_ANSWERED,
            TurnError::Store(_) => NOT_STORED,
        };
        self.reply(&echo, text).await;
    }

    async fn overflow(&self, message: Inbound) {
        tracing::info!(channel = %message.channel, msg_id = %message.msg_id, "user queue full; message refused");
        crate::ops::metrics::metrics().refused(&message.channel, "queue_full");
        if self.access.tell_queue_full(&message).await {
            self.reply(&message, QUEUE_FULL).await;
        }
        // Refused on purpose, and the user was told: not to be delivered again.
        self.settle(&message.channel, &message.msg_id, true);
    }
}
