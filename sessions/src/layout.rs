//! Where every file of a channel's memory lives (DESIGN §3). The one place
//! that joins paths under a channel's sessions folder; every other module
//! asks it, but for `fsutil` (which walks the paths it is given), the log
//! rotation (`<state>/logs`, not a channel's) and the recall store's names
//! for the files of its own folder. `sessions/clippy.toml` holds this:
//! `Path::join` and `PathBuf::push` are disallowed elsewhere in the crate.
//!
//! Raw ids never reach a path: callers hand in [`SafeName`]s. This module
//! computes paths only; it never reads or writes.
#![allow(
    clippy::disallowed_methods,
    reason = "Layout is where paths are joined (sessions/clippy.toml)"
)]

use crate::names::SafeName;
use chrono::NaiveDate;
use std::path::{Path, PathBuf};

/// The name of the folder that holds operator-owned topic notes. It cannot
/// clash with a user's folder: `SafeName::of("_shared")` is `_shared` too, so
/// user topic folders live one level down, under the user's own name, and a
/// user literally called `_shared` is refused topic writes by [`Layout::user_topics_dir`].
pub const SHARED_TOPICS: &str = "_shared";

/// Where malformed lines dropped from the front of the log are kept, inside
/// the user's STM folder, so an operator can still recover them.
pub const MALFORMED_FILE: &str = "malformed.jsonl";

/// Paths of one channel's sessions folder: `<state>/channels/<channel>/sessions/`.
#[derive(Clone, Debug)]
pub struct Layout {
    state_root: PathBuf,
    channel: SafeName,
    root: PathBuf,
}

impl Layout {
    /// `state_root` is the broker's state directory (`~/.mnemo` by default);
    /// `channel` the channel's name (`console`, `slack`, …).
    pub fn new(state_root: impl Into<PathBuf>, channel: &str) -> Self {
        let state_root = state_root.into();
        let channel = SafeName::of(channel);
        let root = Layout::channels_root(&state_root)
            .join(channel.as_str())
            .join("sessions");
        Layout {
            state_root,
            channel,
            root,
        }
    }

    /// `<state>/people/links.json`: which platform accounts share one
    /// memory (linked identities), their one-time codes and the failed
    /// tries; not a channel's, so beside `channels/`.
    pub fn links_path(state_root: &Path) -> PathBuf {
        state_root.join("people").join("links.json")
    }

    /// `<state>/channels`, the folder of every channel's folder.
    pub fn channels_root(state_root: &Path) -> PathBuf {
        state_root.join("channels")
    }

    pub fn state_root(&self) -> &Path {
        &self.state_root
    }

    /// The channel's encoded name.
    pub fn channel(&self) -> &SafeName {
        &self.channel
    }

