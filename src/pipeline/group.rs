//! A group with its own memory (`groups.<id>.memory: "shared"` in
//! `access.json`): its conversation is kept under the group's name
//! ([`SafeName::group`]) in the channel's store, through the same seam as
//! a person's, and a turn there is answered from that memory alone, each
//! member's words after their name. With `observe: true` what the bot can
//! read but is not asked is kept as the group's context, unanswered
//! (`pending::observed_id`). `/session status` there tells what the
//! group's memory holds (in the group); `/session clear group` clears it,
//! for the group's admins only, as the platform says.
//!
//! What it must not do: put a member's own memory into a group's turn, or
//! a group's memory into anyone's private one (a private chat never names
//! the group's memory: only a group message of a shared group does).

use super::Pipeline;
use crate::channel_memory::ChannelMemory;
use crate::ops::turn_log::{Outcome, TurnTrace};
use chrono::Utc;
use mnemo_channels::Inbound;
use mnemo_sessions::session::ContextView;
use mnemo_sessions::store::{StoreError, UserMemory};
use mnemo_sessions::{Record, Role, SafeName, pending};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedMutexGuard;

/// Told to the model in every turn of a shared group.
pub(super) const GROUP_NOTE: &str = "\n\nThis is a group conversation. Each member's message starts with \
their name. What you remember here is this group's own memory: you know nothing private about its members.";

/// Said to a member who is not an admin of the group.
pub const NOT_A_GROUP_ADMIN: &str = "Only this group's admins can clear its memory.";
/// Said when the platform could not say who the group's admins are.
pub const ADMINS_UNKNOWN: &str =
    "I could not check with the platform who this group's admins are, so I cleared nothing. Please try again later.";

/// One turn at a time on a memory several accounts share (a shared
/// group's, a linked person's): their messages come through queues of
/// their own, but answer from one memory. An entry lives while a turn
/// holds or waits for it, so the map holds only memories in use.
#[derive(Default)]
pub(super) struct GroupTurns(Arc<Mutex<HashMap<(String, SafeName), TurnLock>>>);

/// One memory's turn.
type TurnLock = Arc<tokio::sync::Mutex<()>>;

/// A memory's turn, held; its entry goes when the last holder or waiter
/// drops it.
pub(super) struct SharedTurn {
    guard: Option<OwnedMutexGuard<()>>,
    lock: TurnLock,
    key: (String, SafeName),
    turns: Arc<Mutex<HashMap<(String, SafeName), TurnLock>>>,
}

impl Drop for SharedTurn {
    fn drop(&mut self) {
        self.guard = None;
        let mut turns = self.turns.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The map's and this one's: nobody else holds or waits.
        if Arc::strong_count(&self.lock) == 2 {
            turns.remove(&self.key);
        }
    }
}

impl GroupTurns {
    /// Waits for the memory's turn; it is the caller's until the guard drops.
    pub(super) async fn hold(&self, channel: &str, user: &SafeName) -> SharedTurn {
        let key = (channel.to_string(), user.clone());
        let lock = {
            let mut turns = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            turns.entry(key.clone()).or_default().clone()
        };
        let guard = lock.clone().lock_owned().await;
        SharedTurn {
            guard: Some(guard),
            lock,
            key,
            turns: self.0.clone(),
        }
    }

    /// Memories with a turn held or waited for (tests).
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

/// `view`'s messages as a group turn shows them: each member's words
/// after their name (the model sees who said what, not only what).
pub(super) fn spoken(mut view: ContextView) -> ContextView {
    for record in &mut view.recent {
        if record.role == Role::User {
            let named = said_by(record.user_name.as_deref(), &record.text);
            Arc::make_mut(record).text = named;
        }
    }
    view
}

/// `text` after the name of who said it.
pub(super) fn said_by(name: Option<&str>, text: &str) -> String {
    let name: String = name
        .unwrap_or("A member")
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    format!("{name}: {text}")
}

impl Pipeline {
    /// `user`'s memory for this turn: on a store several brokers share,
    /// the user's turn lock is held from here to its end, so another
    /// broker never interleaves this user's turns; and a memory other
    /// accounts use too (a shared group's, a linked person's) is waited
    /// for here, since each account has a queue of its own.
    pub(super) async fn memory_for_turn(
        &self,
        memory: &ChannelMemory,
        user: &SafeName,
        message: &Inbound,
    ) -> Result<(Option<SharedTurn>, Box<dyn UserMemory>), StoreError> {
        let own = memory.store.channel() == message.channel && *user == SafeName::of(&message.user_id);
        let home = mnemo_sessions::people::Account::new(memory.store.channel(), user.clone());
        let shared = !own || self.people.is_home(&home);
        let turn = match shared {
            true => Some(self.group_turns.hold(memory.store.channel(), user).await),
            false => None,
        };
        Ok((turn, memory.store.user(user).await?))
    }

