//! The broker on the Postgres store (issue: several brokers on one
//! Postgres): the same behaviour as on the files, checked by one scenario
//! run against both stores through the real `App`; two brokers on one
//! database keeping each user's order with no loss, duplicate or leak; the
//! real binary's `store migrate|status` and `chat` on the database. The
//! database is a real PostgreSQL from the test kit.

use crate::support;

use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, Inbound, OutboundBody};
use mnemo_pg::PgStore;
use mnemo_sessions::commands::memory as replies;
use mnemo_testkit::pg;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{FakeChannel, FakeModel, app_parts, dm, eventually, last_user_message, request_text};

async fn migrated_store(url: &str) -> PgStore {
    let store = PgStore::connect(url, 16, Duration::from_secs(10)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    store
}

/// Anyone may talk on the channel `fake` of the database (where a broker
/// on Postgres reads its rules).
pub(crate) async fn open_access_in(store: &PgStore) {
    let open = mnemo::access::AccessFile {
        dm_policy: mnemo::access::DmPolicy::Open,
        ..Default::default()
    };
    mnemo::access::db::edit(store, "fake", |rules| *rules = open)
        .await
        .unwrap();
}

/// A broker on `state` with the fake model at `url`, on the files or
/// (with `store`) on Postgres, where anyone may talk on `fake`; small folds
/// so a short test sees them.
async fn broker(state: &Path, url: &str, store: Option<PgStore>) -> (App, Arc<FakeChannel>) {
    broker_with(state, url, store, json!({})).await
}

/// [`broker`] with `more` merged into the channel's `sessions/config.json`.
async fn broker_with(
    state: &Path,
    url: &str,
    store: Option<PgStore>,
    more: serde_json::Value,
) -> (App, Arc<FakeChannel>) {
    match &store {
        Some(store) => open_access_in(store).await,
        None => support::open_access(state, "fake", &[]),
    }
    let config = mnemo_sessions::Layout::new(state, "fake").config_path();
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let mut sessions = json!({
        "compacting": { "threshold": 8 },
        "stm": { "contextWindow": 4, "maxMessages": 30 },
    });
    for (key, value) in more.as_object().unwrap() {
        sessions[key] = value.clone();
    }
    std::fs::write(&config, sessions.to_string()).unwrap();
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

fn replies_to(channel: &FakeChannel, user: &str) -> Vec<String> {
    channel
        .sent()
        .iter()
        .filter(|o| o.chat_id == format!("dm-{user}"))
        .map(|o| match &o.body {
            OutboundBody::Text(t) => t.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// Submits `message` and waits for the `n`th reply to its user.
async fn say(app: &App, channel: &FakeChannel, message: Inbound, n: usize) -> String {
    let user = message.user_id.clone();
    app.submit(message).await;
    let reply = eventually(format!("reply {n} to {user}"), async || {
        replies_to(channel, &user).get(n - 1).cloned()
    })
    .await;
    // An answer is stored right after it is sent: what a test reads next
    // is there.
    app.wait_turns(Duration::from_secs(10)).await;
    reply
}

/// Submits `message`, waits for its reply; the context the model got.
async fn context_after(app: &App, channel: &FakeChannel, fake: &FakeModel, message: Inbound, n: usize) -> String {
    say(app, channel, message, n).await;
    request_text(&fake.chat_requests().pop().unwrap())
}

/// One user's history, long enough to fold twice, then questions about
/// the oldest fact; another user beside them; then `clear all`. Run on
/// both stores: what users see must not depend on where memory lives.
async fn remembers_folds_and_forgets(store: Option<PgStore>) {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, store).await;
    let mut n = 0;
    let mut ask = |text: String| {
        n += 1;
        (dm("fake", "ada", &format!("ada-{n}"), &text), n)
    };
    let (m, k) = ask("my dentist is Dr. Okafor on Elm Street".into());
    say(&app, &channel, m, k).await;
    for i in 0..24 {
        let (m, k) = ask(format!("small talk number {i} about the weather"));
        say(&app, &channel, m, k).await;
    }
    say(
        &app,
        &channel,
        dm("fake", "bob", "bob-1", "canary-bob likes heliotrope"),
        1,
    )
    .await;
    app.wait_background(Duration::from_secs(30)).await;

    let (m, k) = ask("what is my dentist called?".into());
    say(&app, &channel, m, k).await;
    let requests = fake.chat_requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| last_user_message(r) == "what is my dentist called?")
        .unwrap();
    let context = request_text(last);
    assert!(context.contains("Dr. Okafor"), "the folded fact is recalled: {context}");
    assert!(
        context.contains("the user chatted"),
        "the rolling summary is in the context: {context}"
    );
    assert!(
        !context.contains("small talk number 0 "),
        "folded small talk is not in the recent window: {context}"
    );
    for r in &requests {
        if last_user_message(r).starts_with("canary-bob") {
            continue;
        }
        assert!(
            !request_text(r).contains("canary-bob"),
            "bob's words reached ada's request"
        );
    }

    // Long-term memory the user edits: remember → in the next request;
    // forget → gone; undo → back; the same replies on both stores.
    let (m, k) = ask("/session remember I prefer jasmine tea over coffee".into());
    let reply = say(&app, &channel, m, k).await;
    assert_eq!(reply, replies::remembered("i-prefer-jasmine-tea-over-coffee"));
    let (m, k) = ask("what do I drink?".into());
    let context = context_after(&app, &channel, &fake, m, k).await;
    assert!(context.contains("I prefer jasmine tea over coffee"), "{context}");
    // The first fold after the profile exists commits its own profile
    // change (the display name). Make sure one runs now, and let it land,
    // so `undo` below undoes the forget, not the fold: turns enough to pass
    // the threshold (8) whatever earlier folds covered (a fold that waits
    // for a core covers more, and the next comes later).
    for i in 0..6 {
        let (m, k) = ask(format!("more small talk number {i}"));
        say(&app, &channel, m, k).await;
    }
    app.wait_background(Duration::from_secs(30)).await;
    let (m, k) = ask("/session forget i-prefer-jasmine-tea-over-coffee".into());
    let reply = say(&app, &channel, m, k).await;
    assert!(
        reply.starts_with("Forgot the fact `i-prefer-jasmine-tea-over-coffee`"),
        "{reply}"
    );
    let (m, k) = ask("what do I drink now?".into());
    let context = context_after(&app, &channel, &fake, m, k).await;
    assert!(
        !context.contains("jasmine"),
        "a forgotten fact reached the model: {context}"
    );
    app.wait_background(Duration::from_secs(30)).await;
    let (m, k) = ask("/session undo".into());
    let reply = say(&app, &channel, m, k).await;
    assert!(reply.starts_with("Undid the last change to your profile"), "{reply}");
    let (m, k) = ask("and what do I drink after undo?".into());
    let context = context_after(&app, &channel, &fake, m, k).await;
    assert!(context.contains("I prefer jasmine tea over coffee"), "{context}");
    let (m, k) = ask("/session history".into());
    let history = say(&app, &channel, m, k).await;
    assert!(
        history.contains("remembered `i-prefer-jasmine-tea-over-coffee` by your command"),
        "{history}"
    );
    assert!(
        history.contains("forgot `i-prefer-jasmine-tea-over-coffee` by your command (undone "),
        "the undone change stays in the history, marked: {history}"
    );
    // Hostile names are refused with a clear reply and touch nothing.
    let (m, k) = ask("/session forget ../../bob".into());
    let reply = say(&app, &channel, m, k).await;
    assert_eq!(reply, replies::forget_preview(&[], "../../bob", &[]));
    let (m, k) = ask(format!("/session remember {}", "x".repeat(400)));
    let reply = say(&app, &channel, m, k).await;
    assert_eq!(reply, replies::invalid("the text is longer than 300 characters"));
    let bob = say(&app, &channel, dm("fake", "bob", "bob-2", "/session history"), 2).await;
    assert_eq!(
        bob,
        replies::history_text(Vec::new(), None),
        "bob sees none of ada's versions"
    );

    let (m, k) = ask("/session clear all confirm".into());
    let reply = say(&app, &channel, m, k).await;
    assert!(reply.starts_with("Deleted everything"), "{reply}");
    let (m, k) = ask("/session history".into());
    let reply = say(&app, &channel, m, k).await;
    assert_eq!(
        reply,
        replies::history_text(Vec::new(), None),
        "clear all removes the versions"
    );
    let (m, k) = ask("who is my dentist?".into());
    say(&app, &channel, m, k).await;
    let last = fake.chat_requests().pop().unwrap();
    assert!(!request_text(&last).contains("Okafor"), "cleared memory came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_remember_across_folds_keep_users_apart_and_forget_on_request() {
    remembers_folds_and_forgets(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_remembers_across_folds_keeps_users_apart_and_forgets_on_request() {
    let db = pg::database();
    remembers_folds_and_forgets(Some(migrated_store(&db.url()).await)).await;
}

/// The model's memory tools on Postgres: a scripted `memory_remember`
/// edits the caller's profile in the database (a version and a fact-log
/// entry `by: tool`), the next request carries it, another user's
/// `memory_search` finds none of it, and `clear all` removes the facts and
/// versions with the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_memory_tools_edit_only_the_callers_memory() {
    let db = pg::database();
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(migrated_store(&db.url()).await)).await;
    let client = pg_client(&db.url()).await;
    let count = async |table: &str, user: &str, by: &str| -> i64 {
        let sql = format!("SELECT count(*) FROM {table} WHERE user_key = $1 AND by = $2");
        client.query_one(&sql, &[&user, &by]).await.unwrap().get(0)
    };

    fake.script_tools(vec![vec![(
        "memory_remember",
        json!({"text": "canary-ADA sails a blue dinghy", "section": "facts"}),
    )]]);
    say(&app, &channel, dm("fake", "ada", "ada-1", "I sail a blue dinghy"), 1).await;
    let profile: String = client
        .query_one("SELECT profile FROM mnemo_users WHERE user_key = 'ada'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(profile.contains("canary-ADA sails a blue dinghy"), "{profile}");
    assert_eq!(count("mnemo_facts", "ada", "tool").await, 1);
    assert_eq!(count("mnemo_versions", "ada", "tool").await, 1);
    let context = context_after(&app, &channel, &fake, dm("fake", "ada", "ada-2", "what boat?"), 2).await;
    assert!(context.contains("canary-ADA sails a blue dinghy"), "{context}");

    // Bob's model searches for it, and tries a forget of ada's key.
    fake.script_tools(vec![vec![
        ("memory_search", json!({"query": "dinghy canary"})),
        ("memory_forget", json!({"key": "canary-ada-sails-a-blue-dinghy"})),
        ("memory_forget", json!({"key": "x", "user": "ada"})),
    ]]);
    say(&app, &channel, dm("fake", "bob", "bob-1", "tell me about boats"), 1).await;
    let bobs: Vec<String> = fake
        .chat_requests()
        .iter()
        .filter(|r| last_user_message(r) == "tell me about boats")
        .map(|r| r.to_string())
        .collect();
    assert_eq!(bobs.len(), 2, "a round of tools, then the answer");
    assert!(bobs[1].contains("no fact or topic note with that key"), "{}", bobs[1]);
    for r in &bobs {
        assert!(
            !r.contains("canary-ADA") && !r.contains("blue dinghy"),
            "ada's memory reached bob's request: {r}"
        );
    }
    assert_eq!(
        count("mnemo_facts", "ada", "tool").await,
        1,
        "bob's tools cannot touch ada's facts"
    );

    let reply = say(
        &app,
        &channel,
        dm("fake", "ada", "ada-3", "/session clear all confirm"),
        3,
    )
    .await;
    assert!(reply.starts_with("Deleted everything"), "{reply}");
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM mnemo_facts WHERE user_key = 'ada')
                  + (SELECT count(*) FROM mnemo_versions WHERE user_key = 'ada')
                  + (SELECT count(*) FROM mnemo_topics WHERE user_key = 'ada')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "clear all leaves no fact, version or note");
}

/// Two brokers on one database take turns answering the same users (as a
/// load balancer would spread them), and one platform message arrives at
/// both: each user's memory holds every message once, question before
/// answer, in the order said, and nobody else's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_share_users_without_loss_duplicates_or_reordering() {
    let (fake, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated_store(&db.url()).await;
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = broker(one.path(), &url, Some(store.clone())).await;
    let b = broker(
        two.path(),
        &url,
        Some(PgStore::connect(&db.url(), 16, Duration::from_secs(10)).unwrap()),
    )
    .await;
    let users: Vec<String> = (0..20).map(|u| format!("u{u}")).collect();
    let brokers = [a.clone(), b.clone()];
    let conversation = async |user: &str| {
        for i in 0..8 {
            let (app, _) = &brokers[i % 2];
            let text = format!("canary-{user}-end says {i}");
            app.submit(dm("fake", user, &format!("{user}-{i}"), &text)).await;
            // The user waits for the answer before saying more.
            eventually(format!("the answer to {text}"), async || {
                let all = [replies_to(&brokers[0].1, user), replies_to(&brokers[1].1, user)].concat();
                all.iter().any(|r| r.contains(&text))
            })
            .await;
        }
        // A redelivery of the first message, to the other broker, then one
        // more message there: its answer means the redelivery (queued
        // before it) was handled.
        let (app, channel) = &brokers[1];
        app.submit(dm(
            "fake",
            user,
            &format!("{user}-0"),
            &format!("canary-{user}-end says 0"),
        ))
        .await;
        let last = format!("canary-{user}-end says 8");
        app.submit(dm("fake", user, &format!("{user}-8"), &last)).await;
        eventually(format!("the answer to {last}"), async || {
            replies_to(channel, user).iter().any(|r| r.contains(&last))
        })
        .await;
    };
    futures_util::future::join_all(users.iter().map(|u| conversation(u))).await;
    // An answer is stored right after it is shown.
    a.0.wait_turns(Duration::from_secs(30)).await;
    b.0.wait_turns(Duration::from_secs(30)).await;
    a.0.wait_background(Duration::from_secs(30)).await;
    b.0.wait_background(Duration::from_secs(30)).await;

    let client = pg_client(&db.url()).await;
    for user in &users {
        let key = mnemo_sessions::SafeName::of(user);
        let rows = client
            .query(
                "SELECT role, text FROM mnemo_messages WHERE channel = 'fake' AND user_key = $1 ORDER BY seq",
                &[&key.as_str()],
            )
            .await
            .unwrap();
        let said: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        // Questions are stored as they arrive, answers after their turn: a
        // question sent while the one before is answered stands before
        // that answer. Each kind in order, each message once, every answer
        // after its question.
        let of =
            |role: &str| -> Vec<String> { said.iter().filter(|(r, _)| r == role).map(|(_, t)| t.clone()).collect() };
        let questions: Vec<String> = (0..9).map(|i| format!("canary-{user}-end says {i}")).collect();
        let answers: Vec<String> = questions.iter().map(|q| format!("echo: {q}")).collect();
        assert_eq!(of("user"), questions, "{user}'s questions, in order, each once");
        assert_eq!(of("assistant"), answers, "{user}'s answers, in order, each once");
        for (q, a) in questions.iter().zip(&answers) {
            let at = |text: &String| said.iter().position(|(_, t)| t == text).unwrap();
            assert!(at(q) < at(a), "{user}: an answer before its question: {said:?}");
        }
    }
    // The redelivered message was not answered a second time.
    for user in &users {
        let replies = [replies_to(&a.1, user), replies_to(&b.1, user)].concat();
        assert_eq!(replies.len(), 9, "{user}: {replies:?}");
    }
    for r in fake.chat_requests() {
        let asker = last_user_message(&r);
        let owner = asker.split("-end").next().unwrap().to_string();
        let text = request_text(&r);
        for user in &users {
            let canary = format!("canary-{user}-end");
            if canary != format!("{owner}-end") {
                assert!(!text.contains(&canary), "{owner}'s request carried {canary}");
            }
        }
    }
}

async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The config for the binary on the database `url` names (read from
/// `MNEMO_DATABASE_URL`).
fn write_pg_config(dir: &Path, model_url: &str, state: &str) -> std::path::PathBuf {
    let path = support::write_config(dir, model_url, json!({}));
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["stateDir"] = json!(dir.join(state));
    config["store"] = json!({ "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" });
    let path = dir.join(format!("{state}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_migrates_then_two_brokers_chat_on_one_database() {
    let (fake, url) = FakeModel::start().await;
    let db = pg::database();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let first = write_pg_config(dir.path(), &url, "broker-1");
    let second = write_pg_config(dir.path(), &url, "broker-2");
    let run = |config: &Path, args: &[&str], input: &[u8]| {
        let mut cmd = support::mnemo(config, &home);
        cmd.env("MNEMO_DATABASE_URL", db.url()).args(args);
        support::with_input(cmd, input)
    };

    // Not migrated: the broker refuses to start and says what to do.
    let out = run(&first, &["chat"], b"hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("run `mnemo store migrate`"), "{stderr}");
    let out = run(&first, &["store", "status"], b"");
    assert!(!out.status.success());

    let out = run(&first, &["store", "migrate"], b"");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let latest = mnemo_pg::migrate::latest();
    assert!(stdout.contains(&format!("now at version {latest} (was 0)")), "{stdout}");
    let out = run(&second, &["store", "migrate"], b"");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing to do"),
        "migrating twice"
    );

    let out = run(&first, &["chat"], "my name is Ada\0Lovelace\n".as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The other broker, with its own state folder, knows what was said.
    let out = run(&second, &["chat"], b"who am I?\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last = fake.chat_requests().pop().unwrap();
    assert!(
        request_text(&last).contains("my name is Ada\u{2400}Lovelace"),
        "{}",
        request_text(&last)
    );
    let layout = mnemo_sessions::Layout::new(dir.path().join("broker-2"), "console");
    let ada = mnemo_sessions::SafeName::of("ada");
    assert!(
        !layout.messages_path(&ada).exists() && !layout.stm_dir(&ada).exists(),
        "nothing of the user's memory is written to the broker's files"
    );

    let out = run(&second, &["store", "status", "--json"], b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let status: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(status["schemaVersion"], mnemo_pg::migrate::latest());
    assert_eq!(status["messages"], 4, "{status}");
    assert_eq!(status["users"], 1);
    assert!(status["pgvector"].as_str().unwrap().starts_with("pgvector"), "{status}");
    assert_eq!(
        status["recallIndexPerUser"], true,
        "btree_gin is in the machine's contrib: {status}"
    );

    // `config check` names a Postgres store's missing URL, as `run` would.
    let mut check = support::mnemo(&first, &home);
    check.args(["config", "check"]);
    let out = check.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("`MNEMO_DATABASE_URL` (store.urlEnv) is not set"),
        "{stderr}"
    );
    let out = run(&first, &["config", "check"], b"");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("store:"),
        "with the URL set the store is fine: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A files config has no database to migrate: a clear refusal.
    let files = support::write_config(dir.path(), &url, json!({}));
    let out = run(&files, &["store", "migrate"], b"");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.kind is `files`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_gone_mid_conversation_is_explained_and_nothing_acknowledged_is_lost() {
    let (_fake, url) = FakeModel::start().await;
    let cluster = pg::Cluster::start();
    let db = cluster.create_database();
    let store = PgStore::connect(&db.url(), 4, Duration::from_secs(2)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(store)).await;
    say(&app, &channel, dm("fake", "ada", "1", "remember the code 4417"), 1).await;
    cluster.stop();
    let reply = say(&app, &channel, dm("fake", "ada", "2", "are you there?"), 2).await;
    assert!(reply.contains("couldn't save your message"), "{reply}");
    cluster.start_server();
    let reply = say(&app, &channel, dm("fake", "ada", "3", "what was the code?"), 3).await;
    assert_eq!(reply, "echo: what was the code?");
    let client = pg_client(&db.url()).await;
    let texts: Vec<String> = client
        .query("SELECT text FROM mnemo_messages ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        texts,
        [
            "remember the code 4417",
            "echo: remember the code 4417",
            "what was the code?",
            "echo: what was the code?"
        ]
    );
}

/// `n` messages of ada on channel `telegram`, a minute apart from `start`,
/// written straight to the database as `store copy` writes a history: no
/// broker saw them, so they have no summaries or vectors yet.
async fn written_without_a_broker(
    (store, dir, model_url): (&PgStore, &Path, &str),
    start: chrono::DateTime<chrono::Utc>,
    n: i64,
    text: impl Fn(i64) -> String,
) {
    // No fold is due for so few messages: the summarizer is never asked.
    let summarizer = app_parts(dir, model_url, LimitsConfig::default()).summarizer;
    let channel = mnemo_pg::PgChannel::new(store.clone(), "telegram", Default::default(), summarizer);
    let mut turn = channel.begin_turn(&mnemo_sessions::SafeName::of("ada")).await.unwrap();
    for i in 0..n {
        let record = mnemo_sessions::Record {
            ts: start + chrono::TimeDelta::minutes(i),
            role: mnemo_sessions::Role::User,
            text: text(i),
            msg_id: format!("m{i}"),
            channel: "telegram".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        };
        turn.append(&record, record.ts).await.unwrap();
    }
}

/// The binary as an operator runs it on a Postgres config (the database's
/// URL in `MNEMO_DATABASE_URL`), beside a migrated database.
struct Operator {
    _model: FakeModel,
    url: String,
    db: pg::TestDb,
    store: PgStore,
    dir: tempfile::TempDir,
    home: std::path::PathBuf,
    config: std::path::PathBuf,
}

impl Operator {
    async fn start(state: &str) -> Operator {
        let (model, url) = FakeModel::start().await;
        let db = pg::database();
        let store = migrated_store(&db.url()).await;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let config = write_pg_config(dir.path(), &url, state);
        Operator {
            _model: model,
            url,
            db,
            store,
            dir,
            home,
            config,
        }
    }

    /// `mnemo <args>`, run to its end.
    fn run(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = support::mnemo(&self.config, &self.home);
        cmd.env("MNEMO_DATABASE_URL", self.db.url()).args(args);
        cmd.output().unwrap()
    }
}

/// `mnemo sessions maintain` on a Postgres config runs the database's
/// maintenance (not the empty state folder's): yesterday's messages get
/// their daily once, and the run says so, in JSON too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_maintain_on_postgres_writes_the_databases_dailies() {
    let op = Operator::start("broker-1").await;
    let two_days_ago = chrono::Utc::now() - chrono::TimeDelta::days(2);
    written_without_a_broker((&op.store, op.dir.path(), &op.url), two_days_ago, 3, |i| {
        format!("note {i}")
    })
    .await;
    let run = || op.run(&["sessions", "maintain", "--json"]);
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(report["channels"][0]["channel"], "telegram", "{report}");
    assert_eq!(report["channels"][0]["dailiesWritten"], 1, "{report}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("channel telegram (postgres):"),
        "progress on stderr"
    );
    let out = run();
    let report: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(report["channels"][0]["dailiesWritten"], 0, "once: {report}");
    let count: i64 = pg_client(&op.db.url())
        .await
        .query_one("SELECT count(*) FROM mnemo_digests WHERE kind = 'daily'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 1);
}

/// `mnemo sessions export` and `sessions forget` on a Postgres config act
/// on the database (not the broker's empty state folder), say so, and a
/// user with nothing stored there is an error naming where it looked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_export_and_forget_on_postgres_act_on_the_database() {
    let op = Operator::start("operator").await;
    written_without_a_broker((&op.store, op.dir.path(), &op.url), chrono::Utc::now(), 4, |i| {
        format!("ada's line {i}")
    })
    .await;
    let run = |args: &[&str]| op.run(args);
    let bundle = op.dir.path().join("ada.tar.gz");
    let out = run(&[
        "sessions",
        "export",
        "--channel",
        "telegram",
        "--user",
        "ada",
        "--out",
        bundle.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("from the database (channel `telegram`)"), "{said}");
    let mut text = String::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&bundle).unwrap()));
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        std::io::Read::read_to_string(&mut entry, &mut text).ok();
    }
    assert!(
        text.contains("ada's line 3"),
        "the bundle holds the database's messages"
    );

    let out = run(&["sessions", "forget", "--channel", "telegram", "--user", "ada", "--yes"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        said.contains("in the database (channel `telegram`)") && said.contains("Deleted everything"),
        "{said}"
    );
    let left: i64 = pg_client(&op.db.url())
        .await
        .query_one(
            "SELECT count(*) FROM mnemo_messages WHERE channel = 'telegram' AND user_key = 'ada'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the user's rows are gone");

    let out = run(&["sessions", "forget", "--channel", "telegram", "--user", "ada", "--yes"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("nothing is stored about user `ada` in channel `telegram` (looked in the database"),
        "{said}"
    );
}

/// The scheduler runs the database's maintenance for a channel kept in
/// Postgres: the day's daily summary is written, an idle user's short-term
/// memory expires into the archive, and the next turn's recall finds the
/// piece of the daily that answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_writes_dailies_and_expires_idle_memory_in_the_database() {
    let (fake, url) = FakeModel::start().await;
    fake.summarize_when(
        "Ariel",
        json!({"summary": "Talked about boats.\n\n- The boat Ariel is moored at Kinsale harbour.", "facts": []})
            .to_string(),
    );
    let db = pg::database();
    let store = migrated_store(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(store)).await;
    say(&app, &channel, dm("fake", "ada", "1", "the boat is called Ariel"), 1).await;
    // An export bundle left in the state folder, 5 days old: past
    // exportKeepDays (7) at the scheduler's "now" below.
    let exports = mnemo_sessions::Layout::new(dir.path(), "fake").exports_dir();
    std::fs::create_dir_all(&exports).unwrap();
    let bundle = exports.join("old-export.tar.gz");
    std::fs::write(&bundle, b"bundle").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&bundle)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(5 * 86_400))
        .unwrap();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    // Past stmExpireDays (3), within the first run's look-back (7 days).
    let later = chrono::Utc::now() + chrono::TimeDelta::days(4);
    let scheduler = mnemo::scheduler::Scheduler::start_with_clock(app.clone(), stop, Arc::new(move || later));
    let client = pg_client(&db.url()).await;
    eventually("the idle conversation archived", async || {
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE fold IS NULL), count(*) FROM mnemo_messages",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1)) == (0, 2)
    })
    .await;
    let kind: String = client
        .query_one("SELECT kind FROM mnemo_folds", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "expired");
    let daily: (String, String, i32) = eventually("the daily summary written", async || {
        client
            .query_opt("SELECT kind, period, messages FROM mnemo_digests", &[])
            .await
            .unwrap()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    })
    .await;
    let today = chrono::Utc::now()
        .with_timezone(&chrono_tz::UTC)
        .format("%Y-%m-%d")
        .to_string();
    assert_eq!(daily, ("daily".to_string(), today.clone(), 2));
    eventually("the old export bundle pruned", async || !bundle.exists()).await;
    scheduler.stop().await;

    say(&app, &channel, dm("fake", "ada", "2", "where is the boat moored?"), 2).await;
    let asked = request_text(&fake.chat_requests().last().cloned().unwrap());
    assert!(
        asked.contains(&format!("[summary {today}]")) && asked.contains("moored at Kinsale harbour"),
        "{asked}"
    );

    // The export holds the daily as the file store would, frontmatter and all.
    let entries = exported(&app, &channel, "ada").await;
    let daily = entries
        .iter()
        .find(|(name, _)| name.ends_with(&format!("/daily/{today}.md")))
        .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
        .unwrap_or_else(|| panic!("the daily in {:?}", entries.keys().collect::<Vec<_>>()));
    assert!(
        daily.starts_with("---\n") && daily.contains(&format!("period: {today}")) && daily.contains("Kinsale"),
        "{daily}"
    );
}

/// Asks for `/session export` as `user` and reads the bundle handed over:
/// file name → bytes.
async fn exported(app: &App, channel: &FakeChannel, user: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    app.submit(dm("fake", user, "export", "/session export")).await;
    let chat = format!("dm-{user}");
    let (path, caption) = eventually("the export handed over", async || {
        channel.sent().iter().find_map(|o| match &o.body {
            OutboundBody::File { path, caption } if o.chat_id == chat => Some((path.clone(), caption.clone())),
            _ => None,
        })
    })
    .await;
    assert!(
        caption.starts_with("I packed everything I store about you"),
        "{caption}"
    );
    let mut entries = std::collections::BTreeMap::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()));
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        entries.insert(name, bytes);
    }
    entries
}