    /// `<state>/channels/<channel>/sessions`
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<state>/logs`: the broker's own logs (not per channel).
    pub fn logs_dir(&self) -> PathBuf {
        self.state_root.join("logs")
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.json")
    }

    pub fn access_path(&self) -> PathBuf {
        self.root.join("access.json")
    }

    /// Persisted state of the maintenance runs (last daily/weekly/cleanup).
    pub fn maintenance_state_path(&self) -> PathBuf {
        self.root.join("maintenance.json")
    }

    /// `stm/`: one folder per user with short-term memory.
    pub fn stm_root(&self) -> PathBuf {
        self.root.join("stm")
    }

    pub fn stm_dir(&self, user: &SafeName) -> PathBuf {
        self.stm_root().join(user)
    }

    pub fn messages_path(&self, user: &SafeName) -> PathBuf {
        self.stm_dir(user).join("messages.jsonl")
    }

    pub fn summary_path(&self, user: &SafeName) -> PathBuf {
        self.stm_dir(user).join("summary.md")
    }

    pub fn ltm_root(&self) -> PathBuf {
        self.root.join("ltm")
    }

    pub fn profiles_dir(&self) -> PathBuf {
        self.ltm_root().join("users")
    }

    pub fn profile_path(&self, user: &SafeName) -> PathBuf {
        self.ltm_file(&Layout::profile_file(user))
    }

    /// The profile's path under `ltm/` (`users/<user>.md`), as a version
    /// record names it; a store without files names its profile the same.
    pub fn profile_file(user: &SafeName) -> String {
        format!("users/{user}.md")
    }

    /// `ltm/facts/`: one dated fact log per user (see `crate::facts`).
    pub fn facts_dir(&self) -> PathBuf {
        self.ltm_root().join("facts")
    }

    pub fn facts_path(&self, user: &SafeName) -> PathBuf {
        self.facts_dir().join(format!("{user}.jsonl"))
    }

    pub fn topics_root(&self) -> PathBuf {
        self.ltm_root().join("topics")
    }

    /// A user's own topic notes. `None` for a user whose encoded name is
    /// `_shared`: that folder belongs to the operator.
    pub fn user_topics_dir(&self, user: &SafeName) -> Option<PathBuf> {
        (user.as_str() != SHARED_TOPICS).then(|| self.topics_root().join(user))
    }

    pub fn shared_topics_dir(&self) -> PathBuf {
        self.topics_root().join(SHARED_TOPICS)
    }

    /// An operator note in `_shared`.
    pub fn shared_topic_path(&self, slug: &SafeName) -> PathBuf {
        self.shared_topics_dir().join(format!("{slug}.md"))
    }

    pub fn topic_path(&self, user: &SafeName, slug: &SafeName) -> Option<PathBuf> {
        self.user_topics_dir(user).map(|d| d.join(format!("{slug}.md")))
    }

    /// `ltm/documents/<user>/`: the documents the user sent, one
    /// `<id>.md` each ([`crate::documents`]).
    pub fn documents_dir(&self, user: &SafeName) -> PathBuf {
        self.ltm_root().join("documents").join(user)
    }

    /// `ltm/documents/<user>/<id>.md`; `id` is checked by the caller
    /// ([`crate::documents::is_id`]).
    pub fn document_path(&self, user: &SafeName, id: &str) -> PathBuf {
        self.documents_dir(user).join(format!("{id}.md"))
    }

    /// `ltm/attachments/<user>/`: the files the user sent, kept when
    /// `attachments.keep` is on ([`crate::kept`]).
    pub fn kept_dir(&self, user: &SafeName) -> PathBuf {
        self.ltm_root().join("attachments").join(user)
    }

    /// A file of [`Layout::kept_dir`]; `name` is made by [`crate::kept`]
    /// from a checked id.
    pub fn kept_path(&self, user: &SafeName, name: &str) -> PathBuf {
        self.kept_dir(user).join(name)
    }

    /// `summaries/`: one folder per user with daily and weekly summaries.
    pub fn summaries_root(&self) -> PathBuf {
        self.root.join("summaries")
    }

    pub fn summaries_dir(&self, user: &SafeName) -> PathBuf {
        self.summaries_root().join(user)
    }

    pub fn daily_dir(&self, user: &SafeName) -> PathBuf {
        self.summaries_dir(user).join("daily")
    }

    pub fn daily_path(&self, user: &SafeName, day: NaiveDate) -> PathBuf {
        self.daily_dir(user).join(format!("{}.md", day.format("%Y-%m-%d")))
    }

    pub fn weekly_dir(&self, user: &SafeName) -> PathBuf {
        self.summaries_dir(user).join("weekly")
    }

    /// `weekly/YYYY-Www.md` for an ISO week (`year` is the ISO week-year).
    pub fn weekly_path(&self, user: &SafeName, iso_year: i32, iso_week: u32) -> PathBuf {
        self.weekly_dir(user).join(format!("{iso_year:04}-W{iso_week:02}.md"))
    }

    /// `ltm/versions/<user>/`: earlier versions of the user's long-term
    /// files, one JSON record per change (see [`crate::versions`]).
    pub fn versions_dir(&self, user: &SafeName) -> PathBuf {
        self.ltm_root().join("versions").join(user)
    }

    pub fn archive_root(&self) -> PathBuf {
        self.root.join("archive")
    }

    pub fn archive_dir(&self, user: &SafeName) -> PathBuf {
        self.archive_root().join(user)
    }

    /// One archive batch of the user; `name` is a file name the archive
    /// made (or listed in the user's archive folder).
    pub fn archive_batch_path(&self, user: &SafeName, name: &str) -> PathBuf {
        self.archive_dir(user).join(name)
    }

    /// `recall/`: every user's recall index (derived data).
    pub fn recall_root(&self) -> PathBuf {
        self.root.join("recall")
    }

    /// The user's recall index (derived data, see `crate::recall`).
    pub fn recall_dir(&self, user: &SafeName) -> PathBuf {
        self.recall_root().join(user)
    }

    /// `reminders/`: one file per user with reminders or a timezone.
    pub fn reminders_root(&self) -> PathBuf {
        self.root.join("reminders")
    }

    /// `reminders/<user>.json`: the user's reminders and timezone
    /// ([`crate::reminders::Book`]).
    pub fn reminders_path(&self, user: &SafeName) -> PathBuf {
        self.reminders_root().join(format!("{user}.json"))
    }

    /// `usage/`: model tokens spent, one file per user and the channel's total.
    pub fn usage_root(&self) -> PathBuf {
        self.root.join("usage")
    }

    /// `usage/<user>.json`: the user's tokens per day (their own day) and
    /// purpose ([`crate::usage`]).
    pub fn usage_path(&self, user: &SafeName) -> PathBuf {
        self.usage_root().join(format!("{user}.json"))
    }

    /// `usage/channel.total`: the channel's tokens per day (the app's day)
    /// and purpose; a name no user's file can have (theirs end in `.json`).
    pub fn channel_usage_path(&self) -> PathBuf {
        self.usage_root().join("channel.total")
    }

    /// Where `/session export` bundles are written for the operator.
    pub fn exports_dir(&self) -> PathBuf {
        self.root.join("exports")
    }

    /// One export bundle; `file_name` is made by `export` from safe names.
    pub fn export_path(&self, file_name: &str) -> PathBuf {
        self.exports_dir().join(file_name)
    }

    /// `stm/<user>/malformed.jsonl`: lines a rewrite of the log could not
    /// parse, kept rather than lost.
    pub fn malformed_path(&self, user: &SafeName) -> PathBuf {
        self.stm_dir(user).join(MALFORMED_FILE)
    }

    /// `stm/<user>/copy-incomplete`: present while `mnemo store copy` is
    /// writing the user's files, so an interrupted copy is recognised (and
    /// redone) by the next run rather than taken for the user's memory.
    pub fn copy_marker_path(&self, user: &SafeName) -> PathBuf {
        self.stm_dir(user).join("copy-incomplete")
    }

    /// A version record of the user (see [`crate::versions`]).
    pub fn version_record_path(&self, user: &SafeName, name: &str) -> PathBuf {
        self.versions_dir(user).join(name)
    }

    /// A file under `ltm/` named by its path relative to it (as version
    /// records store it); the caller checks whose it is.
    pub fn ltm_file(&self, relative: &str) -> PathBuf {
        self.ltm_root().join(relative)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_design_layout() {
        let l = Layout::new("/s", "slack");
        let u = SafeName::of("U1");
        assert_eq!(
            l.messages_path(&u),
            Path::new("/s/channels/slack/sessions/stm/U1/messages.jsonl")
        );
        assert_eq!(
            l.profile_path(&u),
            Path::new("/s/channels/slack/sessions/ltm/users/U1.md")
        );
        assert_eq!(
            l.daily_path(&u, NaiveDate::from_ymd_opt(2026, 3, 1).unwrap()),
            Path::new("/s/channels/slack/sessions/summaries/U1/daily/2026-03-01.md")
        );
        assert_eq!(
            l.weekly_path(&u, 2026, 9),
            Path::new("/s/channels/slack/sessions/summaries/U1/weekly/2026-W09.md")
        );
    }

    #[test]
    fn hostile_channel_and_user_stay_inside_the_root() {
        let l = Layout::new("/s", "../../etc");
        assert!(l.root().starts_with("/s/channels/"));
        let u = SafeName::of("../../x");
        assert!(l.messages_path(&u).starts_with(l.root()));
        assert_eq!(l.user_topics_dir(&SafeName::of("_shared")), None);
    }
}
