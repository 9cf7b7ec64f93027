//! Reminders on the console (the real `mnemo chat`, stdin left open as on
//! a terminal) and through the real `App` (fakes only at the platform and
//! the model): with two brokers on one Postgres each reminder is posted once;
//! a repeating reminder fires at each of its times; one found late is
//! posted saying so; one too late, or whose post kept failing, is told as
//! missed once, in its chat, at the user's next message; a group's
//! reminder goes to the group with its text only. Times are handed to the
//! delivery round (`mnemo::reminders::pass`) directly, as its loop's clock
//! would.

use crate::support;

use chrono::{TimeDelta, Utc};
use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, ChatKind, OutboundBody};
use mnemo_pg::PgStore;
use mnemo_testkit::pg;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{FakeChannel, FakeModel, app_parts, dm, eventually};

/// A broker with the fake channel `fake` (anyone may talk), on the files
/// or on `store`.
async fn broker(state: &std::path::Path, url: &str, store: Option<PgStore>) -> (App, Arc<FakeChannel>) {
    match &store {
        Some(store) => crate::postgres::open_access_in(store).await,
        None => support::open_access(state, "fake", &["group-1"]),
    }
    let limits = LimitsConfig {
        user_messages_per_minute: 0,
        ..LimitsConfig::default()
    };
    let parts = mnemo::app::AppParts {
        store,
        ..app_parts(state, url, limits)
    };
    let (channel, _inbox) = FakeChannel::new("fake");
    let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).unwrap();
    (app, channel)
}

/// Texts sent to `chat`.
fn sent_to(channel: &FakeChannel, chat: &str) -> Vec<String> {
    channel
        .sent()
        .iter()
        .filter(|o| o.chat_id == chat)
        .filter_map(|o| match &o.body {
            OutboundBody::Text(t) => Some(t.clone()),
            OutboundBody::File { .. } => None,
        })
        .collect()
}

