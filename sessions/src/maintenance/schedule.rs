//! The pure time rules of maintenance: when a local day's digest is due,
//! which ISO week a weekly run summarizes, and which days and weeks a run
//! must do given what was done before (catch-up).
//!
//! Everything here is a function of an explicit `now` and time zone; it never
//! reads the clock or the disk. Local wall-clock times that do not exist (a
//! spring-forward gap) resolve to the first instant after the gap; times that
//! happen twice (fall back) resolve to the first occurrence.

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How far back the first run (no state file yet) looks for days to
/// summarize: the last week, so a fresh install or an upgrade from the old
/// broker gets recent dailies without a model call for every day of history.
pub const FIRST_RUN_LOOKBACK_DAYS: u64 = 7;

/// One ISO 8601 week (`iso_year` is the week-based year, which differs from
/// the calendar year around New Year: 2027-01-03 is in 2026-W53).
/// Ordered by time. Serialized as `"2026-W53"`, the weekly file's stem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WeekId {
    pub iso_year: i32,
    pub iso_week: u32,
}

impl WeekId {
    /// The ISO week a date falls in.
    pub fn of(day: NaiveDate) -> Self {
        let w = day.iso_week();
        WeekId {
            iso_year: w.year(),
            iso_week: w.week(),
        }
    }

    /// The Monday that starts this week; `None` for a week that does not
    /// exist (week 53 of a 52-week year), which `of` never produces.
    pub fn monday(self) -> Option<NaiveDate> {
        NaiveDate::from_isoywd_opt(self.iso_year, self.iso_week, Weekday::Mon)
    }

    /// The seven local days of the week, Monday first.
    pub fn days(self) -> Vec<NaiveDate> {
        self.monday()
            .map(|m| m.iter_days().take(7).collect())
            .unwrap_or_default()
    }

    /// The week after this one (crosses week 52/53 and the year correctly).
    pub fn next(self) -> Self {
        self.monday()
            .and_then(|m| m.checked_add_days(Days::new(7)))
            .map(WeekId::of)
            .unwrap_or(self)
    }

    /// The week before this one.
    pub fn prev(self) -> Self {
        self.monday()
            .and_then(|m| m.checked_sub_days(Days::new(7)))
            .map(WeekId::of)
            .unwrap_or(self)
    }

    /// Parses `"2026-W53"`.
    pub fn parse(text: &str) -> Option<Self> {
        let (year, week) = text.split_once("-W")?;
        let id = WeekId {
            iso_year: year.parse().ok()?,
            iso_week: week.parse().ok()?,
        };
        id.monday().map(|_| id)
    }
}

impl fmt::Display for WeekId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-W{:02}", self.iso_year, self.iso_week)
    }
}

impl Serialize for WeekId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for WeekId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        WeekId::parse(&raw).ok_or_else(|| serde::de::Error::custom(format!("{raw:?} is not an ISO week like 2026-W09")))
    }
}

/// The instant a local wall-clock time happens in `tz`. A time inside a
/// spring-forward gap becomes the first instant after the gap (the clock
/// jumps over it); a repeated time becomes its first occurrence.
pub fn resolve_local(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    if let Some(t) = tz.from_local_datetime(&local).earliest() {
        return t.with_timezone(&Utc);
    }
    // Inside a gap. Gaps are at most a day long (Pacific/Apia skipped
    // 2011-12-30), so step forward by minutes until the clock exists again;
    // the first existing minute is the end of the gap.
    let mut probe = local;
    for _ in 0..(26 * 60) {
        probe += chrono::Duration::minutes(1);
        if let Some(t) = tz.from_local_datetime(&probe).earliest() {
            return t.with_timezone(&Utc);
        }
    }
    // Unreachable for real zone data; reading the wall time as UTC keeps the
    // rule total instead of panicking.
    local.and_utc()
}

/// `[start, end)` in UTC of one local calendar day: 23 hours on a
/// spring-forward day, 25 on a fall-back day.
pub fn local_day_bounds(tz: Tz, day: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
    let next = day.succ_opt().unwrap_or(day);
    (
        resolve_local(tz, day.and_time(NaiveTime::MIN)),
        resolve_local(tz, next.and_time(NaiveTime::MIN)),
    )
}

/// The local day an instant falls on.
pub fn local_day(tz: Tz, at: DateTime<Utc>) -> NaiveDate {
    at.with_timezone(&tz).date_naive()
}

/// When the digests of the day before `run_day` are due: `hour`:00 local on
/// `run_day` (DESIGN §3 `compacting.dailySummaryHour`).
pub fn run_instant(tz: Tz, run_day: NaiveDate, hour: u32) -> DateTime<Utc> {
    let time = NaiveTime::from_hms_opt(hour.min(23), 0, 0).unwrap_or(NaiveTime::MIN);
    resolve_local(tz, run_day.and_time(time))
}

