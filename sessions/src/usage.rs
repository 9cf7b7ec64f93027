//! Model tokens spent, per user and day, for `limits.userTokensPerDay`,
//! `limits.channelTokensPerDay` and `mnemo sessions usage`: the words both
//! stores share ([`Purpose`], [`Spent`], [`Days`], [`UsageRow`]) and the
//! one rule of the day a spend counts on ([`day_in`]).
//!
//! A spend is counted twice: on the user's row, by the user's own day
//! (midnight in their timezone), and on the channel's total, by the
//! channel's day (the app's timezone). A user's rows go with
//! `/session clear all`; the channel's totals hold no user and stay.

use crate::names::SafeName;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// What the tokens were spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    /// The model's answer to a question (its first call).
    Answer,
    /// The further calls of an answer's memory tool rounds.
    Tools,
    /// The summarizer folding a user's older messages.
    Summary,
    /// Daily and weekly summaries written at maintenance (the channel's).
    Digest,
}

impl Purpose {
    pub const ALL: [Purpose; 4] = [Purpose::Answer, Purpose::Tools, Purpose::Summary, Purpose::Digest];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Answer => "answer",
            Purpose::Tools => "tools",
            Purpose::Summary => "summary",
            Purpose::Digest => "digest",
        }
    }

    pub fn parse(s: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// Tokens of one or more model calls for one purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spent {
    pub purpose: Purpose,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

impl Spent {
    pub fn total(&self) -> u64 {
        self.tokens_in.saturating_add(self.tokens_out)
    }
}

/// The days a spend counts on: the user's own and the channel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Days {
    pub user: NaiveDate,
    pub channel: NaiveDate,
}

impl Days {
    /// The days of `now` for a user in `user_tz` on a channel in `channel_tz`.
    pub fn of(now: DateTime<Utc>, user_tz: Tz, channel_tz: Tz) -> Days {
        Days {
            user: day_in(now, user_tz),
            channel: day_in(now, channel_tz),
        }
    }
}

/// The calendar day `now` falls on in `tz`: a day's budget resets at
/// midnight there.
pub fn day_in(now: DateTime<Utc>, tz: Tz) -> NaiveDate {
    now.with_timezone(&tz).date_naive()
}

/// One row of a usage report: a user's (or, `user: None`, the channel's
/// total) tokens for one purpose on one day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub user: Option<SafeName>,
    pub day: NaiveDate,
    pub purpose: Purpose,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// A user's rows as their `usage/<user>.json` holds them on the files:
/// day → purpose → `{"in", "out"}` (what an export from another store
/// writes, so a bundle reads the same whichever store made it).
pub fn ledger_json(rows: &[UsageRow]) -> Vec<u8> {
    let mut ledger: std::collections::BTreeMap<NaiveDate, std::collections::BTreeMap<Purpose, serde_json::Value>> =
        Default::default();
    for r in rows {
        ledger
            .entry(r.day)
            .or_default()
            .insert(r.purpose, serde_json::json!({"in": r.tokens_in, "out": r.tokens_out}));
    }
    serde_json::to_vec_pretty(&ledger).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_turns_at_midnight_in_the_zone_given() {
        // 23:30 UTC on 30 Nov: still 30 Nov in UTC and New York, 1 Dec in Tokyo.
        let now = "2026-11-30T23:30:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(day_in(now, chrono_tz::UTC).to_string(), "2026-11-30");
        assert_eq!(day_in(now, chrono_tz::Asia::Tokyo).to_string(), "2026-12-01");
        assert_eq!(day_in(now, chrono_tz::America::New_York).to_string(), "2026-11-30");
        let days = Days::of(now, chrono_tz::Asia::Tokyo, chrono_tz::UTC);
        assert_ne!(days.user, days.channel);
    }

    #[test]
    fn purposes_read_back_their_names() {
        for p in Purpose::ALL {
            assert_eq!(Purpose::parse(p.as_str()), Some(p));
        }
        assert_eq!(Purpose::parse("other"), None);
    }
}