/// Sends `text` as `user` and waits for the `n`th message to their DM.
async fn say(app: &App, channel: &FakeChannel, user: &str, id: &str, text: &str, n: usize) -> String {
    app.submit(dm("fake", user, id, text)).await;
    let chat = format!("dm-{user}");
    let reply = eventually(format!("message {n} to {user}"), async || {
        sent_to(channel, &chat).get(n - 1).cloned()
    })
    .await;
    app.wait_turns(Duration::from_secs(10)).await;
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_on_postgres_post_each_reminder_once() {
    let (_model, url) = FakeModel::start().await;
    let db = pg::database();
    let connect = || PgStore::connect(&db.url(), 16, Duration::from_secs(10)).unwrap();
    let store = connect();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let brokers = [
        broker(one.path(), &url, Some(store)).await,
        broker(two.path(), &url, Some(connect())).await,
    ];
    let users: Vec<String> = (0..20).map(|u| format!("u{u}")).collect();
    for (i, user) in users.iter().enumerate() {
        let (app, channel) = &brokers[i % 2];
        let set = say(
            app,
            channel,
            user,
            &format!("{user}-1"),
            &format!("/session remind +2s tea for {user}"),
            1,
        )
        .await;
        assert!(set.starts_with("I'll remind you"), "{set}");
    }
    // Both brokers' delivery loops race for every reminder.
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let loops = [
        mnemo::reminders::Delivery::start(brokers[0].0.clone(), stopped.clone()),
        mnemo::reminders::Delivery::start(brokers[1].0.clone(), stopped.clone()),
    ];
    let posts = |user: &str| {
        let wanted = format!("⏰ Reminder: tea for {user}");
        brokers
            .iter()
            .map(|(_, c)| {
                sent_to(c, &format!("dm-{user}"))
                    .iter()
                    .filter(|t| **t == wanted)
                    .count()
            })
            .sum::<usize>()
    };
    eventually("every reminder posted", async || users.iter().all(|u| posts(u) >= 1)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for user in &users {
        assert_eq!(posts(user), 1, "{user}'s reminder is posted once");
    }
    let by = |b: usize| brokers[b].1.sent().len();
    eprintln!("posts by broker: {} and {}", by(0), by(1));
    for delivery in loops {
        delivery.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_reminder_fires_at_each_time_late_ones_say_so_and_missed_ones_are_told_once() {
    let (model, url) = FakeModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let (app, channel) = broker(state.path(), &url, None).await;
    // The model sets a reminder every 10 minutes (the most often allowed),
    // first in an hour.
    model.script_tools(vec![
        vec![(
            "reminder_set",
            json!({"when": "+1h", "text": "stand up", "repeat": "*/10 * * * *"}),
        )],
        vec![],
    ]);
    say(
        &app,
        &channel,
        "ada",
        "m1",
        "remind me to stand up every ten minutes",
        1,
    )
    .await;
    let list = say(&app, &channel, "ada", "m2", "/session reminders", 2).await;
    assert!(list.contains("repeats `*/10 * * * *` — stand up"), "{list}");
    let first = app.memories()["fake"]
        .store
        .user(&mnemo_sessions::SafeName::of("ada"))
        .await
        .unwrap()
        .reminders()
        .await
        .unwrap()[0]
        .at;
    // Its time, then its next time: posted each time, once.
    mnemo::reminders::pass(&app, first).await;
    mnemo::reminders::pass(&app, first + TimeDelta::seconds(1)).await;
    let second = first + TimeDelta::minutes(10) - TimeDelta::seconds(first.timestamp() % 600);
    mnemo::reminders::pass(&app, second).await;
    let posted: Vec<String> = sent_to(&channel, "dm-ada").into_iter().skip(2).collect();
    assert_eq!(posted, ["⏰ Reminder: stand up", "⏰ Reminder: stand up"]);
    // The bot was down for an hour: posted late, once, saying so.
    mnemo::reminders::pass(&app, second + TimeDelta::hours(1)).await;
    let late = sent_to(&channel, "dm-ada").pop().unwrap();
    assert!(
        late.starts_with("⏰ Reminder: stand up (late: the bot was offline at "),
        "{late}"
    );
    // Down for two days: past `reminders.maxLateHours`, missed, and told
    // once at the next message in that chat.
    let sent = sent_to(&channel, "dm-ada").len();
    mnemo::reminders::pass(&app, second + TimeDelta::days(2)).await;
    assert_eq!(sent_to(&channel, "dm-ada").len(), sent, "not posted");
    let told = say(&app, &channel, "ada", "m3", "morning", sent + 1).await;
    assert!(told.starts_with("While I was offline I missed reminders"), "{told}");
    assert!(told.contains("stand up"));
    let answer = sent_to(&channel, "dm-ada")[sent + 1].clone();
    assert_eq!(answer, "echo: morning");
    say(&app, &channel, "ada", "m4", "again", sent + 3).await;
    assert!(
        !sent_to(&channel, "dm-ada")[sent + 2..]
            .iter()
            .any(|t| t.starts_with("While I was offline")),
        "told once"
    );
    // The posts are in the log as the bot's messages.
    let log = support::stm_written(
        &mnemo_sessions::Layout::new(state.path(), "fake").messages_path(&mnemo_sessions::SafeName::of("ada")),
    );
    assert_eq!(
        log.iter()
            .filter(|r| r.text.starts_with("⏰ Reminder: stand up"))
            .count(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_in_a_group_goes_to_the_group_and_the_group_never_sees_a_dm_one() {
    let (model, url) = FakeModel::start().await;
    let state = tempfile::tempdir().unwrap();
    let (app, channel) = broker(state.path(), &url, None).await;
    // A reminder of Ada's own, set in her DM: never listed in the group.
    say(&app, &channel, "ada", "d1", "/session remind +2h see the dentist", 1).await;
    let mut message = dm("fake", "ada", "g1", "/session remind +1m water the office plant");
    message.chat_id = "group-1".into();
    message.chat_kind = ChatKind::Group;
    app.submit(message).await;
    eventually("the confirmation", async || !sent_to(&channel, "group-1").is_empty()).await;
    app.wait_turns(Duration::from_secs(10)).await;
    mnemo::reminders::pass(&app, Utc::now() + TimeDelta::minutes(2)).await;
    let group = sent_to(&channel, "group-1");
    assert_eq!(group.last().unwrap(), "⏰ Reminder: water the office plant");
    assert_eq!(sent_to(&channel, "dm-ada").len(), 1, "nothing more went to the DM");
    // The model asked in the group for Ada's reminders sees only the group's.
    model.script_tools(vec![vec![("reminder_list", json!({}))], vec![]]);
    let mut ask = dm("fake", "ada", "g2", "@bot what reminders do I have?");
    ask.chat_id = "group-1".into();
    ask.chat_kind = ChatKind::Group;
    app.submit(ask).await;
    eventually("the answer in the group", async || {
        sent_to(&channel, "group-1").len() >= 3
    })
    .await;
    app.wait_turns(Duration::from_secs(10)).await;
    let listed = serde_json::to_string(model.chat_requests().last().unwrap()).unwrap();
    assert!(listed.contains("water the office plant"), "{listed}");
    assert!(
        !listed.contains("dentist"),
        "a DM reminder never reaches a group's answer: {listed}"
    );
    // Counted, by outcome (never by text).
    let metrics = mnemo::ops::metrics::metrics().encode();
    for outcome in ["set", "delivered"] {
        let line = format!("mnemo_reminders_total{{channel=\"fake\",outcome=\"{outcome}\"}}");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    assert!(!metrics.contains("office plant"));
}

#[test]
fn a_reminder_set_on_the_console_prints_while_mnemo_chat_runs() {
    use std::io::{BufRead, Write};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_model, url) = rt.block_on(FakeModel::start());
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), &url, json!({}));
    let mut child = support::mnemo(&config, dir.path())
        .arg("chat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"/session remind +2s look up from the screen\n")
        .unwrap();
    stdin.flush().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !seen
        .iter()
        .any(|l: &String| l.contains("⏰ Reminder: look up from the screen"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no reminder on the console: {seen:?}"),
        }
    }
    assert!(seen.iter().any(|l| l.contains("I'll remind you")), "{seen:?}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
