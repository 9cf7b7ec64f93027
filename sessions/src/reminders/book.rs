//! A user's reminders and timezone as one document: the file store's
//! `reminders/<user>.json` (written whole, atomically), and what an export
//! holds on either store. The operations here are the ones the file store
//! needs; Postgres does the same in SQL, and the conformance suite holds
//! the two to the same behaviour.

use super::{Reminder, State};
use serde::{Deserialize, Serialize};

/// `reminders/<user>.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Book {
    /// The user's IANA zone (`/session timezone`); none: the app's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default)]
    pub reminders: Vec<Reminder>,
}

/// Why a reminder was not added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BookError {
    #[error("{}", super::FULL)]
    Full,
    #[error("a reminder with that id exists")]
    Taken,
}

impl Book {
    /// Whether nothing is left to keep (the file can go).
    pub fn is_empty(&self) -> bool {
        self.timezone.is_none() && self.reminders.is_empty()
    }

    /// Reminders still waiting for a time, soonest first.
    pub fn pending(&self) -> Vec<Reminder> {
        let mut out: Vec<Reminder> = self.reminders.iter().filter(|r| r.is_pending()).cloned().collect();
        out.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        out
    }

    /// Adds `reminder` unless `max` are already pending.
    pub fn add(&mut self, reminder: Reminder, max: usize) -> Result<(), BookError> {
        if self.reminders.iter().filter(|r| r.is_pending()).count() >= max {
            return Err(BookError::Full);
        }
        if self.reminders.iter().any(|r| r.id == reminder.id) {
            return Err(BookError::Taken);
        }
        self.reminders.push(reminder);
        Ok(())
    }

    /// Cancels the pending reminder `id`; whether there was one.
    pub fn cancel(&mut self, id: &str) -> bool {
        let before = self.reminders.len();
        self.reminders.retain(|r| !(r.id == id && r.is_pending()));
        self.reminders.len() != before
    }

    /// The missed times of reminders set in `chat_id`, taken (the user is
    /// told once): each reminder as it was when missed.
    pub fn take_missed(&mut self, chat_id: &str) -> Vec<Reminder> {
        let mut taken = Vec::new();
        for r in &mut self.reminders {
            if r.place.chat_id == chat_id
                && let Some(at) = r.missed.take()
            {
                taken.push(Reminder {
                    at,
                    missed: Some(at),
                    ..r.clone()
                });
            }
        }
        self.reminders.retain(|r| r.state != State::Done || r.missed.is_some());
        taken.sort_by_key(|r| r.at);
        taken
    }

    /// The reminder `id`, mutably.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Reminder> {
        self.reminders.iter_mut().find(|r| r.id == id)
    }

    /// Replaces or drops the reminder `id` by `next`.
    pub fn put(&mut self, id: &str, next: Option<Reminder>) {
        match (self.reminders.iter().position(|r| r.id == id), next) {
            (Some(i), Some(r)) => self.reminders[i] = r,
            (Some(i), None) => {
                self.reminders.remove(i);
            }
            (None, Some(r)) => self.reminders.push(r),
            (None, None) => {}
        }
    }
}
