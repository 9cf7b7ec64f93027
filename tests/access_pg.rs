//! Access rules and pairing state on the Postgres store (issue 20): two
//! brokers on one database share one set of rules. A stranger paired on
//! one broker through the real `mnemo access pair` binary is answered on
//! the other, greeted once across both; a policy set by the binary is
//! honoured by both within `RECHECK`; two brokers racing a stranger's first
//! message issue one code; corrupt rules put a broker on the restrictive
//! fallback; a database that does not answer refuses the message and
//! stores nothing. Each broker is the real `Pipeline` with its own state
//! folder, driven one message at a time (or two at once, for the race).

use crate::support::{FakeChannel, FakeModel, app_parts, last_user_message};
use mnemo::access::gate::PAIRED;
use mnemo::access::store::RECHECK;
use mnemo::app::{AppParts, ChannelMemory};
use mnemo::config::LimitsConfig;
use mnemo::pipeline::Pipeline;
use mnemo_channels::{Channel, Inbound, OutboundBody};
use mnemo_pg::PgStore;
use mnemo_sessions::locks::LockRegistry;
use mnemo_testkit::pg;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const CH: &str = "fake";

struct Broker {
    _state: tempfile::TempDir,
    channel: Arc<FakeChannel>,
    pipeline: Pipeline,
}

/// A broker on `store` with the model at `url`; `recheck`: how often it
/// looks at the rules (`None`: the product's `RECHECK`).
fn broker(store: &PgStore, url: &str, recheck: Option<Duration>) -> Broker {
    let state = tempfile::tempdir().unwrap();
    let parts = Arc::new(AppParts {
        store: Some(store.clone()),
        attachments: Default::default(),
        ..app_parts(state.path(), url, LimitsConfig::default())
    });
    let memory = ChannelMemory::open(
        state.path(),
        CH,
        &LockRegistry::new(),
        chrono_tz::UTC,
        parts.summarizer.clone(),
    )
    .unwrap()
    .on_postgres(store, chrono_tz::UTC, parts.summarizer.clone(), false, "test-broker");
    let (channel, _inbox) = FakeChannel::new(CH);
    let memories = Arc::new(HashMap::from([(CH.to_string(), memory)]));
    let senders = HashMap::from([(CH.to_string(), channel.clone() as Arc<dyn Channel>)]);
    let pipeline = Pipeline::new(parts, memories, senders);
    let pipeline = match recheck {
        Some(every) => pipeline.with_access_recheck(every),
        None => pipeline,
    };
    Broker {
        _state: state,
        channel,
        pipeline,
    }
}

impl Broker {
    /// Runs one whole turn; what the sender was sent.
    async fn say(&self, message: Inbound) -> Vec<String> {
        let before = self.channel.sent().len();
        self.pipeline.handle(message).await;
        texts(&self.channel.sent()[before..])
    }

    fn all_sent(&self) -> Vec<String> {
        texts(&self.channel.sent())
    }
}

