//! The reminder tools: `reminder_set`, `reminder_list`, `reminder_cancel`,
//! for the turn's caller in the chat the turn is in. A reminder is made
//! by `mnemo_sessions::commands::remind::set`, the same checks and
//! refusals as `/session remind`; its text is the user's memory, so only
//! sizes reach the log, and in a group `reminder_list` shows only the
//! reminders set in that group.

use super::{MemoryTools, Refusal, fields};
use mnemo_sessions::commands::{Here, remind};
use mnemo_sessions::reminders::Place;

pub const SET: &str = "reminder_set";
pub const LIST: &str = "reminder_list";
pub const CANCEL: &str = "reminder_cancel";

/// What reminders made in this turn need: where they are posted, the
/// app's zone for users without one, and `reminders.maxPerUser`.
pub struct Reminding {
    pub place: Place,
    pub timezone: chrono_tz::Tz,
    pub max_per_user: usize,
}

impl Reminding {
    fn here(&self) -> Here<'_> {
        Here {
            place: &self.place,
            timezone: self.timezone,
            max_reminders: self.max_per_user,
        }
    }
}

impl MemoryTools {
    pub(super) async fn reminder_tool(&self, tool: &'static str, args: &serde_json::Value) -> Result<String, Refusal> {
        let Some(reminding) = &self.reminding else {
            return Err(Refusal::invalid("reminders cannot be set from here"));
        };
        let mut memory = self.memory.lock().await;
        match tool {
            SET => {
                let [when, text, repeat] = fields(args, [("when", true), ("text", true), ("repeat", false)])?;
                let (when, text) = (when.unwrap_or_default(), text.unwrap_or_default());
                match remind::set(memory.as_mut(), reminding.here(), when, text, repeat, self.now).await {
                    Ok(r) => {
                        crate::ops::metrics::metrics().reminder(&self.channel, "set");
                        Ok(format!(
                            "set: id {}, first at {} ({}); tell the user when it will come",
                            r.id,
                            remind::local_time(r.at, reminding.timezone_of(&r.timezone)),
                            r.timezone
                        ))
                    }
                    Err(remind::Refused::Said(reason)) => Err(Refusal::invalid(reason)),
                    Err(remind::Refused::Store(e)) => Err(e.into()),
                }
            }
            LIST => {
                fields(args, [])?;
                let mut waiting = memory.reminders().await?;
                // In a group the answer is read by everyone: only the
                // reminders set in this group, which it sees anyway.
                if reminding.place.group {
                    waiting.retain(|r| r.place.chat_id == reminding.place.chat_id);
                }
                if waiting.is_empty() {
                    return Ok("no reminders".into());
                }
                Ok(waiting
                    .iter()
                    .map(|r| {
                        let repeat = r
                            .repeat
                            .as_deref()
                            .map(|rule| format!(" repeat `{rule}`"))
                            .unwrap_or_default();
                        format!("{} at {}{repeat}: {}", r.id, r.at.to_rfc3339(), r.text)
                    })
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            CANCEL => {
                let [id] = fields(args, [("id", true)])?;
                if memory.cancel_reminder(id.unwrap_or_default()).await? {
                    Ok("cancelled".into())
                } else {
                    Err(Refusal {
                        code: "not_found",
                        message: "no waiting reminder with that id; use reminder_list".into(),
                    })
                }
            }
            _ => Err(Refusal::invalid("no such tool")),
        }
    }
}

impl Reminding {
    fn timezone_of(&self, zone: &str) -> chrono_tz::Tz {
        mnemo_sessions::reminders::parse_zone(zone).unwrap_or(self.timezone)
    }
}
