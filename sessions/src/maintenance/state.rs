//! The persisted record of what maintenance has completed
//! (`Layout::maintenance_state_path()`, JSON), so runs missed while the bot
//! was down are done at the next start — once — and nothing is done twice.
//!
//! It owns that one file and nothing else. It is written with
//! `fsutil::atomic_write` only after the work it records is on disk, so a
//! crash repeats at most unfinished work (whose output files then make it a
//! no-op), never skips it.

use super::schedule::WeekId;
use crate::fsutil::{self, FileError};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What earlier runs completed. A day or week is "done" when every user's
/// digest for it was written, had nothing to summarize, or was given up after
/// repeated failures; later days may already have files, but the watermark
/// only moves past a day once everything before it is done.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceState {
    /// The last local day whose daily digests are complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_done_through: Option<NaiveDate>,
    /// The last ISO week whose weekly digests are complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekly_done_through: Option<WeekId>,
    /// Consecutive failures of a pending digest, keyed by [`digest_key`], so
    /// one user whose summaries keep failing is retried a bounded number of
    /// times instead of holding back everyone's schedule forever.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u32>,
    /// When the last run finished, for `mnemo sessions report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<DateTime<Utc>>,
}

/// The key of one user's digest for one period in [`MaintenanceState::failures`]:
/// `daily/<user>/2026-03-01` or `weekly/<user>/2026-W09` (`user` is the
/// encoded, path-safe name).
pub fn digest_key(kind: &str, user: &str, period: &str) -> String {
    format!("{kind}/{user}/{period}")
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("maintenance state: {0}")]
    File(#[from] FileError),
    #[error(
        "maintenance state {path} is not valid ({reason}); fix it, or delete it to restart \
         daily and weekly summaries from the last {lookback} days"
    )]
    Corrupt {
        path: PathBuf,
        reason: String,
        lookback: u64,
    },
}

impl MaintenanceState {
    /// Reads the state; a missing file is the first run (default state). A
    /// file that does not parse is an error, not a silent restart: the
    /// operator decides (see [`StateError::Corrupt`]).
    pub fn load(path: &Path) -> Result<Self, StateError> {
        let folder = path.parent().unwrap_or(Path::new("."));
        let Some(text) = fsutil::read_string_if_exists(folder, path)? else {
            return Ok(Self::default());
        };
        serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
            lookback: super::schedule::FIRST_RUN_LOOKBACK_DAYS,
        })
    }

    /// Replaces the state file atomically.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        let mut bytes =
            serde_json::to_vec_pretty(self).map_err(|e| FileError::new("write", path, std::io::Error::other(e)))?;
        bytes.push(b'\n');
        let folder = path.parent().unwrap_or(Path::new("."));
        Ok(fsutil::replace(folder, path, &bytes)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;

    #[test]
    fn state_round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maintenance.json");
        assert_eq!(MaintenanceState::load(&path).unwrap(), MaintenanceState::default());
        let mut state = MaintenanceState {
            daily_done_through: NaiveDate::from_ymd_opt(2026, 12, 31),
            weekly_done_through: Some(WeekId {
                iso_year: 2026,
                iso_week: 53,
            }),
            ..Default::default()
        };
        state.failures.insert(digest_key("daily", "U1", "2026-12-31"), 2);
        state.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"dailyDoneThrough\": \"2026-12-31\""), "{text}");
        assert!(text.contains("\"weeklyDoneThrough\": \"2026-W53\""), "{text}");
        assert_eq!(MaintenanceState::load(&path).unwrap(), state);
    }

    #[test]
    fn corrupt_state_is_an_error_naming_the_file_and_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maintenance.json");
        std::fs::write(&path, "{\"dailyDoneThrough\": 7}").unwrap();
        let err = MaintenanceState::load(&path).unwrap_err().to_string();
        assert!(err.contains("maintenance.json") && err.contains("delete it"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"dailyDoneThrough\": 7}");
    }
}
