//! End-to-end tests of the broker (issue: console chat, ordered dispatch,
//! CLI): the real `mnemo` binary or the real `App`, with fakes only at the
//! network edge (a model server on 127.0.0.1, a stand-in channel).

mod attachments;
mod deadline;
mod streaming;
use crate::support;

use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, OutboundBody};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::{
    FakeChannel, FakeModel, app_parts, dm, eventually, last_user_message, mnemo, request_text, write_config,
};

/// Runs `mnemo chat` with `input` on a pipe; returns stdout (and asserts exit 0).
fn chat(config: &Path, home: &Path, input: &str) -> String {
    let mut cmd = mnemo(config, home);
    cmd.arg("chat");
    let out = support::with_input(cmd, input.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mnemo chat failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn stm_records(state: &Path, channel: &str, user: &str) -> Vec<Record> {
    support::stm_written(&Layout::new(state, channel).messages_path(&SafeName::of(user)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_chat_remembers_across_turns_and_restarts() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (c, h) = (config.clone(), dir.path().to_path_buf());

    let out = tokio::task::spawn_blocking(move || {
        chat(&c, &h, "my name is Ada\nI like green tea\nwhat do you know about me?\n")
    })
    .await
    .unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "echo: my name is Ada",
            "echo: I like green tea",
            "echo: what do you know about me?"
        ]
    );
    let requests = fake.chat_requests();
    assert_eq!(requests.len(), 3);
    let third = request_text(&requests[2]);
    assert!(
        third.contains("my name is Ada") && third.contains("I like green tea"),
        "{third}"
    );
    assert_eq!(last_user_message(&requests[2]), "what do you know about me?");
    assert_eq!(
        third.matches("what do you know about me?").count(),
        1,
        "the answered message is sent once"
    );

    // A new process: the memory is on disk, not in the old process.
    let (c, h) = (config.clone(), dir.path().to_path_buf());
    let out =
        tokio::task::spawn_blocking(move || chat(&c, &h, "and now?\n/session status\n/session clear\nwho am I?\n"))
            .await
            .unwrap();
    let requests = fake.chat_requests();
    let fourth = request_text(&requests[3]);
    assert!(
        fourth.contains("my name is Ada") && fourth.contains("echo: I like green tea"),
        "{fourth}"
    );
    assert!(out.contains("echo: and now?"));
    assert!(out.contains("8"), "status counts the 8 stored messages: {out}");
    assert_eq!(requests.len(), 5, "/session commands never reach the model");
    let after_clear = request_text(&requests[4]);
    assert!(
        !after_clear.contains("Ada"),
        "clear forgets the conversation: {after_clear}"
    );

    let records = stm_records(&dir.path().join("state"), "console", "ada");
    assert_eq!(
        records.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["who am I?", "echo: who am I?"]
    );
    // The broker's own log: a daily JSON file under <state>/logs, with ids
    // and reasons but never what people wrote.
    let logs: Vec<_> = std::fs::read_dir(dir.path().join("state/logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("mnemo.log."))
        .collect();
    assert!(!logs.is_empty(), "a daily log file is written");
    let text: String = logs.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    assert!(text.contains("mnemo started"), "{text}");
    for said in ["my name is Ada", "green tea", "who am I?"] {
        assert!(!text.contains(said), "message text leaked into the log: {said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_users_keep_their_order_and_their_own_memory_under_a_model_cap() {
    let (fake, url) = FakeModel::start().await;
    fake.set_delay(Duration::from_millis(5));
    let dir = tempfile::tempdir().unwrap();
    let limits = LimitsConfig {
        max_concurrent_model_calls: 4,
        user_queue_depth: 50,
        // 20 messages each, at once: this is about ordering, not flood limits.
        user_messages_per_minute: 0,
        ..LimitsConfig::default()
    };
    support::open_access(dir.path(), "fake", &[]);
    let (channel, inbox) = FakeChannel::new("fake");
    let app = App::new(
        app_parts(dir.path(), &url, limits),
        vec![channel.clone() as Arc<dyn Channel>],
    )
    .unwrap();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let app = app.clone();
        let channel = channel.clone() as Arc<dyn Channel>;
        async move { app.serve(vec![channel], stop).await }
    });
    for i in 0..20 {
        for u in 0..50 {
            let text = format!("canary-u{u}-end message {i}");
            inbox
                .send(dm("fake", &format!("u{u}"), &format!("u{u}-{i}"), &text))
                .await
                .unwrap();
        }
    }
    drop(inbox);
    assert!(serving.await.unwrap(), "every turn finished");

    assert!(fake.max_in_flight.load(Ordering::SeqCst) <= 4, "model cap held");
    let requests = fake.chat_requests();
    assert_eq!(requests.len(), 1000);
    for r in &requests {
        let asker = last_user_message(r);
        let owner = format!("{}-end", asker.split("-end").next().unwrap());
        let text = request_text(r);
        for u in 0..50 {
            let canary = format!("canary-u{u}-end");
            if canary != owner {
                assert!(!text.contains(&canary), "{owner}'s request carried {canary}");
            }
        }
    }
    let sent = channel.sent();
    for u in 0..50 {
        let expected: Vec<String> = (0..20).map(|i| format!("canary-u{u}-end message {i}")).collect();
        let replies: Vec<String> = sent
            .iter()
            .filter(|o| o.chat_id == format!("dm-u{u}"))
            .map(|o| match &o.body {
                OutboundBody::Text(t) => t.trim_start_matches("echo: ").to_string(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(replies, expected, "replies to u{u} in order");
        let stored = stm_records(dir.path(), "fake", &format!("u{u}"));
        let said: Vec<_> = stored
            .iter()
            .filter(|r| r.role == Role::User)
            .map(|r| r.text.clone())
            .collect();
        assert_eq!(said, expected, "u{u}'s STM in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_outage_is_explained_and_loses_nothing() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    support::open_access(dir.path(), "fake", &[]);
    let (channel, inbox) = FakeChannel::new("fake");
    let app = App::new(
        app_parts(dir.path(), &url, LimitsConfig::default()),
        vec![channel.clone() as Arc<dyn Channel>],
    )
    .unwrap();
    fake.down.store(true, Ordering::SeqCst);
    app.submit(dm("fake", "bo", "1", "remember the blue door")).await;
    eventually("the first reply", async || channel.sent().len() == 1).await;
    let OutboundBody::Text(reply) = &channel.sent()[0].body else {
        panic!()
    };
    assert!(
        reply.contains("saved"),
        "the user is told their message is kept: {reply}"
    );
    assert_eq!(stm_records(dir.path(), "fake", "bo")[0].text, "remember the blue door");

    fake.down.store(false, Ordering::SeqCst);
    app.submit(dm("fake", "bo", "2", "what door?")).await;
    eventually("the second reply", async || channel.sent().len() == 2).await;
    let last = fake.chat_requests().pop().unwrap();
    assert!(request_text(&last).contains("remember the blue door"));
    assert_eq!(last_user_message(&last), "what door?");
    drop(inbox);
}

/// The binary under SIGTERM: the turn in flight still gets its answer
/// within the grace, the records are whole, and a restart continues. (The
/// grace running out is specified with a paused clock below, so no test
/// waits it out in real time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_turn_leaves_whole_records_and_a_restart_continues() {
    let (fake, url) = FakeModel::start().await;
    fake.set_delay(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({"timeoutSecs": 60}));
    let mut child = mnemo(&config, dir.path())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"the code word is heron\n").unwrap();
    eventually("the model call", async || !fake.chat_requests().is_empty()).await;
    support::sigterm(child.id());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "exit 0 after SIGTERM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(stdin);

    let records = stm_records(&dir.path().join("state"), "console", "ada");
    assert_eq!(records[0].text, "the code word is heron");
    assert_eq!(
        records.get(1).map(|r| r.text.as_str()),
        Some("echo: the code word is heron"),
        "the turn in flight was answered within the grace"
    );

    fake.set_delay(Duration::ZERO);
    let (c, h) = (config.clone(), dir.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || chat(&c, &h, "what was the code word?\n"))
        .await
        .unwrap();
    assert_eq!(out.trim(), "echo: what was the code word?");
    let last = fake.chat_requests().pop().unwrap();
    assert!(request_text(&last).contains("the code word is heron"));
}

/// After a shutdown signal, a turn still waiting on the model when the
/// grace ends is given up: `serve` reports it did not finish, the user's
/// message stays saved and nothing half-done is sent. On tokio's paused
/// clock, so the ten seconds of grace cost no real time.
#[tokio::test(start_paused = true)]
async fn a_turn_still_waiting_when_the_shutdown_grace_ends_is_given_up_with_its_message_saved() {
    let (fake, url) = FakeModel::start().await;
    fake.set_delay(Duration::from_secs(3600));
    let dir = tempfile::tempdir().unwrap();
    support::open_access(dir.path(), "fake", &[]);
    let limits = LimitsConfig {
        user_messages_per_minute: 0,
        ..LimitsConfig::default()
    };
    let mut parts = app_parts(dir.path(), &url, limits);
    // The model's own timeout must not end the turn before the grace does.
    let slow: mnemo::model::config::ModelConfig = serde_json::from_value(json!({
        "provider": "openai", "baseUrl": url, "apiKeyEnv": "UNUSED_KEY", "model": "fake-1",
        "timeoutSecs": 7200, "maxRetries": 0
    }))
    .unwrap();
    parts.model = mnemo::model::build(&slow, &|_: &str| Some("sk-test".to_string())).unwrap();
    parts.model_timeout = Duration::from_secs(7200);
    let (channel, inbox) = FakeChannel::new("fake");
    let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).unwrap();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let (app, channel) = (app.clone(), channel.clone() as Arc<dyn Channel>);
        async move { app.serve(vec![channel], stop).await }
    });

    inbox.send(dm("fake", "bo", "1", "keep this one")).await.unwrap();
    eventually("the model call", async || !fake.chat_requests().is_empty()).await;
    let signalled = tokio::time::Instant::now();
    stop_tx.send(true).unwrap();
    let finished = serving.await.unwrap();

    assert!(!finished, "serve reports the turn it gave up");
    assert!(
        signalled.elapsed() >= mnemo::app::SHUTDOWN_GRACE,
        "the turn had the whole grace (paused clock)"
    );
    let records = stm_records(dir.path(), "fake", "bo");
    assert_eq!(records.len(), 1, "the message is saved, no answer is: {records:?}");
    assert_eq!(records[0].text, "keep this one");
    assert!(channel.sent().is_empty(), "nothing half-done is sent");
}

/// A message a platform handed over just as the shutdown signal fired is
/// saved (and the user told so), not dropped with the broker's inbox. On
/// the real clock: the late turn ends the drain long before the grace does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_handed_over_as_the_shutdown_signal_fires_is_saved_not_dropped() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    support::open_access(dir.path(), "fake", &[]);
    let parts = app_parts(dir.path(), &url, LimitsConfig::default());
    let (channel, _inbox) = FakeChannel::new("fake");
    channel.hand_over_on_stop(dm("fake", "late", "9", "sent as the bot stopped"));
    let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).unwrap();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let (app, channel) = (app.clone(), channel.clone() as Arc<dyn Channel>);
        async move { app.serve(vec![channel], stop).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    stop_tx.send(true).unwrap();

    assert!(serving.await.unwrap(), "the late message's turn finished in the grace");
    let records = stm_records(dir.path(), "fake", "late");
    assert_eq!(records.len(), 1, "the late message is saved, unanswered: {records:?}");
    assert_eq!(records[0].text, "sent as the bot stopped");
    let sent = channel.sent();
    assert_eq!(sent.len(), 1, "the user is told it was saved: {sent:?}");
    assert!(matches!(&sent[0].body, OutboundBody::Text(t) if t == mnemo::pipeline::SAVED_WHILE_STOPPING));
}

#[test]
fn chat_without_a_model_says_how_to_configure_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .arg("chat")
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for var in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "OLLAMA_BASE_URL",
    ] {
        assert!(stderr.contains(var), "{var} missing from: {stderr}");
    }
}

#[test]
fn config_check_refuses_a_bad_field_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"limits": {"maxMessageChar": 10}}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["config", "check", "--config"])
        .arg(&path)
        .env_clear()
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("limits.maxMessageChar") && stderr.contains("config.json"),
        "{stderr}"
    );
}