fn texts(sent: &[mnemo_channels::Outbound]) -> Vec<String> {
    sent.iter()
        .map(|o| match &o.body {
            OutboundBody::Text(t) => t.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn dm(user: &str, msg_id: &str, text: &str) -> Inbound {
    crate::support::dm(CH, user, msg_id, text)
}

fn code_in(reply: &str) -> String {
    let after = reply
        .split("pairing code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {reply:?}"));
    after.chars().take_while(|c| c.is_ascii_alphanumeric()).collect()
}

async fn migrated(url: &str) -> PgStore {
    let store = PgStore::connect(url, 16, Duration::from_secs(5)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    store
}

/// The operator's machine: a config on the database `db_url`, with a
/// state folder of its own (where the channel is known).
struct Operator {
    dir: tempfile::TempDir,
    config: PathBuf,
    db_url: String,
}

impl Operator {
    fn new(model_url: &str, db_url: &str) -> Operator {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::support::write_config(dir.path(), model_url, json!({}));
        let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        config["store"] = json!({ "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" });
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        std::fs::create_dir_all(mnemo_sessions::Layout::new(dir.path().join("state"), CH).root()).unwrap();
        Operator {
            config: path,
            db_url: db_url.to_string(),
            dir,
        }
    }

    /// `mnemo access <args>`: (success, stdout, stderr).
    fn access(&self, args: &[&str]) -> (bool, String, String) {
        let out = crate::support::mnemo(&self.config, self.dir.path())
            .env("MNEMO_DATABASE_URL", &self.db_url)
            .arg("access")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

async fn rules(store: &PgStore) -> serde_json::Value {
    let row = mnemo_pg::access::read(store, CH).await.unwrap().expect("a row");
    serde_json::from_str(&row.doc).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_paired_on_one_broker_is_answered_on_the_other_and_greeted_once() {
    let (model, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated(&db.url()).await;
    // The product's interval: what these brokers see of the CLI's changes
    // comes from their own looks at the database.
    let a = broker(&store, &url, None);
    let b = broker(&migrated(&db.url()).await, &url, None);
    let operator = Operator::new(&url, &db.url());

    let first = a.say(dm("eve", "1", "hello?")).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let code = code_in(&first[0]);
    assert!(
        first[0].contains(&format!("mnemo access pair {CH} {code}")),
        "{}",
        first[0]
    );
    // The other broker knows the code: the same one, as a reminder.
    let second = b.say(dm("eve", "2", "hello??")).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(second[0].starts_with("Still waiting"), "{}", second[0]);
    assert_eq!(code_in(&second[0]), code);
    assert!(model.chat_requests().is_empty(), "the model never hears a stranger");

    let (ok, out, err) = operator.access(&["list", CH]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("pending {code}: user `eve`")), "{out}");
    let (ok, out, err) = operator.access(&["pair", CH, &code]);
    assert!(ok, "{err}");
    assert!(out.starts_with("paired: `eve`"), "{out}");
    assert!(
        !mnemo_sessions::Layout::new(operator.state(), CH).access_path().exists(),
        "the CLI wrote the database, not a file"
    );

    // At once on broker B (whose cache still says "stranger"): the pairing
    // step reads the row as committed.
    let answered = b.say(dm("eve", "3", "am I in?")).await;
    assert_eq!(answered, [PAIRED.to_string(), "echo: am I in?".to_string()]);
    assert_eq!(a.say(dm("eve", "4", "and here?")).await, ["echo: and here?"]);
    assert_eq!(b.say(dm("eve", "5", "and there?")).await, ["echo: and there?"]);
    let greetings = [a.all_sent(), b.all_sent()]
        .concat()
        .iter()
        .filter(|t| *t == PAIRED)
        .count();
    assert_eq!(greetings, 1, "greeted once across both brokers");
    assert_eq!(rules(&store).await["approved"], json!([]));
    let asked: Vec<String> = model.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(asked, ["am I in?", "and here?", "and there?"]);

    // A policy set by the CLI: both brokers follow it within RECHECK.
    let before = a.say(dm("mal", "6", "hi")).await;
    assert!(before[0].contains("pairing code"), "{before:?}");
    let (ok, out, err) = operator.access(&["policy", CH, "open"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("dmPolicy of `{CH}` is now `open`"));
    tokio::time::sleep(RECHECK + Duration::from_millis(100)).await;
    assert_eq!(a.say(dm("mal", "7", "now?")).await, ["echo: now?"]);
    assert_eq!(b.say(dm("mal", "8", "and now?")).await, ["echo: and now?"]);
    let (ok, _, err) = operator.access(&["policy", CH, "disabled"]);
    assert!(ok, "{err}");
    tokio::time::sleep(RECHECK + Duration::from_millis(100)).await;
    assert!(a.say(dm("eve", "9", "still?")).await.is_empty());
    assert!(b.say(dm("mal", "10", "still?")).await.is_empty());
    assert_eq!(
        model.chat_requests().len(),
        5,
        "nothing after `disabled` reached the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_racing_strangers_first_messages_issue_one_code_each() {
    let (_model, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated(&db.url()).await;
    let a = broker(&store, &url, Some(Duration::ZERO));
    let b = broker(&migrated(&db.url()).await, &url, Some(Duration::ZERO));
    // Three strangers (the most that may wait), each writing both brokers
    // at the same moment.
    for user in ["s1", "s2", "s3"] {
        let (on_a, on_b) = tokio::join!(
            a.say(dm(user, &format!("{user}-a"), "hi")),
            b.say(dm(user, &format!("{user}-b"), "hi"))
        );
        let replies = [on_a, on_b].concat();
        assert_eq!(replies.len(), 2, "{user}: {replies:?}");
        let issued = replies.iter().filter(|r| r.starts_with("Hi!")).count();
        assert_eq!(issued, 1, "{user}: one code issued, one repeated: {replies:?}");
        assert_eq!(code_in(&replies[0]), code_in(&replies[1]), "{user}: {replies:?}");
    }
    let pending = rules(&store).await["pending"].as_array().unwrap().clone();
    let users: Vec<&str> = pending.iter().map(|p| p["userId"].as_str().unwrap()).collect();
    assert_eq!(users, ["s1", "s2", "s3"]);
    assert!(pending.iter().all(|p| p["replies"] == 2), "{pending:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_rules_in_the_database_put_brokers_on_the_restrictive_fallback() {
    let (model, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated(&db.url()).await;
    let operator = Operator::new(&url, &db.url());
    let (ok, _, err) = operator.access(&["allow", CH, "ada"]);
    assert!(ok, "{err}");
    let (ok, _, err) = operator.access(&["policy", CH, "open"]);
    assert!(ok, "{err}");
    let a = broker(&store, &url, Some(Duration::ZERO));
    assert_eq!(a.say(dm("bob", "1", "hi")).await, ["echo: hi"], "open");

    // A hand edit gone wrong: `opne`.
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(r#"UPDATE mnemo_access SET doc = '{"dmPolicy": "opne", "allowFrom": ["ada"]}'"#)
        .await
        .unwrap();
    assert!(
        a.say(dm("bob", "2", "hi again")).await.is_empty(),
        "never open while corrupt"
    );
    assert_eq!(
        a.say(dm("ada", "3", "me?")).await,
        ["echo: me?"],
        "the last good allowFrom keeps talking"
    );
    // A broker that never saw good rules admits no one.
    let b = broker(&store, &url, Some(Duration::ZERO));
    assert!(b.say(dm("ada", "4", "and me?")).await.is_empty());
    assert!(b.say(dm("cat", "5", "hello")).await.is_empty(), "no pairing either");
    let asked: Vec<String> = model.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(asked, ["hi", "me?"]);

    // The operator sees why, and the CLI does not write over it.
    let (ok, _, err) = operator.access(&["list", CH]);
    assert!(!ok);
    assert!(err.contains("dmPolicy") && err.contains("refuse strangers"), "{err}");
    let (ok, _, err) = operator.access(&["allow", CH, "cat"]);
    assert!(!ok, "corrupt rules are not edited");
    assert!(err.contains("dmPolicy"), "{err}");
    assert_eq!(rules(&store).await["dmPolicy"], "opne");

    // Fixed by hand: both brokers leave the fallback.
    client
        .batch_execute(r#"UPDATE mnemo_access SET doc = '{"dmPolicy": "open"}'"#)
        .await
        .unwrap();
    assert_eq!(a.say(dm("bob", "6", "back?")).await, ["echo: back?"]);
    assert_eq!(b.say(dm("cat", "7", "back?")).await, ["echo: back?"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_down_during_admission_refuses_the_message_and_stores_nothing() {
    let (model, url) = FakeModel::start().await;
    let cluster = pg::Cluster::start();
    let db = cluster.create_database();
    let store = PgStore::connect(&db.url(), 4, Duration::from_secs(2)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    mnemo::access::db::edit(&store, CH, |rules| rules.dm_policy = mnemo::access::DmPolicy::Open)
        .await
        .unwrap();
    let a = broker(&store, &url, Some(Duration::ZERO));
    assert_eq!(a.say(dm("ada", "1", "hello")).await, ["echo: hello"]);

    cluster.stop();
    assert!(
        a.say(dm("ada", "2", "are you there?")).await.is_empty(),
        "refused without a word: the rules could not be read"
    );
    assert_eq!(model.chat_requests().len(), 1, "the model was not asked");
    cluster.start_server();
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let stored: Vec<String> = client
        .query("SELECT text FROM mnemo_messages ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        stored,
        ["hello", "echo: hello"],
        "nothing of the refused message stored"
    );
    // Delivered again once the database is back: answered.
    assert_eq!(a.say(dm("ada", "2", "are you there?")).await, ["echo: are you there?"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_are_looked_at_once_per_recheck_not_per_message() {
    use mnemo::access::DmPolicy;
    use mnemo::access::db::{DbRules, edit};
    let db = pg::database();
    let store = migrated(&db.url()).await;
    let rules = DbRules::new(store.clone(), CH);
    let t0 = chrono::Utc::now();
    assert_eq!(
        rules.current(t0).await.unwrap().dm_policy,
        DmPolicy::Pairing,
        "no row: defaults"
    );
    edit(&store, CH, |r| r.dm_policy = DmPolicy::Open).await.unwrap();
    let soon = t0 + chrono::TimeDelta::milliseconds(999);
    assert_eq!(
        rules.current(soon).await.unwrap().dm_policy,
        DmPolicy::Pairing,
        "within the interval the database is not asked"
    );
    let later = t0 + chrono::TimeDelta::from_std(RECHECK).unwrap();
    assert_eq!(rules.current(later).await.unwrap().dm_policy, DmPolicy::Open);
    edit(&store, CH, |r| r.dm_policy = DmPolicy::Allowlist).await.unwrap();
    assert_eq!(
        rules.current(t0).await.unwrap().dm_policy,
        DmPolicy::Allowlist,
        "a clock that went back looks again"
    );
    // The bot's own write is in the cache at once.
    rules.update(|r| r.dm_policy = DmPolicy::Disabled).await.unwrap();
    assert_eq!(rules.current(t0).await.unwrap().dm_policy, DmPolicy::Disabled);
    assert!(!rules.degraded());
}