/// `/session export` on Postgres: one archive of everything the database
/// holds about the user (short-term log, archived messages, summary),
/// laid out as the file store's export, handed over as a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_on_postgres_bundles_the_users_memory_from_the_database() {
    let (_fake, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated_store(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(store)).await;
    for i in 0..12 {
        let text = format!("fact number {i} about the orchard");
        say(&app, &channel, dm("fake", "ada", &format!("a{i}"), &text), i + 1).await;
    }
    app.wait_background(Duration::from_secs(30)).await;
    say(&app, &channel, dm("fake", "bob", "b1", "canary-bob"), 1).await;
    let remember = dm(
        "fake",
        "ada",
        "a-remember",
        "/session remember my orchard has twelve apple trees",
    );
    say(&app, &channel, remember, 13).await;
    let entries = exported(&app, &channel, "ada").await;
    let names: Vec<&String> = entries.keys().collect();
    let recent = entries
        .iter()
        .find(|(n, _)| n.ends_with("messages.jsonl"))
        .expect("the short-term log");
    let archived = entries
        .iter()
        .find(|(n, _)| n.ends_with("archived.jsonl.gz"))
        .unwrap_or_else(|| panic!("the archive: {names:?}"));
    let mut old = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&archived.1[..]), &mut old).unwrap();
    let all = format!("{old}{}", String::from_utf8_lossy(recent.1));
    for i in 0..12 {
        assert!(
            all.contains(&format!("fact number {i} about the orchard")),
            "message {i} exported"
        );
    }
    assert!(old.lines().count() > 0, "folds happened, so some messages are archived");
    assert!(entries.keys().any(|n| n.ends_with("summary.md")), "{names:?}");
    assert!(
        entries.contains_key("README.txt") || names.iter().any(|n| n.contains("README")),
        "{names:?}"
    );
    // Long-term memory laid out as the files hold it.
    let fact_log = entries
        .iter()
        .find(|(n, _)| n.contains("ltm/facts/") && n.ends_with(".jsonl"))
        .unwrap_or_else(|| panic!("the fact log: {names:?}"));
    let entry: serde_json::Value = serde_json::from_slice(fact_log.1.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(
        (entry["op"].as_str(), entry["value"].as_str(), entry["by"].as_str()),
        (Some("set"), Some("my orchard has twelve apple trees"), Some("command"))
    );
    let version = entries
        .iter()
        .find(|(n, _)| n.contains("ltm/versions/") && n.ends_with(".json"))
        .unwrap_or_else(|| panic!("a kept version: {names:?}"));
    let version: serde_json::Value = serde_json::from_slice(version.1).unwrap();
    assert_eq!(version["what"], "remembered `my-orchard-has-twelve-apple`");
    let everything: String = entries
        .values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(!everything.contains("canary-bob"), "only the asker's memory");
}