/// The turn path reads memory from session state: what changes on disk
/// between turns — an operator's profile edit (within
/// `session::FILES_RECHECK`), a `/session clear`, the background
/// compaction — is what the next prompt shows, and compaction still bounds
/// the log and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_prompt_follows_the_files_through_edits_clears_and_compactions() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    support::open_access(dir.path(), "fake", &[]);
    let layout = Layout::new(dir.path(), "fake");
    let config =
        json!({ "stm": { "contextWindow": 2, "maxMessages": 8, "fsync": false }, "compacting": { "threshold": 6 } });
    std::fs::write(layout.config_path(), config.to_string()).unwrap();
    let limits = LimitsConfig {
        user_messages_per_minute: 0,
        ..LimitsConfig::default()
    };
    let (channel, _inbox) = FakeChannel::new("fake");
    let app = App::new(
        app_parts(dir.path(), &url, limits),
        vec![channel.clone() as Arc<dyn Channel>],
    )
    .unwrap();
    let mut sent = 0;
    let mut turn = |text: &str| {
        sent += 1;
        let (app, channel, n, message) = (
            app.clone(),
            channel.clone(),
            sent,
            dm("fake", "ada", &format!("m{sent}"), text),
        );
        async move {
            app.submit(message).await;
            eventually(format_args!("reply {n}"), async || channel.sent().len() == n).await;
        }
    };

    turn("my name is Ada").await;
    let profile = layout.profile_path(&SafeName::of("ada"));
    std::fs::create_dir_all(profile.parent().unwrap()).unwrap();
    std::fs::write(&profile, "---\nuserId: ada\n---\n## Preferences\n- likes green tea\n").unwrap();
    // An edit from outside the bot is looked for at most once a second.
    let recheck = mnemo_sessions::session::FILES_RECHECK.to_std().unwrap();
    tokio::time::sleep(recheck).await;
    turn("what do I like?").await;
    let prompt = request_text(&fake.chat_requests().pop().unwrap());
    assert!(
        prompt.contains("likes green tea") && prompt.contains("my name is Ada"),
        "{prompt}"
    );

    turn("/session clear").await;
    turn("who am I?").await;
    let prompt = request_text(&fake.chat_requests().pop().unwrap());
    assert!(
        !prompt.contains("my name is Ada"),
        "cleared messages stay out: {prompt}"
    );
    assert!(
        prompt.contains("likes green tea"),
        "the profile is long-term memory: {prompt}"
    );

    for i in 0..8 {
        turn(&format!("message {i}")).await;
    }
    app.wait_background(Duration::from_secs(10)).await;
    let user = SafeName::of("ada");
    assert!(layout.summary_path(&user).exists(), "compaction folded into a summary");
    let log = stm_records(dir.path(), "fake", "ada");
    assert!(log.len() <= 8, "the log stays bounded: {}", log.len());
    let mut everything = mnemo_sessions::archive::read_all(&layout, &user).unwrap();
    everything.extend(log);
    let said: Vec<String> = everything
        .iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text.clone())
        .collect();
    let expected: Vec<String> = std::iter::once("who am I?".to_string())
        .chain((0..8).map(|i| format!("message {i}")))
        .collect();
    assert_eq!(said, expected, "every message since the clear, once, in order");
    turn("and now?").await;
    let prompt = request_text(&fake.chat_requests().pop().unwrap());
    assert!(
        prompt.contains("message 7"),
        "the recent window after the fold: {prompt}"
    );
}

