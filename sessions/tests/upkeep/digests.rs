//! Daily and weekly summaries: written once, at the summary hour of the
//! configured zone, caught up after an outage, bounded per run, and never
//! held up by one user's failures.

use super::support::*;
use chrono::NaiveDate;
use chrono_tz::{America::New_York, Europe::Berlin, UTC};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::maintenance::digests::read_digest;
use mnemo_sessions::maintenance::state::MaintenanceState;
use mnemo_sessions::summarizer::SummaryKind;
use mnemo_sessions::{Layout, SafeName};
use std::sync::atomic::Ordering;

fn day(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

fn daily(layout: &Layout, user: &str, d: NaiveDate) -> std::path::PathBuf {
    layout.daily_path(&SafeName::of(user), d)
}

fn set_state(layout: &Layout, json: &str) {
    std::fs::create_dir_all(layout.root()).unwrap();
    std::fs::write(layout.maintenance_state_path(), json).unwrap();
}

#[tokio::test]
async fn catch_up_after_a_three_day_outage_writes_each_missed_daily_once() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    for (ts, text) in [
        ("2026-03-10T09:00:00Z", "tue"),
        ("2026-03-11T09:00:00Z", "wed"),
        ("2026-03-12T09:00:00Z", "thu"),
        ("2026-03-13T09:00:00Z", "fri"),
    ] {
        say(&stm, "alice", ts, text).await;
    }
    say(&stm, "bob", "2026-03-12T15:00:00Z", "bob thu").await;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);

    // Last run before the outage: Wednesday after 03:00 does Tuesday.
    let report = run_at(&m, "2026-03-11T04:00:00Z").await;
    assert_eq!((fake.calls(), report.dailies_written.len()), (1, 1));
    assert!(daily(&layout, "alice", day(2026, 3, 10)).exists());

    // Down through the runs of Thursday, Friday and Saturday; back on Sunday.
    let report = run_at(&m, "2026-03-15T05:00:00Z").await;
    assert!(report.failures.is_empty(), "{report}");
    assert_eq!(fake.calls(), 5, "wed, thu, fri for alice and thu for bob");
    for d in [11, 12, 13] {
        assert!(daily(&layout, "alice", day(2026, 3, d)).exists(), "alice {d}");
    }
    assert!(daily(&layout, "bob", day(2026, 3, 12)).exists());
    assert!(
        !daily(&layout, "bob", day(2026, 3, 11)).exists(),
        "no messages, no file"
    );
    let days: Vec<_> = fake
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{:?}", s.kind))
        .collect();
    let unique: std::collections::BTreeSet<_> = days.iter().collect();
    assert_eq!(
        days.len() - 1,
        unique.len(),
        "only alice and bob share a day; nothing asked twice: {days:?}"
    );
    let state = MaintenanceState::load(&layout.maintenance_state_path()).unwrap();
    assert_eq!(state.daily_done_through, Some(day(2026, 3, 14)));

    // Starting again, at once or an hour later, asks for nothing.
    run_at(&m, "2026-03-15T05:00:00Z").await;
    run_at(&m, "2026-03-15T06:00:00Z").await;
    assert_eq!(fake.calls(), 5);
}

#[tokio::test]
async fn a_daily_summary_holds_that_days_messages_and_its_count() {
    let (_dir, stm) = channel();
    say(&stm, "alice", "2026-03-10T09:00:00Z", "first").await;
    say(&stm, "alice", "2026-03-10T23:59:59Z", "last").await;
    say(&stm, "alice", "2026-03-11T00:00:00Z", "next day").await;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);
    run_at(&m, "2026-03-11T03:00:00Z").await;
    let (meta, body) = read_digest(
        stm.layout().state_root(),
        &daily(stm.layout(), "alice", day(2026, 3, 10)),
    )
    .unwrap()
    .unwrap();
    let meta = meta.unwrap();
    assert_eq!(
        (meta.user.as_str(), meta.period.as_str(), meta.messages),
        ("alice", "2026-03-10", 2)
    );
    assert_eq!(meta.generated, utc("2026-03-11T03:00:00Z"));
    assert_eq!(body, "Summary of: first | last\n");
}