/// More turns in flight than connections: a turn that cannot get one
/// within `store.poolWaitSecs` fails with an apology; its question was
/// stored on intake (which has connections of its own, so a message is
/// kept even while turns hold every turn connection) and is settled by the
/// user's next answer; once connections free up, turns go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_pool_fails_a_turn_but_still_stores_its_question_then_recovers() {
    let (fake, url) = FakeModel::start().await;
    fake.set_delay(Duration::from_millis(1500));
    let db = pg::database();
    let one = PgStore::connect(&db.url(), 1, Duration::from_millis(300)).unwrap();
    mnemo_pg::migrate::migrate(&one).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(one)).await;
    // ada's turn holds the only turn connection while the model thinks.
    app.submit(dm("fake", "ada", "a1", "a slow question")).await;
    eventually("ada's turn with the model", async || !fake.chat_requests().is_empty()).await;
    let failed = say(&app, &channel, dm("fake", "bob", "b1", "anyone there?"), 1).await;
    assert!(failed.contains("couldn't answer your message"), "{failed}");
    let answered = say(&app, &channel, dm("fake", "ada", "a1-next", "thanks"), 2).await;
    assert_eq!(replies_to(&channel, "ada")[0], "echo: a slow question");
    assert_eq!(answered, "echo: thanks");
    fake.set_delay(Duration::ZERO);
    let again = say(&app, &channel, dm("fake", "bob", "b2", "now?"), 2).await;
    assert_eq!(again, "echo: now?");
    let client = pg_client(&db.url()).await;
    let bob: Vec<String> = client
        .query(
            "SELECT text FROM mnemo_messages WHERE user_key = $1 ORDER BY seq",
            &[&mnemo_sessions::SafeName::of("bob").as_str()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        bob,
        ["anyone there?", "now?", "echo: now?"],
        "the question was kept; the next answer settles it"
    );
}