/// `/help` on the console is the broker's `/session help`, as on Telegram:
/// answered by mnemo, never sent to the model, never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_on_the_console_lists_the_commands_without_the_model() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (c, h) = (config.clone(), dir.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || chat(&c, &h, "/help\n"))
        .await
        .unwrap();
    assert!(out.contains(mnemo_sessions::commands::HELP), "{out}");
    assert!(fake.chat_requests().is_empty(), "the model was not asked");
    assert!(stm_records(&dir.path().join("state"), "console", "ada").is_empty());
}

/// A piped `mnemo chat` whose every model call failed exits non-zero and
/// says so: a script learns that no question was answered. One answer is
/// enough to exit 0 (the failures are in the log and the replies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_chat_exits_non_zero_when_no_question_was_answered() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: every call is refused.
    let config = write_config(dir.path(), "http://127.0.0.1:1", json!({"timeoutSecs": 2}));
    let (c, h) = (config.clone(), dir.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = mnemo(&c, &h);
        cmd.arg("chat");
        support::with_input(cmd, b"are you there?\n")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no question was answered"), "{stderr}");

    let (_fake, url) = FakeModel::start().await;
    let config = write_config(dir.path(), &url, json!({}));
    let h = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || chat(&config, &h, "and now?\n"))
        .await
        .unwrap();
    assert!(!out.is_empty());
}
