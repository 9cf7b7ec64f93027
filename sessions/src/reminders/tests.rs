use super::*;
use chrono::{Duration, TimeZone};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn reminder(id: &str, at: DateTime<Utc>, repeat: Option<&str>) -> Reminder {
    Reminder {
        id: id.into(),
        text: "call the bank".into(),
        at,
        due: at,
        repeat: repeat.map(str::to_string),
        timezone: "America/New_York".into(),
        place: Place {
            chat_id: "42".into(),
            thread_id: None,
            group: false,
            platform: None,
        },
        created: at - Duration::hours(1),
        state: State::Active,
        claimed_at: None,
        attempts: 0,
        missed: None,
    }
}

#[test]
fn relative_and_absolute_times_are_read_and_bounded() {
    let now = t("2026-12-05T10:00:00Z");
    assert_eq!(parse_when("+90s", now), Ok(now + Duration::seconds(90)));
    assert_eq!(parse_when("+10m", now), Ok(now + Duration::minutes(10)));
    assert_eq!(parse_when(" +2h ", now), Ok(now + Duration::hours(2)));
    assert_eq!(parse_when("+3d", now), Ok(now + Duration::days(3)));
    assert_eq!(
        parse_when("2026-12-06T09:00:00+01:00", now),
        Ok(t("2026-12-06T08:00:00Z"))
    );
    for bad in [
        "+",
        "+m",
        "+10",
        "+10w",
        "+-5m",
        "tomorrow",
        "2026-12-06 09:00",
        "+1.5h",
        "+99999999999d",
    ] {
        assert_eq!(parse_when(bad, now), Err(WhenError::Unreadable), "{bad}");
    }
    assert_eq!(parse_when("2026-12-05T09:59:59Z", now), Err(WhenError::Past));
    assert_eq!(parse_when("+0s", now), Err(WhenError::Past));
    assert_eq!(parse_when("+1900d", now), Err(WhenError::TooFar));
    assert_eq!(parse_when("2032-01-01T00:00:00Z", now), Err(WhenError::TooFar));
}

#[test]
fn repeat_rules_are_five_fields_and_not_too_often() {
    let now = t("2026-12-05T10:00:00Z");
    assert!(Repeat::checked("0 9 * * MON", "Europe/Lisbon", now).is_ok());
    assert!(Repeat::checked("*/10 * * * *", "UTC", now).is_ok());
    assert_eq!(
        Repeat::checked("*/5 * * * *", "UTC", now).err(),
        Some(RepeatError::TooOften)
    );
    assert_eq!(
        Repeat::checked("0,5 9 * * *", "UTC", now).err(),
        Some(RepeatError::TooOften)
    );
    assert_eq!(
        Repeat::checked("* * * * *", "UTC", now).err(),
        Some(RepeatError::TooOften)
    );
    for bad in [
        "0 9 * *",
        "0 0 9 * * *",
        "0 9 * * * 2027",
        "61 9 * * *",
        "every monday",
        "",
    ] {
        assert_eq!(
            Repeat::checked(bad, "UTC", now).err(),
            Some(RepeatError::Unreadable),
            "{bad}"
        );
    }
    assert_eq!(
        Repeat::checked("0 9 * * *", "Mars/Olympus", now).err(),
        Some(RepeatError::Zone)
    );
}

#[test]
fn a_rule_follows_the_wall_clock_in_its_zone() {
    let r = Repeat::parse("0 9 * * *", "Europe/Lisbon").unwrap();
    // Winter: Lisbon is UTC+0; summer: UTC+1.
    assert_eq!(r.next_after(t("2026-12-05T10:00:00Z")), Some(t("2026-12-06T09:00:00Z")));
    assert_eq!(r.next_after(t("2027-06-01T10:00:00Z")), Some(t("2027-06-02T08:00:00Z")));
}

#[test]
fn a_skipped_local_time_fires_once_at_the_end_of_the_gap() {
    // New York springs forward on 2027-03-14: 02:00 EST becomes 03:00 EDT.
    let r = Repeat::parse("30 2 * * *", "America/New_York").unwrap();
    let first = r.next_after(t("2027-03-13T12:00:00Z")).unwrap();
    assert_eq!(first, t("2027-03-14T07:00:00Z"), "03:00 EDT, once");
    let second = r.next_after(first).unwrap();
    assert_eq!(second, t("2027-03-15T06:30:00Z"), "02:30 EDT the next day");
}

