//! `reminders` in the app config: how many reminders one user may have
//! waiting, and how late a reminder missed while the bot was down may
//! still be sent.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RemindersConfig {
    /// Reminders one user may have waiting; `0` turns setting them off.
    pub max_per_user: usize,
    /// A reminder whose time passed while the bot was down is sent late
    /// up to this many hours after it; later, the user is told it was
    /// missed in their next conversation in that chat.
    pub max_late_hours: u32,
}

impl Default for RemindersConfig {
    fn default() -> Self {
        RemindersConfig {
            max_per_user: 50,
            max_late_hours: 12,
        }
    }
}

impl RemindersConfig {
    /// A [`FieldError`] (its path within `reminders`) for a value that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.max_per_user > 10_000 {
            return Err(FieldError::new("maxPerUser", "must be at most 10000".to_string()));
        }
        if self.max_late_hours > 24 * 366 {
            return Err(FieldError::new(
                "maxLateHours",
                "must be at most 8784 (a year)".to_string(),
            ));
        }
        Ok(())
    }
}
