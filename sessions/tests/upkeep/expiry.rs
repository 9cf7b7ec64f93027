//! STM expiry: idle short-term memory is archived and removed at exactly
//! `stmExpireDays`, nothing is lost, and the rolling summary lives on in the
//! daily summary of the last active day.

use super::support::*;
use chrono_tz::UTC;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::maintenance::digests::read_digest;
use mnemo_sessions::maintenance::expiry::KEPT_SUMMARY_HEADING;
use mnemo_sessions::{SafeName, archive, summary};

fn write_rolling_summary(stm: &mnemo_sessions::stm::Stm, user: &str, body: &str) {
    let user = SafeName::of(user);
    let mut file = summary::empty(&user);
    file.body = body.to_string();
    summary::write(stm.layout(), &user, &file).unwrap();
}

#[tokio::test]
async fn idle_stm_is_archived_exactly_at_the_expiry_boundary_and_nothing_is_lost() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    let alice = SafeName::of("alice");
    say(&stm, "alice", "2026-03-10T10:00:00Z", "one").await;
    say(&stm, "alice", "2026-03-10T11:00:00Z", "two").await;
    say(&stm, "bob", "2026-03-12T11:00:00Z", "still here").await;
    write_rolling_summary(&stm, "alice", "Alice likes tea.\n");
    let before = stm.read_all(&alice).unwrap().records;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);

    let report = run_at(&m, "2026-03-13T10:59:59Z").await;
    assert!(report.archived_users.is_empty(), "one second short of three days");
    assert!(layout.messages_path(&alice).exists());

    let report = run_at(&m, "2026-03-13T11:00:00Z").await;
    assert!(report.failures.is_empty(), "{report}");
    assert_eq!(report.archived_users, vec![alice.clone()]);
    assert_eq!(archive::read_all(&layout, &alice).unwrap(), before);
    assert!(!layout.messages_path(&alice).exists() && !layout.summary_path(&alice).exists());
    assert!(!layout.stm_dir(&alice).exists(), "the emptied folder is pruned");
    assert!(layout.messages_path(&SafeName::of("bob")).exists());

    let daily = layout.daily_path(&alice, chrono::NaiveDate::from_ymd_opt(2026, 3, 10).unwrap());
    let text = read(&daily);
    assert!(text.contains("Summary of: one | two"), "{text}");
    assert!(
        text.contains(KEPT_SUMMARY_HEADING) && text.contains("Alice likes tea."),
        "{text}"
    );

    run_at(&m, "2026-03-14T11:00:00Z").await;
    assert_eq!(read(&daily), text, "a second run adds nothing");
    assert_eq!(archive::files(&layout, &alice).unwrap().len(), 1);
}

#[tokio::test]
async fn expiry_waits_while_the_last_days_daily_summary_is_pending() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    let alice = SafeName::of("alice");
    say(&stm, "alice", "2026-03-10T10:00:00Z", "flaky").await;
    let fake = FakeSummarizer::new();
    fake.fail_on("flaky");
    let m = maintenance(&stm, SessionConfig::default(), UTC, &fake);

    let report = run_at(&m, "2026-03-14T04:00:00Z").await;
    assert_eq!(report.expiry_deferred, vec![alice.clone()]);
    assert!(layout.messages_path(&alice).exists());

    fake.heal();
    let report = run_at(&m, "2026-03-14T05:00:00Z").await;
    assert_eq!(report.dailies_written.len(), 1);
    assert_eq!(report.archived_users, vec![alice.clone()]);
    assert_eq!(archive::read_all(&layout, &alice).unwrap().len(), 1);
}

#[tokio::test]
async fn without_a_daily_the_kept_rolling_summary_becomes_that_days_file() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    let alice = SafeName::of("alice");
    say(&stm, "alice", "2026-03-10T10:00:00Z", "hi").await;
    write_rolling_summary(&stm, "alice", "They said hi.");
    let mut config = SessionConfig::default();
    config.compacting.enabled = false;
    let fake = FakeSummarizer::new();
    let m = maintenance(&stm, config, UTC, &fake);
    let report = run_at(&m, "2026-03-20T04:00:00Z").await;
    assert_eq!(report.archived_users, vec![alice.clone()]);
    let daily = layout.daily_path(&alice, chrono::NaiveDate::from_ymd_opt(2026, 3, 10).unwrap());
    let (meta, body) = read_digest(layout.state_root(), &daily).unwrap().unwrap();
    let meta = meta.unwrap();
    assert_eq!(
        (meta.source.as_deref(), meta.messages),
        (Some("expired-stm-summary"), 1)
    );
    assert!(body.contains("They said hi."), "{body}");
    assert_eq!(fake.calls(), 0);
}
