//! Recall end to end: the real `App` with the fake model server at the
//! network edge. A fact told weeks ago, folded out of STM into the archive
//! by real compaction, reaches the model request of a later question —
//! dated, and only for the user who told it, in the channel they told it
//! in; across restarts; and not when the operator turns recall off. Facts
//! the summarizer found go to the dated fact log: a changed fact keeps its
//! old value with its dates, which recall brings to a "before" question;
//! a plain-string fact is kept as a note and a malformed one is logged
//! (without its text) while the fold goes on.

use crate::support;

#[path = "recall/embeddings.rs"]
mod embeddings;

use chrono::{TimeDelta, Utc};
use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, Inbound, OutboundBody};
use mnemo_sessions::{Layout, SafeName, archive};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use support::{FakeChannel, FakeModel, app_parts, dm, last_user_message, request_text};

const QUESTION: &str = "What was my passport number again?";
const CANARY: &str = "canary-P-4411";

/// One run of a fresh `App` (a restart each time) over channels `fake`
/// and `other`, answering `messages` in order, each sent once the one
/// before is answered and its turn done (a conversation: folds come
/// between turns, as the messages' dates have them; sent all at once,
/// every message would be stored before the first fold); returns what it
/// sent.
async fn run(state: &Path, url: &str, messages: Vec<Inbound>) -> Vec<String> {
    let limits = LimitsConfig {
        user_queue_depth: 200,
        user_messages_per_minute: 0,
        ..LimitsConfig::default()
    };
    let (fake, fake_in) = FakeChannel::new("fake");
    let (other, other_in) = FakeChannel::new("other");
    let channels = vec![fake.clone() as Arc<dyn Channel>, other.clone() as Arc<dyn Channel>];
    let app = App::new(app_parts(state, url, limits), channels.clone()).unwrap();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let app = app.clone();
        async move { app.serve(channels, stop).await }
    });
    let replies = || fake.sent().len() + other.sent().len();
    for m in messages {
        let inbox = if m.channel == "fake" { &fake_in } else { &other_in };
        let before = replies();
        inbox.send(m).await.unwrap();
        support::eventually("the reply", async || (replies() > before).then_some(())).await;
        app.wait_turns(std::time::Duration::from_secs(10)).await;
    }
    drop((fake_in, other_in));
    assert!(serving.await.unwrap(), "every turn finished");
    // Folds still running finish (bounded) before the next run reads the files.
    app.wait_background(std::time::Duration::from_secs(10)).await;
    [fake.sent(), other.sent()]
        .concat()
        .into_iter()
        .map(|o| match o.body {
            OutboundBody::Text(t) => t,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn said(channel: &str, user: &str, id: &str, days_ago: i64, text: &str) -> Inbound {
    let mut m = dm(channel, user, id, text);
    m.ts = Utc::now() - TimeDelta::days(days_ago);
    m
}

/// The chat request that asked `QUESTION` last.
fn question_request(fake: &FakeModel) -> String {
    let requests = fake.chat_requests();
    let last = requests.last().expect("a model request");
    assert_eq!(last_user_message(last), QUESTION);
    request_text(last)
}

fn small_memory(state: &Path, channel: &str, recall: serde_json::Value) {
    let path = Layout::new(state, channel).config_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let config = json!({
        "stm": {"maxMessages": 12, "contextWindow": 4},
        "compacting": {"threshold": 12},
        "recall": recall,
    });
    std::fs::write(path, config.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_from_weeks_ago_in_the_archive_reaches_only_its_owners_request() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    for channel in ["fake", "other"] {
        support::open_access(state, channel, &[]);
        small_memory(state, channel, json!({}));
    }
    let topics = [
        "the weather",
        "my commute",
        "a film I saw",
        "dinner plans",
        "the gym",
        "a new book",
    ];
    let mut history = vec![said(
        "fake",
        "ada",
        "p",
        21,
        &format!("My passport number is {CANARY}, keep it safe."),
    )];
    for i in 0..30 {
        let text = format!("Let me tell you about {} today, part {i}.", topics[i % topics.len()]);
        history.push(said("fake", "ada", &format!("h{i}"), 20 - (i as i64 * 2 / 3), &text));
    }
    // The same id in another channel is another person's memory.
    history.push(said("other", "ada", "o1", 5, "My favourite colour is teal."));
    run(state, &url, history).await;

    let layout = Layout::new(state, "fake");
    let ada = SafeName::of("ada");
    let archived = archive::read_all(&layout, &ada).unwrap();
    assert!(
        archived.iter().any(|r| r.text.contains(CANARY)),
        "compaction archived the fact"
    );
    let live = std::fs::read_to_string(layout.messages_path(&ada)).unwrap();
    assert!(!live.contains(CANARY), "the fact is no longer in STM");

    // A restart, then the question: recall brings the fact back, dated.
    run(state, &url, vec![dm("fake", "ada", "q1", QUESTION)]).await;
    let text = question_request(&fake);
    let day = (Utc::now() - TimeDelta::days(21)).format("%Y-%m-%d");
    assert!(
        text.contains(&format!("[{day}, you] My passport number is {CANARY}")),
        "{text}"
    );
    assert_eq!(text.matches(QUESTION).count(), 1, "the question is sent once");

    // Nobody else gets it: another user, the same id in another channel.
    run(state, &url, vec![dm("fake", "bob", "q2", QUESTION)]).await;
    assert!(!question_request(&fake).contains(CANARY));
    run(state, &url, vec![dm("other", "ada", "q3", QUESTION)]).await;
    assert!(!question_request(&fake).contains(CANARY));

    // Ada can search for it herself, without a model call.
    let calls = fake.chat_requests().len();
    let replies = run(state, &url, vec![dm("fake", "ada", "s1", "/session search passport")]).await;
    assert!(
        replies.iter().any(|r| r.contains(CANARY) && r.contains("you]")),
        "{replies:?}"
    );
    assert_eq!(fake.chat_requests().len(), calls, "search asks no model");

    // The operator turns recall off: the fact stays out of the request.
    small_memory(state, "fake", json!({"enabled": false}));
    run(state, &url, vec![dm("fake", "ada", "q4", QUESTION)]).await;
    assert!(!question_request(&fake).contains(CANARY));

    // `/session clear all confirm` forgets it everywhere, at once.
    small_memory(state, "fake", json!({}));
    run(state, &url, vec![dm("fake", "ada", "c1", "/session clear all confirm")]).await;
    run(state, &url, vec![dm("fake", "ada", "q5", QUESTION)]).await;
    assert!(!question_request(&fake).contains(CANARY));
}

/// With recall off, turns make no index nobody searches: the first
/// `/session search` builds the user's from their files, the turns after it
/// keep it current, and turning recall on brings in everything said
/// meanwhile, folded into the archive or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_recall_off_the_index_is_made_by_the_first_search_and_then_kept_current() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    support::open_access(state, "fake", &[]);
    small_memory(state, "fake", json!({"enabled": false}));
    let index_dir = Layout::new(state, "fake").recall_dir(&SafeName::of("ada"));

    run(
        state,
        &url,
        vec![dm("fake", "ada", "m1", &format!("My passport number is {CANARY}."))],
    )
    .await;
    assert!(!index_dir.exists(), "no index while nothing searches");

    let replies = run(
        state,
        &url,
        vec![
            dm("fake", "ada", "s1", "/session search passport"),
            dm("fake", "ada", "m2", "My locker code is canary-L-2718."),
            dm("fake", "ada", "s2", "/session search locker"),
        ],
    )
    .await;
    // The model's answers echo what was said: only the searches' own
    // replies count.
    let found: Vec<&String> = replies.iter().filter(|r| r.starts_with("Found ")).collect();
    assert!(
        found.first().is_some_and(|r| r.contains(CANARY)),
        "built from STM: {replies:?}"
    );
    assert!(
        replies
            .last()
            .is_some_and(|r| r.starts_with("Found ") && r.contains("canary-L-2718")),
        "the loaded index got the later message: {replies:?}"
    );
    assert!(index_dir.exists());

    // Enough small talk to fold the passport into the archive, then recall on.
    let talk = (0..14).map(|i| dm("fake", "ada", &format!("t{i}"), &format!("Small talk number {i}.")));
    run(state, &url, talk.collect()).await;
    let archived = archive::read_all(&Layout::new(state, "fake"), &SafeName::of("ada")).unwrap();
    assert!(
        archived.iter().any(|r| r.text.contains(CANARY)),
        "folded while recall was off"
    );
    small_memory(state, "fake", json!({}));
    run(state, &url, vec![dm("fake", "ada", "q1", QUESTION)]).await;
    assert!(question_request(&fake).contains(CANARY));
}

/// `count` messages of small talk from `days_ago` on, one per few hours.
fn small_talk(user: &str, tag: &str, days_ago: i64, count: usize) -> Vec<Inbound> {
    (0..count)
        .map(|i| {
            let mut m = said(
                "fake",
                user,
                &format!("{tag}{i}"),
                days_ago,
                &format!("Small talk number {i}."),
            );
            m.ts += TimeDelta::hours(3 * i as i64 + 1);
            m
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_fact_keeps_its_dated_old_value_which_recall_brings_to_a_before_question() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    support::open_access(state, "fake", &[]);
    small_memory(state, "fake", json!({}));
    let lisbon = json!({"summary": "Ada talked about home.", "facts": [
        {"section": "facts", "key": "home city", "value": "Lisbon"},
        "Has a cat named Miso"
    ]});
    let oslo = json!({"summary": "Ada talked about moving.", "facts": [
        {"section": "facts", "key": "home city", "value": "Oslo"}
    ]});
    fake.summarize_when("I live in Lisbon", lisbon.to_string());
    fake.summarize_when("I moved to Oslo", oslo.to_string());
    let mut history = vec![said("fake", "ada", "a", 30, "I live in Lisbon, by the river.")];
    history.extend(small_talk("ada", "s", 30, 14));
    history.push(said("fake", "ada", "b", 10, "I moved to Oslo, it is cold."));
    history.extend(small_talk("ada", "t", 10, 14));
    run(state, &url, history).await;

    let layout = Layout::new(state, "fake");
    let ada = SafeName::of("ada");
    let profile = std::fs::read_to_string(layout.profile_path(&ada)).unwrap();
    assert!(
        profile.contains("- home city: Oslo") && !profile.contains("Lisbon"),
        "{profile}"
    );
    assert!(
        profile.contains("Has a cat named Miso"),
        "a plain-string fact is a note: {profile}"
    );
    let log = std::fs::read_to_string(layout.facts_path(&ada)).unwrap();
    let entries: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let day = |ago: i64| (Utc::now() - TimeDelta::days(ago)).format("%Y-%m-%d").to_string();
    let city: Vec<(&str, String, &str)> = entries
        .iter()
        .filter(|e| e["key"] == "home city")
        .map(|e| {
            (
                e["value"].as_str().unwrap(),
                e["ts"].as_str().unwrap()[..10].to_string(),
                e["by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        city,
        vec![("Lisbon", day(30), "compaction"), ("Oslo", day(10), "compaction")],
        "{log}"
    );
    assert!(
        log.contains(r#""supersedes":"Lisbon""#) && log.contains(r#""sources":["a""#),
        "{log}"
    );

    run(
        state,
        &url,
        vec![dm("fake", "ada", "q", "Which city did I live in before?")],
    )
    .await;
    let requests = fake.chat_requests();
    let text = request_text(requests.last().unwrap());
    assert!(
        text.contains(&format!("[{}, fact; until {}] home city: Lisbon", day(30), day(10))),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_fact_is_logged_without_its_text_the_fold_goes_on_and_clear_all_removes_the_log() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    small_memory(&state, "console", json!({}));
    let reply = json!({"summary": "Ada keeps bees.", "facts": [
        {"section": "mood", "key": "feeling", "value": "SECRET-MOOD-TEXT"},
        42,
        {"section": "facts", "key": "hobby", "value": "beekeeping"}
    ]});
    fake.summarize_when("I keep bees", reply.to_string());
    let mut input = String::from("I keep bees on the roof\n");
    for i in 0..14 {
        input.push_str(&format!("small talk {i}\n"));
    }
    let chat = |input: String| {
        let (config, home) = (config.clone(), dir.path().to_path_buf());
        tokio::task::spawn_blocking(move || {
            let mut cmd = support::mnemo(&config, &home);
            cmd.arg("chat");
            let out = support::with_input(cmd, input.as_bytes());
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stderr).into_owned()
        })
    };
    let stderr = chat(input).await.unwrap();

    let layout = Layout::new(&state, "console");
    let ada = SafeName::of("ada");
    let log = std::fs::read_to_string(layout.facts_path(&ada)).unwrap();
    assert!(
        log.contains(r#""key":"hobby","value":"beekeeping""#) && log.lines().count() == 1,
        "{log}"
    );
    assert!(
        !archive::read_all(&layout, &ada).unwrap().is_empty(),
        "the fold went on"
    );
    let mut logged = stderr;
    for entry in std::fs::read_dir(state.join("logs")).unwrap() {
        logged += &std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
    }
    assert!(logged.contains("summarizer fact skipped"), "{logged}");
    assert!(
        !logged.contains("SECRET-MOOD-TEXT") && !logged.contains("beekeeping"),
        "{logged}"
    );

    chat("/session clear all confirm\n".into()).await.unwrap();
    assert!(!layout.facts_path(&ada).exists());
}