    /// Keeps `message` (a shared group's, not addressed to the bot) in the
    /// group's memory as context, unanswered. Its files are not fetched
    /// (nobody asked for them to be read); a message with no words keeps
    /// nothing.
    pub(super) async fn observe(&self, memory: &ChannelMemory, message: &Inbound) {
        let trace = TurnTrace::start(message);
        if message.text.trim().is_empty() {
            self.settle(&message.channel, &message.msg_id, true);
            trace.finish(Outcome::Observed);
            return;
        }
        let group = SafeName::group(&message.chat_id);
        let record = Record {
            ts: message.ts,
            role: Role::User,
            text: message.text.clone(),
            msg_id: pending::observed_id(&message.msg_id),
            channel: message.channel.clone(),
            thread_id: message.thread_id.clone(),
            chat_id: Some(message.chat_id.clone()),
            user_name: message.user_name.clone(),
        };
        let keep = super::recent_keep(memory.store.config(), &self.parts.limits);
        match memory.store.intake(&group, &record, Utc::now(), keep).await {
            Ok(_) => {
                self.settle(&message.channel, &message.msg_id, true);
                trace.finish(Outcome::Observed);
            }
            Err(e) => {
                tracing::error!(channel = %message.channel, msg_id = %message.msg_id, error = %e, "an observed group message could not be stored");
                let _ = self.settle(&message.channel, &message.msg_id, false);
                trace.finish(Outcome::Failed);
            }
        }
    }

    /// Why `message`'s sender may not clear its group's memory, if they
    /// may not: only an admin of the group, as its platform says now.
    pub(super) async fn not_a_group_admin(&self, message: &Inbound) -> Option<&'static str> {
        let Some(channel) = self.channels.get(&message.channel) else {
            return Some(ADMINS_UNKNOWN);
        };
        match channel.is_group_admin(&message.chat_id, &message.user_id).await {
            Ok(true) => None,
            Ok(false) => Some(NOT_A_GROUP_ADMIN),
            Err(e) => {
                tracing::warn!(channel = %message.channel, error = %e, "could not ask the platform for a group's admins");
                Some(ADMINS_UNKNOWN)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_memory_s_turn_is_one_at_a_time_and_forgotten_once_nobody_holds_it() {
        let turns = GroupTurns::default();
        let group = SafeName::group("-100");
        let first = turns.hold("telegram", &group).await;
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), turns.hold("telegram", &group));
        assert!(waiting.await.is_err(), "the second waits while the first holds it");
        let other = turns.hold("telegram", &SafeName::group("-200")).await;
        assert_eq!(turns.in_use(), 2);
        drop(first);
        drop(other);
        assert_eq!(turns.in_use(), 0, "nothing kept for memories not in use");
        let again = turns.hold("telegram", &group).await;
        assert_eq!(turns.in_use(), 1);
        drop(again);
        assert_eq!(turns.in_use(), 0);
    }

    #[test]
    fn a_member_is_named_without_control_characters_and_briefly() {
        assert_eq!(said_by(Some("Ada"), "hi"), "Ada: hi");
        assert_eq!(said_by(None, "hi"), "A member: hi");
        assert_eq!(said_by(Some("A\nB\u{0}"), "x"), "AB: x");
        assert_eq!(said_by(Some(&"n".repeat(500)), "x").len(), 64 + 3);
    }
}