/// The memory of a broker that stores questions and dies before it
/// answers them (its turn lock goes with its connection).
fn dead_broker(store: PgStore) -> mnemo_pg::PgChannel {
    mnemo_pg::PgChannel::new(
        store,
        "fake",
        mnemo_sessions::config::SessionConfig::default(),
        Arc::new(mnemo::model::ModelSummarizer::new(Arc::new(
            mnemo::bench::instant::InstantModel,
        ))),
    )
}

/// `question` as its user's record.
fn stored_as(question: &Inbound) -> mnemo_sessions::Record {
    mnemo_sessions::Record {
        ts: question.ts,
        role: mnemo_sessions::Role::User,
        text: question.text.clone(),
        msg_id: question.msg_id.clone(),
        channel: question.channel.clone(),
        thread_id: None,
        chat_id: Some(question.chat_id.clone()),
        user_name: question.user_name.clone(),
    }
}

/// A question stored by a broker that died before answering it comes back
/// (the platform delivers it again): it is answered now, once, and not
/// stored twice; a redelivery of an answered question stays unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_question_without_an_answer_is_answered_when_it_comes_again() {
    let (fake, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated_store(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(store.clone())).await;
    // What the dead broker left: the question committed, no answer.
    let dead = dead_broker(store);
    let question = dm("fake", "ada", "q1", "is the ferry running today?");
    let mut turn = dead.begin_turn(&mnemo_sessions::SafeName::of("ada")).await.unwrap();
    let record = stored_as(&question);
    turn.append(&record, question.ts).await.unwrap();
    drop(turn);

    let answer = say(&app, &channel, question.clone(), 1).await;
    assert_eq!(answer, "echo: is the ferry running today?");
    app.submit(question).await;
    let after = say(&app, &channel, dm("fake", "ada", "q2", "thanks"), 2).await;
    assert_eq!(after, "echo: thanks", "the second redelivery got no second answer");
    assert_eq!(replies_to(&channel, "ada").len(), 2);
    assert_eq!(fake.chat_requests().len(), 2);
    let client = pg_client(&db.url()).await;
    let texts: Vec<String> = client
        .query("SELECT text FROM mnemo_messages ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        texts,
        [
            "is the ferry running today?",
            "echo: is the ferry running today?",
            "thanks",
            "echo: thanks"
        ]
    );
}

