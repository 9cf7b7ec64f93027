//! Linked identities end to end: one `mnemo run` serving Telegram and Slack
//! (each on its fake), the real broker between. A fact told on Telegram is
//! not known on Slack until the person links the two accounts with a code
//! carried from one to the other (within ten minutes); after that it is
//! recalled there; two accounts that both have memory are merged (undo
//! takes the profile back; unlinking leaves the merged memory with the
//! home); a wrong, expired or replayed code is refused and five wrong ones
//! lock linking; a reminder set on one platform is posted there; unlinking
//! splits them again; `/session clear all` on either, or the operator's
//! `sessions forget`, forgets the person everywhere.

use super::{ADA, Mnemo, TOKEN, text_message, user};
use mnemo_channels::slack::THINKING;
use mnemo_testkit::model::{last_user_message, request_text};
use mnemo_testkit::slack::{self as fake_slack, FakeSlack, dm_event, events_envelope};
use mnemo_testkit::telegram::FakeBotApi;
use serde_json::json;
use support::FakeModel;

use super::support;

/// Ada's account on Slack, and her DM with the bot there.
const ADA_SLACK: &str = "UADA";
const ADA_DM: &str = "DUADA";

struct Both {
    api: FakeBotApi,
    slack: FakeSlack,
    model: FakeModel,
    mnemo: Mnemo,
    /// Telegram replies so far.
    telegram_replies: usize,
    slack_events: usize,
}

impl Both {
    async fn start() -> Both {
        Both::start_on(None).await
    }

