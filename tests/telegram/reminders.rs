//! Reminders over Telegram, end to end: the real binary and the fake Bot
//! API. A reminder set by `/session remind +5s` arrives in the chat after
//! its time, once, and is in the user's log as the bot's message; it is
//! posted once across a restart in between; the model's `reminder_set`
//! tool call (from the fake model) makes one, with the current time on the
//! user's clock in the model's instructions.

use super::{ADA, Mnemo, stm_records, text_message, user};
use mnemo_sessions::Role;
use mnemo_testkit::telegram::FakeBotApi;
use serde_json::json;
use std::time::{Duration, Instant};
use support::FakeModel;

use super::support;

/// The texts the bot sent to `chat`, in order.
fn sent_to(api: &FakeBotApi, chat: i64) -> Vec<String> {
    api.calls("sendMessage")
        .iter()
        .filter(|c| {
            c.params["chat_id"].as_i64() == Some(chat) || c.params["chat_id"].as_str() == Some(&*chat.to_string())
        })
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits for the reminder `text` in ADA's chat; how long after `since`.
async fn reminder_arrives(api: &FakeBotApi, text: &str, since: Instant) -> Duration {
    let wanted = format!("⏰ Reminder: {text}");
    api.wait_until("the reminder", || sent_to(api, ADA).contains(&wanted).then_some(()))
        .await;
    let elapsed = since.elapsed();
    eprintln!(
        "reminder arrived {:.2} s after the command was sent",
        elapsed.as_secs_f64()
    );
    elapsed
}

/// How many times `text` was posted as a reminder, after waiting long
/// enough for a second post to show.
async fn posted_times(api: &FakeBotApi, text: &str) -> usize {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let wanted = format!("⏰ Reminder: {text}");
    sent_to(api, ADA).iter().filter(|t| **t == wanted).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_by_command_arrives_once_and_is_in_the_log() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session remind +5s drink water"));
    let confirmed = api.wait_for_calls("sendMessage", 1).await[0].params["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(confirmed.starts_with("I'll remind you on "), "{confirmed}");
    let took = reminder_arrives(&api, "drink water", sent).await;
    assert!(took >= Duration::from_secs(5), "not before its time: {took:?}");
    assert_eq!(posted_times(&api, "drink water").await, 1);
    let log = stm_records(&mnemo.state(), ADA);
    let posted = log
        .iter()
        .find(|r| r.text == "⏰ Reminder: drink water")
        .expect("in the log");
    assert_eq!(posted.role, Role::Assistant);
    assert_eq!(posted.chat_id.as_deref(), Some(ADA.to_string().as_str()));
    // A follow-up has the reminder in its context.
    api.push_message(text_message(ADA, user(ADA, "Ada"), "done, I drank it"));
    api.wait_for_calls("sendMessage", 3).await;
    let request = support::request_text(model.chat_requests().last().unwrap());
    assert!(request.contains("⏰ Reminder: drink water"), "{request}");
    assert!(sent_to(&api, ADA)[0].contains("/session reminders cancel"));
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_before_a_restart_arrives_once_after_it() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mut mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session remind +6s feed the cat"));
    api.wait_for_calls("sendMessage", 1).await;
    mnemo.restart();
    let took = reminder_arrives(&api, "feed the cat", sent).await;
    assert!(took >= Duration::from_secs(6), "{took:?}");
    assert_eq!(posted_times(&api, "feed the cat").await, 1);
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_reminder_set_call_makes_a_reminder_that_arrives() {
    let (model, model_url) = FakeModel::start().await;
    model.script_tools(vec![
        vec![("reminder_set", json!({"when": "+5s", "text": "call the bank"}))],
        vec![],
    ]);
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let sent = Instant::now();
    api.push_message(text_message(
        ADA,
        user(ADA, "Ada"),
        "remind me in five seconds to call the bank",
    ));
    api.wait_for_calls("sendMessage", 1).await;
    let first = &model.chat_requests()[0];
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        ["reminder_set", "reminder_list", "reminder_cancel"]
            .iter()
            .all(|t| tools.contains(t)),
        "{tools:?}"
    );
    let system = support::request_text(first);
    assert!(system.contains("The current time is 20"), "{system}");
    assert!(system.contains("(UTC, the user's timezone)"), "{system}");
    // The tool's result went back to the model.
    let second = serde_json::to_string(&model.chat_requests()[1]).unwrap();
    assert!(second.contains("set: id "), "{second}");
    reminder_arrives(&api, "call the bank", sent).await;
    assert_eq!(posted_times(&api, "call the bank").await, 1);
    mnemo.stop(&api).await;
}

/// `mnemo run` on Postgres with Telegram by webhook on a port of its own
/// (two of them behind the fake's "load balancer").
struct WebhookBroker {
    child: Option<std::process::Child>,
    url: String,
    home: std::path::PathBuf,
}

impl WebhookBroker {
    fn start(dir: &std::path::Path, index: usize, model_url: &str, api: &FakeBotApi, db_url: &str) -> WebhookBroker {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let home = dir.join(format!("broker-{index}"));
        std::fs::create_dir_all(home.join("state")).unwrap();
        let config = json!({
            "stateDir": home.join("state"),
            "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" },
            "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                       "model": "fake-1", "timeoutSecs": 10, "maxRetries": 0 },
            "channels": { "console": { "enabled": false },
                          "telegram": { "enabled": true, "apiUrl": api.url, "mode": "webhook",
                                        "webhookUrl": "https://lb.example.invalid/telegram",
                                        "webhookListen": format!("127.0.0.1:{port}") } },
            "limits": { "userMessagesPerMinute": 0 },
        });
        std::fs::write(home.join("config.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let mut broker = WebhookBroker {
            child: None,
            url: format!("http://127.0.0.1:{port}"),
            home,
        };
        if index == 0 {
            for args in [&["store", "migrate"][..], &["access", "policy", "telegram", "open"]] {
                let out = broker.command(db_url).args(args).output().unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let stderr = std::fs::File::create(broker.home.join("stderr.log")).unwrap();
        let child = broker
            .command(db_url)
            .arg("run")
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn();
        broker.child = Some(child.unwrap());
        broker
    }

    fn command(&self, db_url: &str) -> std::process::Command {
        let mut cmd = support::mnemo(&self.home.join("config.json"), &self.home);
        cmd.env("TELEGRAM_BOT_TOKEN", mnemo_testkit::telegram::TOKEN)
            .env("TELEGRAM_WEBHOOK_SECRET", "e2e_webhook-secret")
            .env("MNEMO_DATABASE_URL", db_url);
        cmd
    }

    /// SIGKILL.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for WebhookBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_on_postgres_post_each_reminder_once_even_when_one_is_killed() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let db = mnemo_testkit::pg::database();
    let dir = tempfile::tempdir().unwrap();
    let mut brokers: Vec<WebhookBroker> = (0..2)
        .map(|i| WebhookBroker::start(dir.path(), i, &model_url, &api, &db.url()))
        .collect();
    api.wait_for_calls("setWebhook", 2).await;
    api.deliver_to(brokers.iter().map(|b| b.url.clone()).collect(), Duration::from_secs(10));
    // Ten reminders due while both brokers race for them, ten after one of
    // them is killed (11 s later: a broker killed holding a claim would
    // make that reminder a miss, which is not what this test is about).
    let users: Vec<i64> = (1..=20).map(|n| 1000 + n).collect();
    for (i, u) in users.iter().enumerate() {
        let when = if i < 10 { "+4s" } else { "+15s" };
        api.push_message(text_message(
            *u,
            user(*u, "U"),
            &format!("/session remind {when} tea for {u}"),
        ));
    }
    api.wait_until("every reminder confirmed", || {
        users
            .iter()
            .all(|u| sent_to(&api, *u).iter().any(|t| t.starts_with("I'll remind you")))
            .then_some(())
    })
    .await;
    let posted = |u: &i64| sent_to(&api, *u).contains(&format!("⏰ Reminder: tea for {u}"));
    api.wait_until("the first ten", || users[..10].iter().all(posted).then_some(()))
        .await;
    brokers[0].kill();
    api.wait_until("the other ten, by the survivor", || {
        users[10..].iter().all(posted).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for u in &users {
        let wanted = format!("⏰ Reminder: tea for {u}");
        let times = sent_to(&api, *u).iter().filter(|t| **t == wanted).count();
        assert_eq!(times, 1, "user {u}'s reminder is posted once");
    }
}
