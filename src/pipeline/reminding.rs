//! What a turn adds for reminders: the reminder tools for the chat the
//! question came from, the current time on the user's clock for the model
//! (it turns "tomorrow at 9" into a time), and, once, the reminders that
//! were missed in this chat while the bot was down.
//!
//! What it must not do: tell a missed reminder anywhere but the chat it
//! was set in.

use super::Pipeline;
use super::no_model::place_of;
use crate::memory_tools::{MemoryTools, Reminding};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use mnemo_channels::Inbound;
use mnemo_sessions::commands::remind;
use mnemo_sessions::store::UserMemory;

impl Pipeline {
    /// `tools` with the reminder tools for `message`'s chat.
    pub(super) fn with_reminders(&self, tools: MemoryTools, message: &Inbound) -> MemoryTools {
        tools.with_reminders(Reminding {
            place: place_of(message),
            timezone: self.parts.tz,
            max_per_user: self.parts.reminders.max_per_user,
        })
    }

    /// The line the model reads the time from: `now` on the user's clock
    /// (`zone`, the turn's).
    pub(super) fn clock_line(zone: Tz, now: DateTime<Utc>) -> String {
        format!(
            "\n\nThe current time is {} ({}, the user's timezone).",
            now.with_timezone(&zone)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
            zone.name()
        )
    }

    /// Tells `message`'s sender, in its chat, of reminders set there that
    /// were missed (once: they are taken from the store).
    pub(super) async fn tell_missed(&self, mine: &mut dyn UserMemory, message: &Inbound) {
        match mine.take_missed(&message.chat_id).await {
            Ok(missed) => {
                if let Some(text) = remind::missed_notice(&missed) {
                    self.reply(message, &text).await;
                }
            }
            Err(e) => tracing::warn!(user = %mine.user().log_id(), error = %e, "missed reminders could not be read"),
        }
    }
}
