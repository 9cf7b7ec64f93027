//! Reminders over Slack, end to end: `/session remind +5s …` in a direct
//! message is posted to that conversation after its time, once.

use super::{Bot, connected, count, socket_config};
use mnemo_testkit::slack::{FakeSlack, dm_event, events_envelope};
use std::time::{Duration, Instant};
use support::FakeModel;

use super::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_in_a_dm_is_posted_there_once_after_its_time() {
    let (model, model_url) = FakeModel::start().await;
    let fake = FakeSlack::start().await;
    let bot = Bot::start(&model_url, socket_config(&fake));
    connected(&fake, 1).await;
    let sent = Instant::now();
    fake.send(events_envelope(
        "env-1",
        "Ev1",
        dm_event("U1", "1700000001.000100", "/session remind +5s stretch"),
    ));
    fake.wait_until("the reminder", |f| count(f, "DU1", "⏰ Reminder: stretch") == 1)
        .await;
    let took = sent.elapsed();
    eprintln!(
        "reminder arrived {:.2} s after the command was sent",
        took.as_secs_f64()
    );
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert!(
        super::answers(&fake, "DU1")
            .iter()
            .any(|a| a.starts_with("I'll remind you")),
        "{:?}",
        super::answers(&fake, "DU1")
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count(&fake, "DU1", "⏰ Reminder: stretch"), 1, "posted once");
    assert!(model.chat_requests().is_empty());
    let (clean, logs) = bot.stop().await;
    assert!(clean);
    assert!(!logs.contains("stretch"), "the reminder's text is never logged");
}