/// The latest local day whose daily digest is due at `now`: yesterday once
/// today's summary hour has passed, the day before yesterday until then.
pub fn latest_due_day(now: DateTime<Utc>, tz: Tz, hour: u32) -> NaiveDate {
    let today = local_day(tz, now);
    let back = if now >= run_instant(tz, today, hour) { 1 } else { 2 };
    today.checked_sub_days(Days::new(back)).unwrap_or(today)
}

/// The latest ISO week whose weekly digest is due at `now`. A weekly run
/// happens on `weekday` at `hour` local and summarizes the previous,
/// completed ISO week — never the week the run falls in.
pub fn latest_due_week(now: DateTime<Utc>, tz: Tz, hour: u32, weekday: Weekday) -> WeekId {
    let today = local_day(tz, now);
    let mut run_day = today;
    // The most recent run day not after today whose run instant has passed.
    for _ in 0..8 {
        if run_day.weekday() == weekday && now >= run_instant(tz, run_day, hour) {
            break;
        }
        run_day = run_day.pred_opt().unwrap_or(run_day);
    }
    WeekId::of(run_day).prev()
}

/// What one run must do, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub days: Vec<NaiveDate>,
    pub weeks: Vec<WeekId>,
}

/// The days and weeks due at `now` that are not yet done. `daily_done` and
/// `weekly_done` are the last day and week completed by earlier runs (the
/// persisted state); `None` means this is the first run, which starts
/// [`FIRST_RUN_LOOKBACK_DAYS`] back for dailies and at the latest due week
/// for weeklies.
pub fn plan(
    now: DateTime<Utc>,
    tz: Tz,
    hour: u32,
    weekday: Weekday,
    daily_done: Option<NaiveDate>,
    weekly_done: Option<WeekId>,
) -> Plan {
    let last_day = latest_due_day(now, tz, hour);
    let first_day = match daily_done {
        Some(done) => done.succ_opt().unwrap_or(done),
        None => last_day
            .checked_sub_days(Days::new(FIRST_RUN_LOOKBACK_DAYS - 1))
            .unwrap_or(last_day),
    };
    let days = first_day.iter_days().take_while(|d| *d <= last_day).collect();

    let last_week = latest_due_week(now, tz, hour, weekday);
    let mut weeks = Vec::new();
    let mut week = weekly_done.map(WeekId::next).unwrap_or(last_week);
    while week <= last_week {
        weeks.push(week);
        let next = week.next();
        if next == week {
            break;
        }
        week = next;
    }
    Plan { days, weeks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::{America::New_York, Europe::Berlin, UTC};

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn daily_digest_becomes_due_at_the_summary_hour_in_the_zone() {
        // 03:00 in Berlin in winter is 02:00 UTC.
        assert_eq!(latest_due_day(utc("2026-01-15T01:59:59Z"), Berlin, 3), d(2026, 1, 13));
        assert_eq!(latest_due_day(utc("2026-01-15T02:00:00Z"), Berlin, 3), d(2026, 1, 14));
        assert_eq!(latest_due_day(utc("2026-01-15T02:00:00Z"), UTC, 3), d(2026, 1, 13));
    }

    #[test]
    fn summary_hour_inside_the_spring_forward_gap_runs_when_the_clock_resumes() {
        // Berlin 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        assert_eq!(run_instant(Berlin, d(2026, 3, 29), 2), utc("2026-03-29T01:00:00Z"));
        assert_eq!(latest_due_day(utc("2026-03-29T00:59:59Z"), Berlin, 2), d(2026, 3, 27));
        assert_eq!(latest_due_day(utc("2026-03-29T01:00:00Z"), Berlin, 2), d(2026, 3, 28));
        // 03:00 CEST that day is also 01:00 UTC, an hour earlier than usual.
        assert_eq!(run_instant(Berlin, d(2026, 3, 29), 3), utc("2026-03-29T01:00:00Z"));
    }

    #[test]
    fn summary_hour_repeated_at_fall_back_runs_on_its_first_occurrence() {
        // Berlin 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:00 happens twice.
        assert_eq!(run_instant(Berlin, d(2026, 10, 25), 2), utc("2026-10-25T00:00:00Z"));
        assert_eq!(run_instant(Berlin, d(2026, 10, 25), 3), utc("2026-10-25T02:00:00Z"));
        // New York 2026-11-01: 01:00 happens twice; the first is 05:00 UTC.
        assert_eq!(run_instant(New_York, d(2026, 11, 1), 1), utc("2026-11-01T05:00:00Z"));
    }

    #[test]
    fn local_days_are_23_or_25_hours_across_dst_changes() {
        let (s, e) = local_day_bounds(New_York, d(2026, 3, 8));
        assert_eq!((s, e), (utc("2026-03-08T05:00:00Z"), utc("2026-03-09T04:00:00Z")));
        let (s, e) = local_day_bounds(New_York, d(2026, 11, 1));
        assert_eq!((s, e), (utc("2026-11-01T04:00:00Z"), utc("2026-11-02T05:00:00Z")));
        let (s, e) = local_day_bounds(Berlin, d(2026, 10, 25));
        assert_eq!(e - s, chrono::Duration::hours(25));
    }

    #[test]
    fn iso_week_53_and_the_year_end_are_handled() {
        assert_eq!(
            WeekId::of(d(2026, 12, 28)),
            WeekId {
                iso_year: 2026,
                iso_week: 53
            }
        );
        assert_eq!(
            WeekId::of(d(2027, 1, 3)),
            WeekId {
                iso_year: 2026,
                iso_week: 53
            }
        );
        assert_eq!(
            WeekId::of(d(2027, 1, 4)),
            WeekId {
                iso_year: 2027,
                iso_week: 1
            }
        );
        let w53 = WeekId {
            iso_year: 2026,
            iso_week: 53,
        };
        assert_eq!(
            w53.next(),
            WeekId {
                iso_year: 2027,
                iso_week: 1
            }
        );
        assert_eq!(
            w53.prev(),
            WeekId {
                iso_year: 2026,
                iso_week: 52
            }
        );
        assert_eq!(
            WeekId {
                iso_year: 2027,
                iso_week: 1
            }
            .prev(),
            w53
        );
        assert_eq!(w53.days().first(), Some(&d(2026, 12, 28)));
        assert_eq!(w53.days().last(), Some(&d(2027, 1, 3)));
        assert_eq!(w53.to_string(), "2026-W53");
        assert_eq!(WeekId::parse("2026-W53"), Some(w53));
        assert_eq!(WeekId::parse("2025-W53"), None, "2025 has 52 weeks");
    }

    #[test]
    fn weekly_run_summarizes_the_previous_completed_week_not_the_current_one() {
        // Sunday 2027-01-03 is the last day of 2026-W53: a Sunday run then
        // summarizes W52, and W53 is done on Sunday 2027-01-10.
        let sun = Weekday::Sun;
        assert_eq!(
            latest_due_week(utc("2027-01-03T02:59:59Z"), UTC, 3, sun),
            WeekId {
                iso_year: 2026,
                iso_week: 51
            }
        );
        assert_eq!(
            latest_due_week(utc("2027-01-03T03:00:00Z"), UTC, 3, sun),
            WeekId {
                iso_year: 2026,
                iso_week: 52
            }
        );
        assert_eq!(
            latest_due_week(utc("2027-01-10T03:00:00Z"), UTC, 3, sun),
            WeekId {
                iso_year: 2026,
                iso_week: 53
            }
        );
        // A Monday run summarizes the week that ended the night before.
        let mon = Weekday::Mon;
        assert_eq!(
            latest_due_week(utc("2027-01-04T03:00:00Z"), UTC, 3, mon),
            WeekId {
                iso_year: 2026,
                iso_week: 53
            }
        );
        assert_eq!(
            latest_due_week(utc("2027-01-04T02:00:00Z"), UTC, 3, mon),
            WeekId {
                iso_year: 2026,
                iso_week: 52
            }
        );
    }

    #[test]
    fn weekly_run_day_follows_local_time_not_utc() {
        // Monday 03:00 in New York is 08:00 UTC in January.
        let mon = Weekday::Mon;
        let before = latest_due_week(utc("2027-01-04T07:59:00Z"), New_York, 3, mon);
        let after = latest_due_week(utc("2027-01-04T08:00:00Z"), New_York, 3, mon);
        assert_eq!((before.iso_week, after.iso_week), (52, 53));
    }

    #[test]
    fn catch_up_plans_each_missed_day_once_across_the_year_end() {
        let now = utc("2027-01-02T04:00:00Z");
        let plan = plan(
            now,
            UTC,
            3,
            Weekday::Mon,
            Some(d(2026, 12, 29)),
            Some(WeekId {
                iso_year: 2026,
                iso_week: 51,
            }),
        );
        assert_eq!(plan.days, vec![d(2026, 12, 30), d(2026, 12, 31), d(2027, 1, 1)]);
        assert_eq!(
            plan.weeks,
            vec![WeekId {
                iso_year: 2026,
                iso_week: 52
            }]
        );
    }

    #[test]
    fn nothing_is_planned_when_everything_due_is_done() {
        let now = utc("2026-03-05T10:00:00Z");
        let week = latest_due_week(now, UTC, 3, Weekday::Sun);
        assert_eq!(
            plan(now, UTC, 3, Weekday::Sun, Some(d(2026, 3, 4)), Some(week)),
            Plan::default()
        );
    }

    #[test]
    fn first_run_looks_back_a_bounded_week_only() {
        let now = utc("2026-03-20T10:00:00Z");
        let plan = plan(now, UTC, 3, Weekday::Sun, None, None);
        assert_eq!(plan.days.len(), FIRST_RUN_LOOKBACK_DAYS as usize);
        assert_eq!(plan.days.first(), Some(&d(2026, 3, 13)));
        assert_eq!(plan.days.last(), Some(&d(2026, 3, 19)));
        assert_eq!(plan.weeks, vec![latest_due_week(now, UTC, 3, Weekday::Sun)]);
    }
}
