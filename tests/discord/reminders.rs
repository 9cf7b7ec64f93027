//! Reminders over Discord, end to end: `/session remind +5s …` typed in a
//! DM is posted to that DM after its time, once, as a message of its own.

use super::{DM_CHANNEL, TOKEN, config, dm, mnemo_run, stop};
use mnemo_testkit::discord::FakeDiscord;
use std::time::{Duration, Instant};
use support::FakeModel;

use super::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_in_a_dm_is_posted_there_once_after_its_time() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));
    discord.identify().await;
    let sent = Instant::now();
    discord.dispatch(
        "MESSAGE_CREATE",
        dm("1300000000000000071", "/session remind +5s stretch"),
    );
    let confirmed = discord.channel_messages(DM_CHANNEL, 1).await;
    assert!(
        confirmed[0].content().starts_with("I'll remind you"),
        "{}",
        confirmed[0].content()
    );
    let posts = discord.channel_messages(DM_CHANNEL, 2).await;
    let took = sent.elapsed();
    eprintln!(
        "reminder arrived {:.2} s after the command was sent",
        took.as_secs_f64()
    );
    assert_eq!(posts[1].content(), "⏰ Reminder: stretch");
    assert!(took >= Duration::from_secs(5), "{took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reminders = discord
        .messages_in(DM_CHANNEL)
        .into_iter()
        .filter(|m| m == "⏰ Reminder: stretch")
        .count();
    assert_eq!(reminders, 1, "posted once");
    assert!(model.chat_requests().is_empty());
    let logs = stop(child, dir.path());
    assert!(!logs.contains("stretch"), "the reminder's text is never logged");
}
