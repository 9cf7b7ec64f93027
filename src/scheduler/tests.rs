//! The scheduler loop on tokio's paused clock: the catch-up run at start,
//! the run at the daily summary hour, the run every `cleanupIntervalMinutes`,
//! and nothing after `stop` — hours of schedule in no real time. The loop's
//! clock follows tokio's, so what it sleeps and what it hands maintenance
//! agree; the maintenance state file says when each run happened.

use super::*;
use crate::bench::{self, instant::CHANNEL, instant::TimedChannel};
use chrono::{NaiveDate, TimeZone};
use mnemo_channels::Channel;
use mnemo_sessions::Layout;
use mnemo_sessions::maintenance::state::MaintenanceState;
use tokio::time::Instant;

fn state(root: &std::path::Path) -> MaintenanceState {
    MaintenanceState::load(&Layout::new(root, CHANNEL).maintenance_state_path()).unwrap()
}

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, h, m, s).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_loop_catches_up_at_start_then_runs_at_the_summary_hour_and_every_interval_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), CHANNEL);
    std::fs::create_dir_all(layout.root()).unwrap();
    let config = serde_json::json!({
        "stm": { "fsync": false },
        "compacting": { "dailySummaryHour": 21 },
        "scheduler": { "cleanupIntervalMinutes": 60 }
    });
    std::fs::write(layout.config_path(), config.to_string()).unwrap();
    let channel: Arc<dyn Channel> = Arc::new(TimedChannel::new());
    let app = App::new(bench::app_parts(dir.path()), vec![channel]).unwrap();

    let (started, start) = (at(20, 30, 0), Instant::now());
    let clock: Clock = Arc::new(move || started + (Instant::now() - start));
    let until = |t: DateTime<Utc>| tokio::time::sleep_until(start + (t - started).to_std().unwrap());
    let (stop_tx, stop) = watch::channel(false);
    let scheduler = Scheduler::start_with_clock(app, stop, clock);

    until(at(20, 30, 1)).await;
    let caught_up = state(dir.path());
    assert_eq!(caught_up.last_run, Some(at(20, 30, 0)), "the catch-up runs at start");
    let yesterday = NaiveDate::from_ymd_opt(2026, 3, 1);
    assert!(
        caught_up.daily_done_through < yesterday,
        "before 21:00, yesterday is not due"
    );

    // Next due: 21:00 (the summary hour) comes before 21:30 (the interval);
    // the loop lands one second after the due instant.
    until(at(21, 20, 0)).await;
    let at_the_hour = state(dir.path());
    assert_eq!(at_the_hour.last_run, Some(at(21, 0, 1)), "the run at the summary hour");
    assert_eq!(at_the_hour.daily_done_through, yesterday, "it did yesterday's dailies");

    // Then every interval: 22:00:01 is due, landed on a second later.
    until(at(22, 30, 0)).await;
    assert_eq!(state(dir.path()).last_run, Some(at(22, 0, 2)), "the hourly run");
    until(at(23, 30, 0)).await;
    assert_eq!(state(dir.path()).last_run, Some(at(23, 0, 3)), "and the next");

    stop_tx.send(true).unwrap();
    scheduler.stop().await;
    until(at(23, 59, 0) + chrono::TimeDelta::hours(3)).await;
    assert_eq!(state(dir.path()).last_run, Some(at(23, 0, 3)), "no run after stop");
}