#[test]
fn a_repeated_local_time_fires_once_at_its_first_occurrence() {
    // New York falls back on 2026-11-01: 01:00-02:00 happens twice.
    let r = Repeat::parse("30 1 * * *", "America/New_York").unwrap();
    let first = r.next_after(t("2026-10-31T12:00:00Z")).unwrap();
    assert_eq!(first, t("2026-11-01T05:30:00Z"), "01:30 EDT");
    assert_eq!(
        r.next_after(first),
        Some(t("2026-11-02T06:30:00Z")),
        "not 01:30 EST the same night"
    );
}

#[test]
fn a_post_moves_a_reminder_on_or_ends_it() {
    let at = t("2026-12-07T14:00:00Z");
    let now = at + Duration::seconds(1);
    let once = reminder("aaaaaa", at, None).claimed(now);
    assert_eq!(once.state, State::Sending);
    assert!(!once.is_abandoned(now + Duration::seconds(CLAIM_SECS - 1)));
    assert!(once.is_abandoned(now + Duration::seconds(CLAIM_SECS)));
    assert_eq!(once.clone().finished(&Finish::Posted { next: None }), None);

    let weekly = reminder("bbbbbb", at, Some("0 9 * * MON")).claimed(now);
    let next = weekly.next_after(at).unwrap();
    assert_eq!(next, t("2026-12-14T14:00:00Z"), "Monday 09:00 in New York");
    let moved = weekly.clone().finished(&Finish::Posted { next: Some(next) }).unwrap();
    assert_eq!(
        (moved.state, moved.at, moved.due, moved.claimed_at),
        (State::Active, next, next, None)
    );

    let retry = once
        .clone()
        .finished(&Finish::Retry {
            at: now + Duration::seconds(30),
        })
        .unwrap();
    assert_eq!((retry.state, retry.at, retry.attempts), (State::Active, at, 1));
    assert!(!retry.is_due(now) && retry.is_due(now + Duration::seconds(30)));

    // A broker died posting it: kept as missed, never posted again.
    let lost = once.abandoned().unwrap();
    assert_eq!((lost.state, lost.missed), (State::Done, Some(at)));
    assert!(!lost.is_pending() && !lost.is_due(now + Duration::days(1)));
    let lost_weekly = weekly.abandoned().unwrap();
    assert_eq!(
        (lost_weekly.state, lost_weekly.at, lost_weekly.missed),
        (State::Active, next, Some(at))
    );
}

#[test]
fn a_book_keeps_the_limit_cancels_and_tells_a_miss_once() {
    let at = t("2026-12-07T14:00:00Z");
    let mut book = Book::default();
    book.add(reminder("aaaaaa", at, None), 2).unwrap();
    book.add(reminder("bbbbbb", at - Duration::hours(1), None), 2).unwrap();
    assert_eq!(book.add(reminder("cccccc", at, None), 2), Err(BookError::Full));
    assert_eq!(
        book.pending().iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["bbbbbb", "aaaaaa"]
    );
    assert!(book.cancel("bbbbbb"));
    assert!(!book.cancel("bbbbbb"));
    assert_eq!(book.add(reminder("aaaaaa", at, None), 2), Err(BookError::Taken));
    let missed = book.reminders[0].clone().claimed(at).abandoned();
    book.put("aaaaaa", missed);
    assert!(book.pending().is_empty());
    assert!(book.take_missed("other chat").is_empty());
    let told = book.take_missed("42");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].at, at);
    assert!(book.take_missed("42").is_empty(), "told once");
    assert!(book.reminders.is_empty());
    assert!(book.is_empty());
}

#[test]
fn texts_and_zones_are_checked() {
    assert_eq!(check_text("  call the bank "), Ok("call the bank"));
    assert!(check_text("   ").is_err());
    assert!(check_text(&"x".repeat(MAX_TEXT_CHARS)).is_ok());
    assert!(check_text(&"x".repeat(MAX_TEXT_CHARS + 1)).is_err());
    assert!(check_text("call\0the bank").is_err());
    assert!(check_text("call\u{1b}[2Jthe bank").is_err());
    assert_eq!(check_text("buy:\n- milk\n- eggs"), Ok("buy:\n- milk\n- eggs"));
    assert!(parse_zone("Europe/Lisbon").is_some());
    assert!(parse_zone("../etc/passwd").is_none());
    let id = new_id();
    assert_eq!(id.len(), 6);
    assert_ne!(new_id(), id);
    let _ = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0);
}