#[tokio::test]
async fn an_existing_daily_and_a_day_without_messages_cost_no_model_call() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    say(&stm, "alice", "2026-03-10T09:00:00Z", "hello").await;
    let planted = daily(&layout, "alice", day(2026, 3, 10));
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::write(&planted, "written by an earlier version\n").unwrap();
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);
    let report = run_at(&m, "2026-03-14T04:00:00Z").await;
    assert_eq!(fake.calls(), 0, "{report}");
    assert_eq!(read(&planted), "written by an earlier version\n");
}

#[tokio::test]
async fn berlin_summary_hour_in_the_spring_forward_gap_runs_when_the_clock_resumes() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(
        &layout,
        r#"{"dailyDoneThrough":"2026-03-27","weeklyDoneThrough":"2026-W12"}"#,
    );
    say(&stm, "alice", "2026-03-28T10:00:00Z", "saturday").await;
    // 23:30 UTC is already Sunday 00:30 in Berlin.
    say(&stm, "alice", "2026-03-28T23:30:00Z", "sunday night").await;
    let mut config = SessionConfig::default();
    config.compacting.daily_summary_hour = 2; // skipped on 2026-03-29
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, config, Berlin, &fake);

    run_at(&m, "2026-03-29T00:59:59Z").await;
    assert_eq!(fake.calls(), 0);
    run_at(&m, "2026-03-29T01:00:00Z").await;
    assert_eq!(fake.calls(), 1);
    assert!(daily(&layout, "alice", day(2026, 3, 28)).exists());
    assert_eq!(fake.seen.lock().unwrap()[0].texts, vec!["saturday"]);
}

#[tokio::test]
async fn new_york_fall_back_day_has_25_hours_of_messages_in_one_daily() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(
        &layout,
        r#"{"dailyDoneThrough":"2026-10-31","weeklyDoneThrough":"2026-W44"}"#,
    );
    for (ts, text) in [
        ("2026-11-01T04:30:00Z", "00:30 EDT"),
        ("2026-11-01T05:30:00Z", "01:30 EDT"),
        ("2026-11-01T06:30:00Z", "01:30 EST"),
        ("2026-11-02T04:30:00Z", "23:30 EST"),
        ("2026-11-02T05:30:00Z", "next day"),
    ] {
        say(&stm, "alice", ts, text).await;
    }
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), New_York, &fake);
    run_at(&m, "2026-11-02T07:59:59Z").await;
    assert_eq!(fake.calls(), 0, "03:00 EST is 08:00 UTC");
    run_at(&m, "2026-11-02T08:00:00Z").await;
    assert_eq!(fake.calls(), 1);
    assert_eq!(
        fake.seen.lock().unwrap()[0].texts,
        vec!["00:30 EDT", "01:30 EDT", "01:30 EST", "23:30 EST"]
    );
    assert!(daily(&layout, "alice", day(2026, 11, 1)).exists());
}

