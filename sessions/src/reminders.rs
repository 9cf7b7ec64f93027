//! Reminders (issue 39): what a user asked the bot to say later, where,
//! and when. The rules every store shares are here, once: reading a time
//! (`+10m`, RFC 3339), a repeat rule (5-field cron, read on the user's
//! wall clock in their zone, DST included), the limits, and the one
//! [`Reminder`] record both stores keep (the files as
//! `reminders/<user>.json`, Postgres as rows of the same fields).
//!
//! A reminder's life: *active* until its time; *sending* while one broker
//! has claimed it and posts it (the claim is stored before the post, so no
//! other broker and no restart sends it again); then gone (once), or
//! active again at its next time (repeating). A claim a broker never
//! finished (it died mid-post) is never sent again: the reminder is kept
//! as *missed* and the user is told in their next conversation in that
//! chat, as for a reminder whose time passed more than
//! `reminders.maxLateHours` ago while the bot was down.
//!
//! What it must not do: log or count a reminder's text (it is the user's
//! memory), or read the clock (every rule takes `now`).

mod book;
mod repeat;
mod when;

pub use book::{Book, BookError};
pub use repeat::{Repeat, RepeatError};
pub use when::{WhenError, parse_when};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Longest reminder text, in characters.
pub const MAX_TEXT_CHARS: usize = 1_000;
/// How far ahead a reminder may be set, in days (5 years).
pub const MAX_AHEAD_DAYS: i64 = 5 * 366;
/// A repeat rule may fire at most this often, in minutes.
pub const MIN_REPEAT_MINUTES: i64 = 10;
/// A claim not finished within this many seconds is a broker that died
/// mid-post: the reminder is kept as missed, never sent again.
pub const CLAIM_SECS: i64 = 300;

/// Said when a user has `reminders.maxPerUser` reminders waiting.
pub const FULL: &str = "You have the most reminders I keep for one person; cancel one first (see /session reminders).";

/// Where a reminder is posted: the chat it was set in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Place {
    pub chat_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Set in a group: posted there with its text only.
    #[serde(default)]
    pub group: bool,
    /// The platform (channel) of the chat, when it is not the store's
    /// own: a linked account's reminders are kept with its home's memory
    /// and posted where they were set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
}

/// Where a reminder is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for its time (`due`).
    Active,
    /// Claimed by a broker that is posting it (since `claimedAt`).
    Sending,
    /// Over; kept only until the user is told of a missed time.
    Done,
}

/// One reminder of one user (the JSON of `reminders/<user>.json` and the
/// fields of a Postgres row). Field names are a contract: add, never rename.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reminder {
    /// Short and unique among the user's reminders (`/session reminders
    /// cancel <id>`).
    pub id: String,
    pub text: String,
    /// The time it is for (the occurrence, for a repeating one).
    pub at: DateTime<Utc>,
    /// When a broker next tries to post it: `at`, or later after a post
    /// failed.
    pub due: DateTime<Utc>,
    /// A 5-field cron rule read in `timezone`; none for a one-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<String>,
    /// The IANA zone the rule and the times shown are read in.
    pub timezone: String,
    pub place: Place,
    pub created: DateTime<Utc>,
    pub state: State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<DateTime<Utc>>,
    /// Posts that failed for this occurrence.
    #[serde(default)]
    pub attempts: u32,
    /// A time that passed without the reminder being posted, until the
    /// user is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<DateTime<Utc>>,
}

impl Reminder {
    /// Whether it still waits for a time (listed, counted toward the limit).
    pub fn is_pending(&self) -> bool {
        self.state != State::Done
    }

    /// Whether a broker should claim it at `now`.
    pub fn is_due(&self, now: DateTime<Utc>) -> bool {
        self.state == State::Active && self.due <= now
    }

    /// Whether it is claimed by a broker that did not finish in time.
    pub fn is_abandoned(&self, now: DateTime<Utc>) -> bool {
        self.state == State::Sending && self.claimed_at.is_none_or(|at| (now - at).num_seconds() >= CLAIM_SECS)
    }

    /// The reminder claimed at `now`.
    pub fn claimed(mut self, now: DateTime<Utc>) -> Reminder {
        self.state = State::Sending;
        self.claimed_at = Some(now);
        self
    }

    /// The reminder after its claim ended as `finish`; `None` once there
    /// is nothing left to keep.
    pub fn finished(mut self, finish: &Finish) -> Option<Reminder> {
        self.claimed_at = None;
        match *finish {
            Finish::Posted { next } | Finish::Missed { next } => {
                if matches!(finish, Finish::Missed { .. }) {
                    self.missed = Some(self.at);
                }
                self.attempts = 0;
                match next {
                    Some(next) => {
                        self.state = State::Active;
                        self.at = next;
                        self.due = next;
                    }
                    None => self.state = State::Done,
                }
            }
            Finish::Retry { at } => {
                self.state = State::Active;
                self.due = at;
                self.attempts += 1;
            }
        }
        (self.state != State::Done || self.missed.is_some()).then_some(self)
    }

    /// The reminder after an abandoned claim: missed, and on to its next
    /// time if it repeats.
    pub fn abandoned(self) -> Option<Reminder> {
        let next = self.next_after(self.at);
        self.finished(&Finish::Missed { next })
    }

    /// The repeating reminder's next time after `after`, if it repeats.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let rule = self.repeat.as_deref()?;
        Repeat::parse(rule, &self.timezone).ok()?.next_after(after)
    }
}

/// How a claimed reminder's post ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Posted; `next` is a repeating one's next time.
    Posted { next: Option<DateTime<Utc>> },
    /// Not posted and not to be (too late, or its broker died posting it):
    /// the user is told later.
    Missed { next: Option<DateTime<Utc>> },
    /// The post failed; try again at `at`.
    Retry { at: DateTime<Utc> },
}

/// A claimed reminder and whose it is.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub user: crate::SafeName,
    pub reminder: Reminder,
}

/// Checks a reminder's text: 1 to [`MAX_TEXT_CHARS`] characters, not only
/// blanks, no control characters but newlines and tabs. The refusal is said to the user.
pub fn check_text(text: &str) -> Result<&str, &'static str> {
    let text = text.trim();
    if text.is_empty() {
        return Err("A reminder needs words: what should I remind you of?");
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err("That reminder is too long: at most 1000 characters.");
    }
    // NUL and the like: a database column cannot hold NUL, and a chat
    // shows none of them.
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err("A reminder's text cannot hold control characters.");
    }
    Ok(text)
}

/// A new reminder id: 6 characters from an alphabet without look-alikes.
pub fn new_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    (0..6)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether `zone` is an IANA time zone name this build knows.
pub fn parse_zone(zone: &str) -> Option<chrono_tz::Tz> {
    zone.parse::<chrono_tz::Tz>().ok()
}

#[cfg(test)]
mod tests;
