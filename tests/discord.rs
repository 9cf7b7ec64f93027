#![cfg(feature = "discord")]
//! End-to-end: the real `mnemo run` binary with Discord enabled, against a
//! fake Discord (REST and a real gateway session) and the fake model, both
//! on 127.0.0.1. Everything between them is the real broker and adapter.
//! Streamed answers (message edits) are specified in `discord/streaming.rs`.

use crate::support;
use mnemo_testkit::discord as fake;
mod attachments;
mod reminders;
mod streaming;

use fake::{APP_ID, FakeDiscord, dm_channel_of};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use support::{FakeModel, last_user_message, write_config};

const TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.fake.e2e-bot-token";
const TOKEN_ENV: &str = "MNEMO_TEST_DISCORD_TOKEN";
const ALICE: &str = "1100000000000000001";
const DM_CHANNEL: &str = "1200000000000000001";
const GUILD_CHANNEL: &str = "1200000000000000002";
const THREAD: &str = "1200000000000000003";

/// A recorded gateway payload, sent now: the broker folds messages older
/// than `stm.maxAgeMinutes` into the summary, as it should.
fn fixture(name: &str) -> Value {
    let path = format!("{}/channels/tests/discord/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut payload: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("fixture json");
    if payload.get("timestamp").is_some() {
        payload["timestamp"] = json!(chrono::Utc::now().to_rfc3339());
    }
    payload
}

/// A DM from Alice with its own id and text.
fn dm(id: &str, text: &str) -> Value {
    let mut m = fixture("dm.json");
    m["id"] = json!(id);
    m["content"] = json!(text);
    m
}

/// `/session <sub>` from Alice in a DM, as an interaction with its own id.
fn slash(id: &str, sub: &str) -> Value {
    let mut i = fixture("interaction_clear_all.json");
    i["id"] = json!(id);
    i["data"]["options"][0]["name"] = json!(sub);
    i
}

/// `/session <sub>` with one string option, as Discord sends it.
fn slash_with(id: &str, sub: &str, option: &str, value: &str) -> Value {
    let mut i = slash(id, sub);
    i["data"]["options"][0]["options"] = json!([{"name": option, "type": 3, "value": value}]);
    i
}

/// `config.json` with the model at `model_url` and only Discord enabled.
fn config(dir: &Path, model_url: &str, fake: &FakeDiscord) -> PathBuf {
    let path = write_config(dir, model_url, json!({}));
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    config["channels"] = json!({
        "console": { "enabled": false },
        "discord": { "enabled": true, "tokenEnv": TOKEN_ENV, "apiUrl": fake.url() }
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    support::open_access(&dir.join("state"), "discord", &[GUILD_CHANNEL, THREAD]);
    path
}

/// `mnemo run`, its stderr kept in `<dir>/stderr.log`.
#[allow(
    clippy::disallowed_methods,
    reason = "the child process gets the real PATH to find its tools"
)]
fn mnemo_run(config: &Path, dir: &Path, token: Option<&str>) -> Child {
    let stderr = std::fs::File::create(dir.join("stderr.log")).expect("stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    cmd.arg("--config")
        .arg(config)
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "operator")
        .env("MNEMO_TEST_KEY", "sk-test-not-a-secret");
    if let Some(token) = token {
        cmd.env(TOKEN_ENV, token);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("mnemo starts")
}

/// SIGTERM, then the exit must be clean; returns everything mnemo logged.
fn stop(mut child: Child, dir: &Path) -> String {
    support::sigterm(child.id());
    let status = child.wait().expect("mnemo exits");
    let stderr = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    assert!(status.success(), "exit 0 after SIGTERM; stderr:\n{stderr}");
    let mut logs = stderr;
    for entry in std::fs::read_dir(dir.join("state/logs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        logs.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    logs
}

fn stm(dir: &Path, user: &str) -> Vec<Record> {
    support::stm_written(&Layout::new(dir.join("state"), "discord").messages_path(&SafeName::of(user)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mnemo_run_answers_dms_and_mentions_on_discord_and_ignores_the_rest() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));

    let identify = discord.identify().await;
    assert_eq!(identify["token"], format!("Bot {TOKEN}"));
    let registered = discord.wait_for(1, |r| r.path.ends_with("/commands")).await;
    assert_eq!(registered[0].path, format!("/api/v10/applications/{APP_ID}/commands"));

    // A DM, answered in the DM, quoting it, with a typing indicator meanwhile.
    model.set_delay(std::time::Duration::from_millis(500));
    discord.dispatch("MESSAGE_CREATE", fixture("dm.json"));
    let replies = discord.channel_messages(DM_CHANNEL, 1).await;
    assert_eq!(replies[0].content(), "echo: what did I say yesterday?");
    assert_eq!(
        replies[0].json["message_reference"]["message_id"],
        "1300000000000000011"
    );
    let typing = format!("/api/v10/channels/{DM_CHANNEL}/typing");
    discord.wait_for(1, |r| r.path == typing).await;
    model.set_delay(std::time::Duration::ZERO);

    // In the server: chatter without a mention costs nothing; a mention is answered there.
    discord.dispatch("MESSAGE_CREATE", fixture("guild_without_mention.json"));
    discord.dispatch("MESSAGE_CREATE", fixture("guild_mention.json"));
    let replies = discord.channel_messages(GUILD_CHANNEL, 1).await;
    assert_eq!(replies[0].content(), "echo: can you summarise @Bob's point?");
    // In a thread: the answer lands in the thread.
    discord.dispatch("MESSAGE_CREATE", fixture("thread_mention.json"));
    assert_eq!(
        discord.channel_messages(THREAD, 1).await[0].content(),
        "echo: and in this thread?"
    );
    discord.dispatch("MESSAGE_CREATE", fixture("bot_author.json"));

    // A long answer with code arrives as several valid Discord messages.
    let code: String = (0..80).map(|i| format!("    let v{i} = step({i});\n")).collect();
    let long = format!(
        "{}\n\n```rust\n{code}```\n\n{}",
        "Some context. ".repeat(200),
        "More words. ".repeat(60)
    );
    assert!(long.chars().count() > 5000);
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000020", &long));
    let all = discord.channel_messages(DM_CHANNEL, 4).await;
    for m in &all[1..] {
        assert!(
            m.content().chars().count() <= 2000,
            "{} chars",
            m.content().chars().count()
        );
        assert!(
            m.content().matches("```").count().is_multiple_of(2),
            "a block left open:\n{}",
            m.content()
        );
    }

    let asked: Vec<String> = model.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(
        asked.len(),
        4,
        "DM, mention, thread, long DM — nothing else reached the model: {asked:?}"
    );
    assert!(
        !asked
            .iter()
            .any(|m| m.contains("just chatting") || m.contains("another bot"))
    );
    let said: Vec<String> = stm(dir.path(), ALICE)
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text)
        .collect();
    assert_eq!(
        &said[..3],
        [
            "what did I say yesterday?",
            "can you summarise @Bob's point?",
            "and in this thread?"
        ]
    );

    let logs = stop(child, dir.path());
    assert!(!logs.contains(TOKEN), "the token never reaches a log");
    assert!(!logs.contains("what did I say yesterday"), "message text is not logged");
}

/// Rewrites `access.json` so `chat` is opted in to every message, mention
/// or not (`"requireMention": false`); direct messages stay open.
fn opt_in_without_mention(dir: &Path, chat: &str) {
    let path = Layout::new(dir.join("state"), "discord").access_path();
    let rules = json!({ "dmPolicy": "open", "groups": { chat: { "requireMention": false } } });
    std::fs::write(path, serde_json::to_vec_pretty(&rules).expect("json")).expect("write access.json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_opted_in_without_mention_is_answered_without_one() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &model_url, &discord);
    opt_in_without_mention(dir.path(), GUILD_CHANNEL);
    let child = mnemo_run(&config, dir.path(), Some(TOKEN));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", fixture("guild_without_mention.json"));
    let replies = discord.channel_messages(GUILD_CHANNEL, 1).await;
    assert_eq!(replies[0].content(), "echo: just chatting with @Bob");
    assert_eq!(
        replies[0].json["message_reference"]["message_id"],
        "1300000000000000013"
    );
    let asked: Vec<String> = model.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(asked, ["just chatting with @Bob"]);
    // A streamed answer is shown as it comes and stored once complete.
    let said = support::eventually("the answer stored", async || {
        let said: Vec<String> = stm(dir.path(), ALICE).into_iter().map(|r| r.text).collect();
        (said.len() == 2).then_some(said)
    })
    .await;
    assert_eq!(said, ["just chatting with @Bob", "echo: just chatting with @Bob"]);

    let logs = stop(child, dir.path());
    assert!(!logs.contains("just chatting"), "message text is not logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_slash_commands_are_answered_privately_without_the_model() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));
    discord.identify().await;

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000040", "my cat is called Miso"));
    discord.channel_messages(DM_CHANNEL, 1).await;

    let token = "aW50ZXJhY3Rpb24tdG9rZW4tZm9yLXRlc3Rz";
    discord.dispatch("INTERACTION_CREATE", slash("1400000000000000041", "status"));
    let answers = discord.wait_for(1, |r| r.method == "PATCH").await;
    assert_eq!(
        answers[0].path,
        format!("/api/v10/webhooks/{APP_ID}/{token}/messages/@original")
    );
    assert!(
        answers[0].content().contains("2 messages in short-term memory"),
        "{}",
        answers[0].content()
    );
    let acks = discord.wait_for(1, |r| r.path.ends_with("/callback")).await;
    assert_eq!(acks[0].json["data"]["flags"], 64, "only the asker sees it");

    discord.dispatch("INTERACTION_CREATE", slash("1400000000000000042", "export"));
    let answers = discord.wait_for(2, |r| r.method == "PATCH").await;
    let (name, bytes) = answers[1].files.first().cloned().expect("the export is attached");
    assert!(
        name.ends_with(".tar.gz") && bytes.starts_with(&[0x1f, 0x8b]),
        "{name}: a gzip archive"
    );
    assert!(answers[1].content().contains("archive"), "{}", answers[1].content());

    // The plain-text form in a DM works too.
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000043", "/session help"));
    let replies = discord.channel_messages(DM_CHANNEL, 2).await;
    assert!(
        replies[1].content().contains("/session export"),
        "{}",
        replies[1].content()
    );

    assert_eq!(model.chat_requests().len(), 1, "only the first DM asked the model");

    // A reply Discord refuses (a missing permission stays missing: every
    // try of the streamed answer is refused) is logged with the reason.
    let refusal = json!({ "code": 50013, "message": "Missing Permissions" });
    discord.fail(&format!("/channels/{DM_CHANNEL}/messages"), 403, refusal, 100);
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000044", "are you there?"));
    discord.wait_for(1, |r| r.content() == "echo: are you there?").await;
    let logs = stop(child, dir.path());
    let failure = logs
        .lines()
        .find(|l| l.contains("reply not delivered"))
        .unwrap_or_default();
    assert!(
        failure.contains("403") && failure.contains("Missing Permissions"),
        "logged with the reason:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_history_and_undo_subcommands_edit_long_term_memory_without_the_model() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));
    discord.identify().await;
    let profile = mnemo_sessions::Layout::new(dir.path().join("state"), "discord")
        .profile_path(&mnemo_sessions::SafeName::of("1100000000000000001"));

    discord.dispatch(
        "INTERACTION_CREATE",
        slash_with("1400000000000000061", "remember", "text", "I keep bees"),
    );
    let answers = discord.wait_for(1, |r| r.method == "PATCH").await;
    assert!(
        answers[0].content().contains("`i-keep-bees`"),
        "{}",
        answers[0].content()
    );
    assert!(
        std::fs::read_to_string(&profile)
            .expect("profile")
            .contains("- i-keep-bees: I keep bees")
    );
    discord.dispatch("INTERACTION_CREATE", slash("1400000000000000062", "history"));
    let answers = discord.wait_for(2, |r| r.method == "PATCH").await;
    assert!(
        answers[1].content().contains("remembered `i-keep-bees`"),
        "{}",
        answers[1].content()
    );
    discord.dispatch("INTERACTION_CREATE", slash("1400000000000000063", "undo"));
    let answers = discord.wait_for(3, |r| r.method == "PATCH").await;
    assert!(answers[2].content().starts_with("Undid"), "{}", answers[2].content());
    assert!(!profile.exists());
    assert!(model.chat_requests().is_empty(), "commands never ask the model");
    stop(child, dir.path());
}

/// `text` from Alice in the server channel, mentioning the bot.
fn guild_mention(id: &str, text: &str) -> Value {
    let mut m = fixture("guild_mention.json");
    m["id"] = json!(id);
    m["content"] = json!(format!("<@{}> {text}", fake::BOT_ID));
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_asked_for_in_a_server_channel_goes_to_a_dm_never_to_the_channel() {
    let (_model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));
    discord.identify().await;
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000050", "my cat is called Miso"));
    discord.channel_messages(DM_CHANNEL, 1).await;
    let private = dm_channel_of(ALICE);

    discord.dispatch(
        "MESSAGE_CREATE",
        guild_mention("1300000000000000051", "/session status"),
    );
    let status = discord.channel_messages(&private, 1).await;
    assert!(
        status[0].content().contains("2 messages in short-term memory"),
        "{}",
        status[0].content()
    );
    let notes = discord.channel_messages(GUILD_CHANNEL, 1).await;
    assert_eq!(notes[0].content(), mnemo_channels::SENT_PRIVATELY);

    discord.dispatch(
        "MESSAGE_CREATE",
        guild_mention("1300000000000000052", "/session export"),
    );
    let sent = discord.channel_messages(&private, 2).await;
    assert!(!sent[1].files.is_empty(), "the export is attached in the DM");

    // Alice does not take DMs from server members: the channel is told to ask in one.
    discord.channel_messages(GUILD_CHANNEL, 2).await;
    let closed = json!({ "code": 50007, "message": "Cannot send messages to this user" });
    discord.fail("/users/@me/channels", 403, closed, 1);
    discord.dispatch(
        "MESSAGE_CREATE",
        guild_mention("1300000000000000053", "/session profile"),
    );
    let notes = discord.channel_messages(GUILD_CHANNEL, 3).await;
    assert_eq!(notes[2].content(), mnemo_channels::ASK_PRIVATELY);
    for note in &notes {
        assert!(note.files.is_empty(), "a file was posted in the channel");
        assert!(
            [mnemo_channels::SENT_PRIVATELY, mnemo_channels::ASK_PRIVATELY].contains(&note.content()),
            "posted in the channel: {}",
            note.content()
        );
    }
    stop(child, dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_event_that_cannot_be_decoded_is_skipped_and_its_text_never_logged() {
    let (_model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &model_url, &discord);
    let mut traced: Value = serde_json::from_slice(&std::fs::read(&config).expect("config")).expect("json");
    traced["logging"] = json!({ "level": "trace" });
    std::fs::write(&config, traced.to_string()).expect("write config");
    let child = mnemo_run(&config, dir.path(), Some(TOKEN));
    discord.identify().await;

    let mut broken = dm("1300000000000000060", "leaky secret words");
    broken["author"]["id"] = json!("not-a-snowflake");
    discord.dispatch("MESSAGE_CREATE", broken);
    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000061", "next one"));
    let replies = discord.channel_messages(DM_CHANNEL, 1).await;
    assert_eq!(replies[0].content(), "echo: next one");

    let logs = stop(child, dir.path());
    assert!(
        !logs.contains("leaky secret words"),
        "a library logged message text:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_discord_will_not_take_is_followed_by_a_message_saying_so() {
    let (_model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let child = mnemo_run(&config(dir.path(), &model_url, &discord), dir.path(), Some(TOKEN));
    discord.identify().await;
    let refusal = json!({ "code": 40005, "message": "Request entity too large" });
    discord.fail(&format!("/channels/{DM_CHANNEL}/messages"), 413, refusal, 1);

    discord.dispatch("MESSAGE_CREATE", dm("1300000000000000070", "/session export"));
    let sent = discord.channel_messages(DM_CHANNEL, 2).await;

    assert!(!sent[0].files.is_empty(), "the upload was tried");
    assert!(
        sent[1].content().contains("could not upload it here"),
        "{}",
        sent[1].content()
    );
    stop(child, dir.path());
}

#[test]
fn mnemo_run_without_the_discord_token_says_which_variable_to_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let discord = rt.block_on(FakeDiscord::start());
    let config = config(dir.path(), "http://127.0.0.1:9/v1", &discord);
    let status = mnemo_run(&config, dir.path(), None).wait().expect("mnemo exits");
    let stderr = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    assert!(!status.success());
    assert!(stderr.contains(TOKEN_ENV), "names the variable: {stderr}");
}