#[tokio::test]
async fn weekly_summary_of_iso_week_53_is_made_from_its_dailies_after_the_year_end() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(
        &layout,
        r#"{"dailyDoneThrough":"2026-12-27","weeklyDoneThrough":"2026-W52"}"#,
    );
    for ts in [
        "2026-12-31T12:00:00Z",
        "2027-01-01T12:00:00Z",
        "2027-01-01T13:00:00Z",
        "2027-01-02T12:00:00Z",
    ] {
        say(&stm, "alice", ts, ts).await;
    }
    say(&stm, "alice", "2027-01-04T01:00:00Z", "week one").await;
    let mut config = SessionConfig::default();
    config.compacting.weekly_summary_day = 1; // Monday
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, config, UTC, &fake);

    // Before Monday 03:00 the dailies through Saturday are due, no weekly.
    let report = run_at(&m, "2027-01-04T02:59:59Z").await;
    assert_eq!((report.dailies_written.len(), report.weeklies_written.len()), (3, 0));
    // At 03:00 Sunday's daily (no messages) and then week 53's weekly.
    let report = run_at(&m, "2027-01-04T03:00:00Z").await;
    assert_eq!(
        report.weeklies_written,
        vec![layout.weekly_path(&SafeName::of("alice"), 2026, 53)]
    );
    assert_eq!(fake.calls(), 4);
    let seen = fake.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        seen.kind,
        SummaryKind::Weekly {
            iso_year: 2026,
            iso_week: 53
        }
    );
    assert_eq!(seen.notes.len(), 3);
    assert!(seen.notes[0].contains("Thursday 2026-12-31"), "{:?}", seen.notes);
    let (meta, _) = read_digest(
        layout.state_root(),
        &layout.weekly_path(&SafeName::of("alice"), 2026, 53),
    )
    .unwrap()
    .unwrap();
    let meta = meta.unwrap();
    assert_eq!((meta.period.as_str(), meta.messages), ("2026-W53", 4));
    assert!(
        !layout.weekly_path(&SafeName::of("alice"), 2027, 1).exists(),
        "the current week is not summarized"
    );

    run_at(&m, "2027-01-04T09:00:00Z").await;
    assert_eq!(fake.calls(), 4);
}

#[tokio::test]
async fn per_run_cap_and_one_failing_user_do_not_stop_the_others_and_leftovers_come_next_run() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(
        &layout,
        r#"{"dailyDoneThrough":"2026-03-09","weeklyDoneThrough":"2026-W11"}"#,
    );
    for user in ["a", "b", "bad"] {
        say(&stm, user, "2026-03-10T09:00:00Z", &format!("{user} day one")).await;
        say(&stm, user, "2026-03-11T09:00:00Z", &format!("{user} day two")).await;
    }
    let mut config = SessionConfig::default();
    config.scheduler.max_summaries_per_run = 4;
    config.scheduler.summary_concurrency = 2;
    let fake = FakeSummarizer::new();
    fake.fail_on("bad day");
    let m = maintenance(&stm, config, UTC, &fake);

    let report = run_at(&m, "2026-03-12T04:00:00Z").await;
    assert_eq!(fake.calls(), 4, "the cap");
    assert!(fake.max_in_flight.load(Ordering::SeqCst) <= 2, "the concurrency bound");
    assert_eq!(report.dailies_written.len(), 3);
    assert_eq!(report.summaries_deferred, 2);
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].user, Some(SafeName::of("bad")));
    assert!(report.failures[0].reason.contains("fake outage"), "{report}");
    let state = MaintenanceState::load(&layout.maintenance_state_path()).unwrap();
    assert_eq!(state.daily_done_through, Some(day(2026, 3, 9)), "nothing is skipped");

    fake.heal();
    let report = run_at(&m, "2026-03-12T05:00:00Z").await;
    assert_eq!(fake.calls(), 7, "the failed one and the two left over");
    assert!(report.failures.is_empty(), "{report}");
    for user in ["a", "b", "bad"] {
        for d in [10, 11] {
            assert!(daily(&layout, user, day(2026, 3, d)).exists(), "{user} {d}");
        }
    }
    let state = MaintenanceState::load(&layout.maintenance_state_path()).unwrap();
    assert_eq!(state.daily_done_through, Some(day(2026, 3, 11)));
    assert!(state.failures.is_empty());
    run_at(&m, "2026-03-12T06:00:00Z").await;
    assert_eq!(fake.calls(), 7);
}