/// Questions a broker stored and died before answering (its turn lock
/// went with its connection): another broker's sweep answers the fresh
/// one, gives the stale one up with one notice, leaves alone what is not
/// old enough to be left, and never answers one twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_answers_the_questions_a_dead_broker_left_once() {
    let (fake, url) = FakeModel::start().await;
    let db = pg::database();
    let store = migrated_store(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let (app, channel) = broker(dir.path(), &url, Some(store.clone())).await;
    let dead = dead_broker(store);
    let left = |user: &str, id: &str, text: &str, minutes_ago: i64| {
        let mut question = dm("fake", user, id, text);
        question.ts = chrono::Utc::now() - chrono::TimeDelta::minutes(minutes_ago);
        question
    };
    let questions = [
        left("ada", "a1", "did the ferry leave on time?", 5),
        left("bob", "b1", "what was the tide table?", 45),
        left("cy", "c1", "is the pier open?", 0),
    ];
    for question in &questions {
        let user = mnemo_sessions::SafeName::of(&question.user_id);
        dead.intake(&user, &stored_as(question), chrono::Utc::now())
            .await
            .unwrap();
    }

    let swept = app.sweep().await;
    assert_eq!(
        (swept.answered, swept.stale),
        (1, 1),
        "cy's question is not old enough to be left"
    );
    let answer = eventually("ada's answer", async || replies_to(&channel, "ada").first().cloned()).await;
    assert_eq!(answer, "echo: did the ferry leave on time?");
    let notice = eventually("bob's notice", async || replies_to(&channel, "bob").first().cloned()).await;
    assert!(notice.contains("did not answer your message"), "{notice}");
    app.wait_turns(Duration::from_secs(10)).await;

    let again = app.sweep().await;
    assert_eq!((again.answered, again.stale), (0, 0), "settled: nothing queued again");
    assert_eq!(fake.chat_requests().len(), 1, "only ada's question reached the model");
    assert!(replies_to(&channel, "cy").is_empty());
    let client = pg_client(&db.url()).await;
    let settled: Vec<String> = client
        .query(
            "SELECT msg_id FROM mnemo_messages WHERE role = 'assistant' ORDER BY msg_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(settled, ["re-a1", "re-b1"]);
}

/// A migrated store and whether pgvector is in use there; it must be when
/// the run asks for it (`MNEMO_TEST_REQUIRE_PGVECTOR`).
async fn migrated_store_with_vectors(url: &str) -> (PgStore, bool) {
    let store = migrated_store(url).await;
    let in_use = store.vectors().await.unwrap() == mnemo_pg::Vectors::InUse;
    assert!(
        in_use || !pg::pgvector_required(),
        "MNEMO_TEST_REQUIRE_PGVECTOR is set but the server has no pgvector"
    );
    (store, in_use)
}

/// `recall.embeddings` on Postgres, through the broker: with pgvector the
/// vectors of every message are stored in the background and a paraphrase
/// with no word in common is recalled by its vector; without it the turn
/// is answered from full text alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pgvector_a_paraphrase_is_recalled_through_the_broker() {
    const TOLD: &str = "I parked the automobile on level three of the north garage.";
    const ASKED: &str = "Where did I leave my car?";
    let (fake, url) = FakeModel::start().await;
    let (embedder, embed_url) = mnemo_testkit::embeddings::FakeEmbeddings::start().await;
    let db = pg::database();
    let (store, in_use) = migrated_store_with_vectors(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let embeddings =
        json!({"embeddings": {"provider": "openai", "baseUrl": embed_url, "apiKeyEnv": "", "model": "fake-embed"}});
    let (app, channel) = broker_with(dir.path(), &url, Some(store), json!({ "recall": embeddings })).await;
    say(&app, &channel, dm("fake", "ada", "t", TOLD), 1).await;
    for i in 0..6 {
        let text = format!("Some chatter about the weather and lunch, number {i}.");
        say(&app, &channel, dm("fake", "ada", &format!("h{i}"), &text), i + 2).await;
    }
    let client = pg_client(&db.url()).await;
    if in_use {
        eventually("every message embedded", async || {
            let row = client
                .query_one("SELECT count(*) FROM mnemo_vectors WHERE model = 'fake-embed'", &[])
                .await
                .unwrap();
            row.get::<_, i64>(0) >= 14
        })
        .await;
        assert!(embedder.inputs().iter().any(|t| t == TOLD), "the message was embedded");
    }
    say(&app, &channel, dm("fake", "ada", "q", ASKED), 8).await;
    let asked = request_text(&fake.chat_requests().last().cloned().unwrap());
    assert_eq!(
        asked.contains("level three of the north garage"),
        in_use,
        "recalled by its vector exactly when pgvector is in use: {asked}"
    );
    app.wait_background(Duration::from_secs(30)).await;
}

/// `mnemo sessions reindex` on Postgres computes the vectors a history
/// copied or seeded without a broker lacks, once, with progress; and says
/// so when pgvector is not set up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_reindex_on_postgres_computes_the_missing_vectors() {
    let (_fake, url) = FakeModel::start().await;
    let (embedder, embed_url) = mnemo_testkit::embeddings::FakeEmbeddings::start().await;
    let db = pg::database();
    let (store, in_use) = migrated_store_with_vectors(&db.url()).await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = write_pg_config(dir.path(), &url, "broker-1");
    let sessions = mnemo_sessions::Layout::new(dir.path().join("broker-1"), "telegram").config_path();
    std::fs::create_dir_all(sessions.parent().unwrap()).unwrap();
    let recall = json!({"recall": {"embeddings": {"provider": "openai", "baseUrl": embed_url, "apiKeyEnv": "", "model": "fake-embed"}}});
    std::fs::write(&sessions, recall.to_string()).unwrap();
    // A history of 70 messages written without a broker (as `store copy`
    // writes one): no vectors yet.
    let start = chrono::Utc::now() - chrono::TimeDelta::minutes(100);
    written_without_a_broker((&store, dir.path(), &url), start, 70, |i| {
        format!("note {i} about the automobile")
    })
    .await;
    let run = || {
        let mut cmd = support::mnemo(&config, &home);
        cmd.env("MNEMO_DATABASE_URL", db.url()).args(["sessions", "reindex"]);
        cmd.output().unwrap()
    };
    let out = run();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !in_use {
        assert!(!out.status.success(), "{stdout}");
        assert!(stderr.contains("pgvector is not set up in the database"), "{stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("computed 70 missing vectors of 1 user(s)"), "{stdout}");
    assert!(stderr.contains("telegram: user 1/1 done: 70 vectors"), "{stderr}");
    assert!(embedder.inputs().iter().any(|t| t == "note 7 about the automobile"));
    let stored: i64 = pg_client(&db.url())
        .await
        .query_one("SELECT count(*) FROM mnemo_vectors WHERE model = 'fake-embed'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 70);
    let again = run();
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("computed 0 missing vectors"),
        "once: {}",
        String::from_utf8_lossy(&again.stdout)
    );
    // The endpoint down: an error that says what to do, nothing lost.
    pg_client(&db.url())
        .await
        .execute("DELETE FROM mnemo_vectors WHERE seq > 35", &[])
        .await
        .unwrap();
    embedder.set(mnemo_testkit::embeddings::Mode::Down);
    let down = run();
    let stderr = String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success());
    assert!(
        stderr.contains("run reindex again once the embeddings endpoint works"),
        "{stderr}"
    );
}
