//! Repeat rules: a 5-field cron expression read on the user's wall clock
//! in their IANA zone (croner parses and steps the rule on local times;
//! chrono-tz maps each local time to an instant). Daylight saving: a local
//! time the clocks skip (02:30 on a spring-forward night) fires once, at
//! the first minute after the gap (03:00); a local time that happens twice
//! (01:30 on a fall-back night) fires once, at its first occurrence.

use super::MIN_REPEAT_MINUTES;
use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Why a repeat rule was refused (said to the user as is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RepeatError {
    #[error(
        "I can't read that repeat rule. Use a 5-field cron expression (minute hour day month weekday), like `0 9 * * MON` for every Monday at 09:00."
    )]
    Unreadable,
    #[error("That repeats too often: at most once every 10 minutes.")]
    TooOften,
    #[error("That repeat rule never fires.")]
    Never,
    #[error("I don't know that time zone; use an IANA name like Europe/Lisbon.")]
    Zone,
}

/// A parsed rule in its zone.
#[derive(Clone, Debug)]
pub struct Repeat {
    cron: Cron,
    zone: Tz,
}

/// Occurrences checked for the minimum spacing (a year of a daily rule;
/// rules that fire in bursts show one within their first few).
const SPACING_SAMPLE: usize = 400;

impl Repeat {
    /// Parses `rule` (exactly 5 fields) in `zone`.
    pub fn parse(rule: &str, zone: &str) -> Result<Repeat, RepeatError> {
        let zone = super::parse_zone(zone).ok_or(RepeatError::Zone)?;
        if rule.split_whitespace().count() != 5 || rule.len() > 200 {
            return Err(RepeatError::Unreadable);
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser.parse(rule.trim()).map_err(|_| RepeatError::Unreadable)?;
        Ok(Repeat { cron, zone })
    }

    /// Parses `rule` and checks that it fires after `now`, and at most
    /// once every [`MIN_REPEAT_MINUTES`].
    pub fn checked(rule: &str, zone: &str, now: DateTime<Utc>) -> Result<Repeat, RepeatError> {
        let repeat = Repeat::parse(rule, zone)?;
        let local = now.with_timezone(&repeat.zone).naive_local();
        let mut times = repeat.cron.iter_after(local).take(SPACING_SAMPLE);
        let mut last = times.next().ok_or(RepeatError::Never)?;
        for next in times {
            if next - last < Duration::minutes(MIN_REPEAT_MINUTES) {
                return Err(RepeatError::TooOften);
            }
            last = next;
        }
        Ok(repeat)
    }

    /// The first time the rule fires strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut local = after.with_timezone(&self.zone).naive_local();
        // A fall-back hour can put a few local matches at or before
        // `after`; the bound only stops a rule that never fires.
        for _ in 0..64 {
            let next = self.cron.find_next_occurrence(&local, false).ok()?;
            let at = self.instant(next)?;
            if at > after {
                return Some(at);
            }
            local = next;
        }
        None
    }

    /// The instant of the local time `local`: the first of two in a
    /// fall-back hour; the end of the gap for one the clocks skip.
    fn instant(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        let mut probe = local;
        // Gaps are at most a few hours (most are one).
        for _ in 0..=(4 * 60) {
            match self.zone.from_local_datetime(&probe) {
                LocalResult::Single(t) => return Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(first, _) => return Some(first.with_timezone(&Utc)),
                LocalResult::None => probe += Duration::minutes(1),
            }
        }
        None
    }
}