#[tokio::test]
async fn a_user_whose_summaries_keep_failing_is_given_up_after_max_failures() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(
        &layout,
        r#"{"dailyDoneThrough":"2026-03-09","weeklyDoneThrough":"2026-W11"}"#,
    );
    say(&stm, "bad", "2026-03-10T09:00:00Z", "always fails").await;
    say(&stm, "good", "2026-03-10T09:00:00Z", "fine").await;
    let mut config = SessionConfig::default();
    config.compacting.max_failures = 2;
    let fake = FakeSummarizer::new();
    fake.fail_on("always fails");
    let m = maintenance(&stm, config, UTC, &fake);

    run_at(&m, "2026-03-11T04:00:00Z").await;
    let report = run_at(&m, "2026-03-11T05:00:00Z").await;
    assert!(report.failures[0].reason.contains("given up"), "{report}");
    assert_eq!(fake.calls(), 3, "good once, bad twice");
    let state = MaintenanceState::load(&layout.maintenance_state_path()).unwrap();
    assert_eq!(state.daily_done_through, Some(day(2026, 3, 10)));
    run_at(&m, "2026-03-11T06:00:00Z").await;
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn with_compaction_disabled_no_summary_is_asked_for_and_the_days_pass() {
    let (_dir, stm) = channel();
    say(&stm, "alice", "2026-03-10T09:00:00Z", "hello").await;
    let mut config = SessionConfig::default();
    config.compacting.enabled = false;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, config, UTC, &fake);
    run_at(&m, "2026-03-11T04:00:00Z").await;
    assert_eq!(fake.calls(), 0);
    let state = MaintenanceState::load(&stm.layout().maintenance_state_path()).unwrap();
    assert_eq!(state.daily_done_through, Some(day(2026, 3, 10)));
}

#[tokio::test]
async fn a_corrupt_state_file_stops_summaries_and_expiry_and_is_left_for_the_operator() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    set_state(&layout, "{ not json");
    say(&stm, "alice", "2026-03-01T09:00:00Z", "old").await;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);
    let report = run_at(&m, "2026-03-20T04:00:00Z").await;
    assert_eq!(fake.calls(), 0);
    assert!(report.archived_users.is_empty());
    assert_eq!(report.failures.len(), 1);
    assert!(report.failures[0].reason.contains("maintenance.json"), "{report}");
    assert_eq!(read(&layout.maintenance_state_path()), "{ not json");
    assert!(layout.messages_path(&SafeName::of("alice")).exists());
}

#[tokio::test]
async fn a_summary_is_not_written_back_for_data_cleared_while_it_was_being_made() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    say(&stm, "alice", "2026-03-10T09:00:00Z", "secret").await;
    let fake = FakeSummarizer::new();
    let stm_dir = layout.stm_dir(&SafeName::of("alice"));
    // What `/session clear all` does, while the model is answering.
    *fake.during_call.lock().unwrap() = Some(Box::new(move || std::fs::remove_dir_all(&stm_dir).unwrap()));
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);
    let report = run_at(&m, "2026-03-11T04:00:00Z").await;
    assert_eq!(fake.calls(), 1);
    assert!(report.dailies_written.is_empty(), "{report}");
    assert!(!layout.summaries_dir(&SafeName::of("alice")).exists());
}

#[tokio::test]
async fn next_run_is_the_sooner_of_the_summary_hour_and_the_cleanup_interval() {
    let (_dir, stm) = channel();
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), Berlin, &fake);
    // Hourly cleanup comes first in the middle of the day.
    assert_eq!(m.next_due(utc("2026-03-28T12:00:00Z")), utc("2026-03-28T13:00:00Z"));
    // 03:00 Berlin on the spring-forward night is 01:00 UTC, 40 minutes away.
    assert_eq!(m.next_due(utc("2026-03-29T00:20:00Z")), utc("2026-03-29T01:00:00Z"));
    // Right at the hour, the next one is tomorrow's or the interval.
    assert_eq!(m.next_due(utc("2026-03-29T01:00:00Z")), utc("2026-03-29T02:00:00Z"));
}