    /// On the files, or on the Postgres database at `database`.
    async fn start_on(database: Option<String>) -> Both {
        let (model, model_url) = FakeModel::start().await;
        let api = FakeBotApi::start().await;
        let slack = FakeSlack::start().await;
        // No rate limit: Ada says more here than a person would in a minute.
        let mut config = json!({ "channels": {
            "console": { "enabled": false },
            "telegram": { "enabled": true, "apiUrl": api.url, "pollTimeoutSecs": 5 },
            "slack": { "enabled": true, "mode": "socket", "apiUrl": slack.api_url },
        }, "limits": { "userMessagesPerMinute": 0 }});
        let mut env = vec![
            ("SLACK_BOT_TOKEN", fake_slack::BOT_TOKEN.to_string()),
            ("SLACK_APP_TOKEN", fake_slack::APP_TOKEN.to_string()),
        ];
        if let Some(url) = database {
            let store = mnemo_pg::PgStore::connect(&url, 2, std::time::Duration::from_secs(5)).unwrap();
            mnemo_pg::migrate::migrate(&store).await.unwrap();
            for channel in ["telegram", "slack"] {
                mnemo::access::db::edit(&store, channel, |rules| rules.dm_policy = mnemo::access::DmPolicy::Open)
                    .await
                    .unwrap();
            }
            config["store"] = json!({ "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" });
            env.push(("MNEMO_DATABASE_URL", url));
        }
        let mnemo = Mnemo::launch(&api, &model_url, json!({}), config, json!({}), &env);
        let access = mnemo_sessions::Layout::new(mnemo.state(), "slack").access_path();
        std::fs::create_dir_all(access.parent().unwrap()).unwrap();
        std::fs::write(access, br#"{"dmPolicy": "open"}"#).unwrap();
        slack
            .wait_until("the bot's Socket Mode connection", |f| f.connections() == 1)
            .await;
        let _ = TOKEN;
        Both {
            api,
            slack,
            model,
            mnemo,
            telegram_replies: 0,
            slack_events: 0,
        }
    }

    /// Ada says `text` on Telegram; what the bot answered.
    async fn telegram(&mut self, text: &str) -> String {
        self.api.push_message(text_message(ADA, user(ADA, "Ada"), text));
        self.telegram_replies += 1;
        let sent = self.api.wait_for_calls("sendMessage", self.telegram_replies).await;
        sent[self.telegram_replies - 1].params["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Ada says `text` on Slack; what the bot answered.
    async fn slack(&mut self, text: &str) -> String {
        self.slack_events += 1;
        let n = self.slack_events;
        let before = answers(&self.slack).len();
        let ts = format!("1700000{n:03}.000100");
        self.slack.send(events_envelope(
            &format!("env-{n}"),
            &format!("Ev{n}"),
            dm_event(ADA_SLACK, &ts, text),
        ));
        self.slack
            .wait_until("an answer on Slack", |f| answers(f).len() > before)
            .await;
        answers(&self.slack).pop().unwrap()
    }

    /// The whole of the model's last request.
    fn asked(&self) -> String {
        request_text(&self.model.chat_requests().pop().unwrap())
    }
}

/// What the bot said in Ada's Slack DM (placeholders left out).
fn answers(slack: &FakeSlack) -> Vec<String> {
    slack
        .messages_in(ADA_DM)
        .into_iter()
        .filter(|t| t != THINKING)
        .collect()
}

/// The code in a `/session link` answer.
fn code_in(reply: &str) -> String {
    let line = reply
        .lines()
        .find(|l| l.starts_with("Your link code: "))
        .unwrap_or_else(|| panic!("{reply}"));
    line.trim_start_matches("Your link code: ").trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_told_on_telegram_is_recalled_on_slack_only_while_linked() {
    let mut b = Both::start().await;
    b.telegram("my locker code is 7731").await;
    // Not linked yet: Slack's Ada is a stranger to that memory.
    b.slack("what is my locker code?").await;
    assert!(!b.asked().contains("7731"), "known on Slack before linking");

    // Slack's account has a memory of its own now, as Telegram's has:
    // linking merges them, nothing of either left out.
    b.slack("/session remember I drive a red van").await;
    b.telegram("/session remember I live in Lisbon").await;
    let code = code_in(&b.telegram("/session link").await);
    let linked = b.slack(&format!("/session link {}", code.to_lowercase())).await;
    assert!(
        linked.starts_with(
            "Linked: your accounts now share one memory, kept with your telegram account. Both accounts had a memory"
        ),
        "{linked}"
    );
    // The code works once.
    let replayed = b.slack(&format!("/session link {code}")).await;
    assert_eq!(replayed, mnemo::people::replies::WRONG_CODE);
    let profile = b.telegram("/session profile").await;
    for fact in ["Lisbon", "red van"] {
        assert!(profile.contains(fact), "{fact} not in the merged profile: {profile}");
    }
    // Undo takes back what the merge did to the profile.
    let undone = b.slack("/session undo").await;
    assert!(undone.contains("profile"), "{undone}");
    let profile = b.slack("/session profile").await;
    assert!(profile.contains("Lisbon") && !profile.contains("red van"), "{profile}");
    let answer = b.slack("what is my locker code?").await;
    assert_eq!(answer, "echo: what is my locker code?");
    let asked = b.model.chat_requests().pop().unwrap();
    assert_eq!(last_user_message(&asked), "what is my locker code?");
    assert!(
        request_text(&asked).contains("my locker code is 7731"),
        "recalled on Slack"
    );
    // What is said on Slack is the same memory, back on Telegram.
    b.slack("my bike is the green one").await;
    b.telegram("which bike is mine?").await;
    assert!(b.asked().contains("my bike is the green one"));
    let listed = b.telegram("/session link").await;
    assert!(
        listed.contains("• telegram (this one), keeps the memory\n• slack"),
        "{listed}"
    );
    // A reminder set on Slack is kept with the shared memory and posted
    // on Slack, where it was set.
    let set = b.slack("/session remind +3s stretch").await;
    assert!(set.starts_with("I'll remind you on "), "{set}");
    b.slack
        .wait_until("the reminder on Slack", |f| {
            answers(f).iter().any(|t| t == "⏰ Reminder: stretch")
        })
        .await;
    let reminders = b.telegram("/session reminders").await;
    assert!(!reminders.contains("stretch"), "posted once, then gone: {reminders}");

    // Unlinked: Slack's account starts over; Telegram keeps all of it.
    let split = b.slack("/session unlink telegram").await;
    assert!(
        split.starts_with("Unlinked. Everything said while linked stays with the memory of your telegram account"),
        "{split}"
    );
    let answer = b.slack("what is my locker code?").await;
    let asked = b.asked();
    assert_eq!(answer, "echo: what is my locker code?");
    assert!(!asked.contains("7731"), "still shared after unlinking: {asked}");
    b.telegram("and my bike?").await;
    assert!(
        b.asked().contains("my bike is the green one"),
        "what was said while linked stays"
    );
    b.mnemo.stop(&b.api).await;
}

/// Ten minutes pass for every code waiting in the state folder's
/// `people/links.json`: each code's expiry is set back by that much (what
/// the clock would do; the broker reads the file on every take).
fn ten_minutes_pass(b: &Both) {
    let path = b.mnemo.state().join("people").join("links.json");
    let mut links: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for code in links["codes"].as_array_mut().unwrap() {
        let expires: chrono::DateTime<chrono::Utc> = code["expiresAt"].as_str().unwrap().parse().unwrap();
        code["expiresAt"] = json!((expires - chrono::TimeDelta::minutes(10)).to_rfc3339());
    }
    std::fs::write(&path, serde_json::to_vec(&links).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_older_than_ten_minutes_is_refused_and_a_new_one_links() {
    let mut b = Both::start().await;
    let code = code_in(&b.telegram("/session link").await);
    ten_minutes_pass(&b);
    assert_eq!(
        b.slack(&format!("/session link {code}")).await,
        mnemo::people::replies::WRONG_CODE
    );
    let code = code_in(&b.telegram("/session link").await);
    assert!(b.slack(&format!("/session link {code}")).await.starts_with("Linked"));
    b.mnemo.stop(&b.api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_replayed_and_group_codes_are_refused_and_guessing_locks_linking() {
    let mut b = Both::start().await;
    let code = code_in(&b.telegram("/session link").await);
    // From the account that asked for it.
    assert_eq!(
        b.telegram(&format!("/session link {code}")).await,
        mnemo::people::replies::SAME_ACCOUNT
    );
    // In a group, neither a code nor a request for one.
    b.api
        .push_message(text_message(super::GROUP, user(ADA, "Ada"), "/session link"));
    b.telegram_replies += 1;
    let sent = b.api.wait_for_calls("sendMessage", b.telegram_replies).await;
    assert_eq!(
        sent.last().unwrap().params["text"],
        mnemo::people::replies::NOT_IN_A_GROUP
    );
    // Not a code at all: told the shape, not counted.
    assert_eq!(b.slack("/session link hello").await, mnemo::people::replies::NOT_A_CODE);
    // Five wrong codes lock linking, even for a right one.
    for _ in 0..4 {
        assert_eq!(
            b.slack("/session link ABCDEFGHJK").await,
            mnemo::people::replies::WRONG_CODE
        );
    }
    assert_eq!(
        b.slack("/session link ABCDEFGHJK").await,
        mnemo::people::replies::LOCKED
    );
    let code = code_in(&b.telegram("/session link").await);
    assert_eq!(
        b.slack(&format!("/session link {code}")).await,
        mnemo::people::replies::LOCKED
    );
    // Nothing of a code reaches the logs (stop() checks message text).
    b.mnemo.stop(&b.api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_all_on_a_linked_account_forgets_the_person_on_both() {
    let mut b = Both::start().await;
    b.telegram("my locker code is 7731").await;
    let code = code_in(&b.telegram("/session link").await);
    assert!(b.slack(&format!("/session link {code}")).await.starts_with("Linked"));
    let gone = b.slack("/session clear all confirm").await;
    assert!(gone.starts_with("Deleted everything"), "{gone}");
    b.telegram("what is my locker code?").await;
    assert!(!b.asked().contains("7731"), "forgotten on Telegram too");
    let listed = b.telegram("/session link").await;
    assert!(listed.contains("No other account is linked"), "{listed}");
    let links = std::fs::read_to_string(b.mnemo.state().join("people/links.json")).unwrap();
    assert!(!links.contains("UADA"), "{links}");
    b.mnemo.stop(&b.api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_sees_links_and_forgetting_one_account_forgets_the_person() {
    let mut b = Both::start().await;
    b.telegram("my locker code is 7731").await;
    let code = code_in(&b.telegram("/session link").await);
    assert!(b.slack(&format!("/session link {code}")).await.starts_with("Linked"));
    let (ok, report) = b.mnemo.cli(&["sessions", "report"]);
    assert!(ok, "{report}");
    assert!(
        report.contains("linked: slack UADA uses the memory of telegram 42"),
        "{report}"
    );
    let (ok, json) = b.mnemo.cli(&["sessions", "report", "--json"]);
    assert!(
        ok && json.contains(r#""account":"slack UADA","memoryOf":"telegram 42""#),
        "{json}"
    );

    let (ok, said) = b
        .mnemo
        .cli(&["sessions", "forget", "--channel", "slack", "--user", ADA_SLACK, "--yes"]);
    assert!(ok, "{said}");
    assert!(
        said.contains("shared by 2 linked accounts (kept with `telegram`), now unlinked"),
        "{said}"
    );
    b.telegram("what is my locker code?").await;
    assert!(
        !b.asked().contains("7731"),
        "forgotten on Telegram through the Slack account"
    );
    let (_, report) = b.mnemo.cli(&["sessions", "report"]);
    assert!(!report.contains("linked:"), "{report}");
    b.mnemo.stop(&b.api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_linked_accounts_share_one_memory_until_unlinked() {
    let mut b = Both::start_on(Some(mnemo_testkit::pg::database().url())).await;
    b.telegram("my locker code is 7731").await;
    let code = code_in(&b.telegram("/session link").await);
    assert_eq!(
        b.telegram(&format!("/session link {code}")).await,
        mnemo::people::replies::SAME_ACCOUNT
    );
    // The Slack account's own memory joins Telegram's when they link.
    b.slack("my bike is the green one").await;
    let code = code_in(&b.telegram("/session link").await);
    let linked = b.slack(&format!("/session link {code}")).await;
    assert!(linked.contains("Both accounts had a memory"), "{linked}");
    assert_eq!(
        b.slack(&format!("/session link {code}")).await,
        mnemo::people::replies::WRONG_CODE
    );
    b.slack("what is my locker code?").await;
    assert!(b.asked().contains("my locker code is 7731"), "shared on Postgres");
    b.telegram("which bike is mine?").await;
    assert!(b.asked().contains("my bike is the green one"), "merged on Postgres");
    assert!(b.slack("/session unlink telegram").await.starts_with("Unlinked"));
    b.slack("what is my locker code?").await;
    assert!(!b.asked().contains("7731"));
    b.mnemo.stop(&b.api).await;
}
