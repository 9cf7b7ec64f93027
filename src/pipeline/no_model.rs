//! The turns answered without the model: a `/session` command, answered
//! from memory in its turn (after the user's earlier questions), and the
//! one notice for questions a crash left too long unanswered.
//!
//! What it must not do: reveal a person's memory in a group (a
//! memory-revealing command's answer goes privately; only a shared group's
//! own memory is shown in it), or send a notice twice.

use super::intake::reply_record;
use super::{Due, Pipeline, TurnError, store_reply};
use crate::channel_memory::ChannelMemory;
use crate::dispatch::Backlog;
use crate::ops::turn_log::Outcome;
use chrono::Utc;
use mnemo_channels::{ChatKind, Inbound, Outbound};
use mnemo_sessions::commands::{self, SessionCommand, remind};
use mnemo_sessions::reminders::Place;
use mnemo_sessions::store::UserMemory;

impl Pipeline {
    /// A `/session` command, answered from memory in its turn (after the
    /// user's earlier questions), never stored.
    pub(super) async fn command(
        &self,
        memory: &ChannelMemory,
        mine: &mut dyn UserMemory,
        message: &Inbound,
        command: &SessionCommand,
    ) -> Result<Outcome, TurnError> {
        let user = mine.user().clone();
        // A group's memory is cleared by its admins only.
        if *command == SessionCommand::ClearGroup
            && user.is_group()
            && let Some(refusal) = self.not_a_group_admin(message).await
        {
            self.send(Outbound::reply(message, refusal.to_string())).await;
            return Ok(Outcome::Command);
        }
        let place = place_of(message);
        let caller = commands::Caller {
            user: &user,
            display_name: message.user_name.as_deref(),
            max_profile_chars: memory.store.config().ltm.max_profile_chars,
            here: Some(self.here(&place)),
        };
        let reply = commands::execute(mine, caller, command, Utc::now()).await;
        // Everything about the person is gone: their links go with it.
        if *command == SessionCommand::ClearAllConfirmed && !user.is_group() {
            let home = mnemo_sessions::people::Account::new(memory.store.channel(), user.clone());
            if let Err(e) = self.people.forget(&home).await {
                tracing::error!(channel = %message.channel, error = %e, "clear all: the account links could not be removed");
            }
        }
        if reply.set_reminder {
            crate::ops::metrics::metrics().reminder(&message.channel, "set");
        }
        let out = match reply.export {
            Some(path) => Outbound::file(message, path, reply.text),
            None => Outbound::reply(message, reply.text),
        };
        // DESIGN §5: memory asked for in a group reaches only the asker
        // (a shared group's own memory is the group's to see).
        let out = if command.reveals_memory() && !user.is_group() {
            out.privately(message)
        } else {
            out
        };
        self.send(out).await;
        Ok(Outcome::Command)
    }

    /// Questions found unanswered and too old to answer now: `message`
    /// the last of them, `earlier` the ids of the others. The user is told
    /// once, in one message, and that notice is stored as the answer of
    /// each (the ones nothing settled meanwhile), before it is sent: a
    /// crash in between costs the notice, never sends it twice.
    pub(super) async fn give_up(
        &self,
        memory: &ChannelMemory,
        mine: &mut dyn UserMemory,
        message: &Inbound,
        earlier: &[String],
        backlog: &Backlog,
    ) -> Result<Outcome, TurnError> {
        let user = mine.user().clone();
        let mut open = Vec::new();
        for msg_id in earlier.iter().chain(std::iter::once(&message.msg_id)) {
            if !mine.is_settled(msg_id, Utc::now()).await? {
                open.push(msg_id.clone());
            }
        }
        if open.is_empty() {
            return Ok(Outcome::Duplicate);
        }
        let text = stale_notice(open.len(), message.ts);
        let mut due = Due::default();
        for msg_id in &open {
            let question = Inbound {
                msg_id: msg_id.clone(),
                ..message.clone()
            };
            let stored = store_reply(mine, &reply_record(&question, text.clone())).await?;
            due = due.or(stored);
            tracing::info!(channel = %message.channel, user = %user.log_id(), msg_id = %msg_id, "recovery: a question too old to answer is given up; the user is told");
        }
        crate::ops::metrics::metrics().recovered(&message.channel, "stale", open.len());
        let zone = self.zone(mine).await;
        self.fold_if_due(memory, &user, due.now(backlog), zone).await;
        self.reply(message, &text).await;
        Ok(Outcome::GaveUp)
    }
}

/// Where a reminder set by `message` is posted: its chat and thread, on
/// its platform.
pub(super) fn place_of(message: &Inbound) -> Place {
    Place {
        platform: Some(message.channel.clone()),
        ..remind::place(
            &message.chat_id,
            message.thread_id.as_deref(),
            message.chat_kind == ChatKind::Group,
        )
    }
}

impl Pipeline {
    /// What reminders set at `place` need from the app.
    pub(super) fn here<'a>(&self, place: &'a Place) -> commands::Here<'a> {
        commands::Here {
            place,
            timezone: self.parts.tz,
            max_reminders: self.parts.reminders.max_per_user,
        }
    }
}

/// What a user is told of questions given up as stale (once).
fn stale_notice(count: usize, last: chrono::DateTime<Utc>) -> String {
    let when = last.format("%Y-%m-%d %H:%M UTC");
    if count == 1 {
        format!(
            "I was offline and did not answer your message of {when}. If you still need an answer, please ask again."
        )
    } else {
        format!(
            "I was offline and did not answer {count} of your messages (the last of {when}). If you still need answers, please ask again."
        )
    }
}
