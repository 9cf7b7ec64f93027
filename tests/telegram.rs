#![cfg(feature = "telegram")]
//! End to end over Telegram: the real `mnemo run` binary, with a fake Bot
//! API (`channels/tests/telegram/fake_api.rs`) and the fake model server
//! (`tests/support`) on 127.0.0.1 as the only fakes. Each test is a user's
//! story: a private conversation that is remembered and stored, a group
//! where only the mention is answered, a group opted in to every message,
//! a long reply, `/session` commands, flood control, and webhook mode.

use mnemo_testkit::html_check;
use mnemo_testkit::telegram as fake_api;
mod attachments;
mod documents;
mod groups;
#[cfg(feature = "slack")]
mod linking;
mod reminders;
mod streaming;
use crate::support;

use fake_api::{FakeBotApi, TOKEN, text_message, topic_message, user};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use support::{FakeModel, request_text};

const ADA: i64 = 42;
const GROUP: i64 = -1_001_234;
const WEBHOOK_SECRET: &str = "e2e_webhook-secret";

/// `mnemo run` in the background; killed if a test fails before stopping it.
struct Mnemo {
    child: Option<Child>,
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Mnemo {
    /// Starts `mnemo run` with the Telegram channel pointed at `api` and the
    /// model at `model_url`; `telegram` and `extra` are merged into the
    /// Telegram section and the top level of the config. Direct messages are
    /// open and [`GROUP`] is opted in, a mention required.
    fn start(api: &FakeBotApi, model_url: &str, telegram: Value, extra: Value) -> Mnemo {
        Mnemo::start_with_group_rule(api, model_url, telegram, extra, json!({}))
    }

    /// [`Mnemo::start`] with `rule` as [`GROUP`]'s entry under `groups` in
    /// `access.json` (as `support::open_access` writes it otherwise).
    fn start_with_group_rule(api: &FakeBotApi, model_url: &str, telegram: Value, extra: Value, rule: Value) -> Mnemo {
        Mnemo::launch(api, model_url, telegram, extra, rule, &[])
    }

    /// [`Mnemo::start_with_group_rule`] with `env` added to its environment.
    fn launch(
        api: &FakeBotApi,
        model_url: &str,
        telegram: Value,
        extra: Value,
        rule: Value,
        env: &[(&str, String)],
    ) -> Mnemo {
        let dir = tempfile::tempdir().unwrap();
        let mut section = json!({ "enabled": true, "apiUrl": api.url, "pollTimeoutSecs": 5 });
        merge(&mut section, telegram);
        let mut config = json!({
            "stateDir": dir.path().join("state"),
            "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                       "model": "fake-1", "timeoutSecs": 10, "maxRetries": 0 },
            "channels": { "console": { "enabled": false }, "telegram": section },
            "logging": { "level": "trace" },
        });
        merge(&mut config, extra);
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let access = Layout::new(dir.path().join("state"), "telegram").access_path();
        std::fs::create_dir_all(access.parent().unwrap()).unwrap();
        let rules = json!({ "dmPolicy": "open", "groups": { GROUP.to_string(): rule } });
        std::fs::write(access, serde_json::to_vec_pretty(&rules).unwrap()).unwrap();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let child = Mnemo::spawn(dir.path(), &env);
        Mnemo {
            child: Some(child),
            dir,
            env,
        }
    }

    /// A `mnemo` verb on the running bot's config and state folder: its
    /// stdout and stderr, and whether it succeeded.
    fn cli(&self, args: &[&str]) -> (bool, String) {
        let dir = self.dir.path();
        let out = support::mnemo(&dir.join("config.json"), dir)
            .args(args)
            .env("TELEGRAM_BOT_TOKEN", TOKEN)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// `mnemo run` on the config in `dir`, its stderr appended to `stderr.log`.
    fn spawn(dir: &Path, env: &[(String, String)]) -> Child {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("stderr.log"))
            .unwrap();
        support::mnemo(&dir.join("config.json"), dir)
            .arg("run")
            .env("TELEGRAM_BOT_TOKEN", TOKEN)
            .env("TELEGRAM_WEBHOOK_SECRET", WEBHOOK_SECRET)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap()
    }

    /// Stops the bot (SIGTERM, a clean exit) and starts it again on the
    /// same config and state folder.
    fn restart(&mut self) {
        let child = self.child.take().unwrap();
        support::sigterm(child.id());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "mnemo run exits 0 after SIGTERM");
        self.child = Some(Mnemo::spawn(self.dir.path(), &self.env));
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// SIGTERM, then checks a clean exit and that no log (traced at the
    /// finest level) holds the token, the webhook secret or message text.
    async fn stop(mut self, api: &FakeBotApi) {
        let child = self.child.take().unwrap();
        support::sigterm(child.id());
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap();
        assert!(out.status.success(), "mnemo run exits 0 after SIGTERM: {stderr}");
        for log in std::iter::once(stderr).chain(log_files(&self.state().join("logs"))) {
            assert!(
                !log.contains(TOKEN) && !log.contains("AAtest-SECRET"),
                "a log shows the bot token"
            );
            assert!(!log.contains(WEBHOOK_SECRET), "a log shows the webhook secret");
            for text in api.pushed_texts().iter().chain(&texts(&api.calls("sendMessage"))) {
                assert!(
                    text.len() < 12 || !log.contains(text.as_str()),
                    "a log shows message text: {text}"
                );
            }
        }
    }
}

impl Drop for Mnemo {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn merge(base: &mut Value, extra: Value) {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
}

fn log_files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .map(|b| String::from_utf8_lossy(&b).into())
        .collect()
}

fn stm_records(state: &Path, user: i64) -> Vec<Record> {
    support::stm_written(&Layout::new(state, "telegram").messages_path(&SafeName::of(&user.to_string())))
}

fn texts(calls: &[fake_api::Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_conversation_is_answered_remembered_and_stored_per_design() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    let turns = ["my name is Ada", "I like green tea", "what do you know about me?"];
    for (i, turn) in turns.iter().enumerate() {
        let mut message = text_message(ADA, user(ADA, "Ada"), turn);
        message["message_id"] = json!(10 + i);
        api.push_message(message);
        api.wait_for_calls("sendMessage", i + 1).await;
    }

    let replies = api.calls("sendMessage");
    assert_eq!(texts(&replies), turns.map(|t| format!("echo: {t}")));
    assert!(
        replies
            .iter()
            .all(|r| r.params["chat_id"] == ADA && r.params.get("reply_parameters").is_none())
    );
    assert!(
        api.calls("sendChatAction").iter().any(|c| c.params["chat_id"] == ADA),
        "typing was shown"
    );
    let chats = model.chat_requests();
    assert_eq!(chats.len(), 3);
    let third = request_text(&chats[2]);
    assert!(
        third.contains("my name is Ada") && third.contains("echo: I like green tea"),
        "{third}"
    );

    let log = mnemo.state().join("channels/telegram/sessions/stm/42/messages.jsonl");
    assert!(
        log.is_file(),
        "DESIGN §3: <state>/channels/<channel>/sessions/stm/<user>/messages.jsonl"
    );
    // A streamed answer is shown as it comes and stored once complete.
    let records = support::eventually("the third answer stored", async || {
        let records = stm_records(&mnemo.state(), ADA);
        (records.len() == 6).then_some(records)
    })
    .await;
    assert_eq!(
        records.iter().map(|r| r.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant].repeat(3)
    );
    assert_eq!(
        (records[0].text.as_str(), records[0].msg_id.as_str()),
        ("my name is Ada", "42:10")
    );
    assert!(
        records
            .iter()
            .all(|r| r.channel == "telegram" && r.chat_id.as_deref() == Some("42"))
    );
    assert_eq!(records[0].user_name.as_deref(), Some("Ada"));
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_only_the_mention_is_answered_in_its_topic_quoting_it() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(topic_message(GROUP, 7, user(ADA, "Ada"), "just chatting among us"));
    let mut mention = topic_message(GROUP, 7, user(ADA, "Ada"), "@mnemo_test_bot what is rust?");
    mention["message_id"] = json!(77);
    api.push_message(mention);
    let reply = &api.wait_for_calls("sendMessage", 1).await[0];

    assert_eq!(reply.params["text"], "echo: what is rust?");
    assert_eq!(reply.params["chat_id"], GROUP);
    assert_eq!(reply.params["message_thread_id"], 7);
    assert_eq!(reply.params["reply_parameters"]["message_id"], 77);
    assert_eq!(model.chat_requests().len(), 1);
    let stored: Vec<String> = stm_records(&mnemo.state(), ADA).into_iter().map(|r| r.text).collect();
    assert!(!stored.iter().any(|t| t.contains("just chatting")), "{stored:?}");
    assert_eq!(stored[0], "what is rust?");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_opted_in_without_require_mention_is_answered_without_a_mention() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let rule = json!({ "requireMention": false });
    let mnemo = Mnemo::start_with_group_rule(&api, &model_url, json!({}), json!({}), rule);

    let mut chatter = text_message(GROUP, user(ADA, "Ada"), "anyone know a good green tea?");
    chatter["message_id"] = json!(21);
    api.push_message(chatter);
    let reply = &api.wait_for_calls("sendMessage", 1).await[0];

    assert_eq!(reply.params["text"], "echo: anyone know a good green tea?");
    assert_eq!(reply.params["chat_id"], GROUP);
    assert_eq!(reply.params["reply_parameters"]["message_id"], 21);
    assert_eq!(model.chat_requests().len(), 1);
    let stored = stm_records(&mnemo.state(), ADA);
    assert_eq!(stored[0].text, "anyone know a good green tea?", "stored unchanged");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_character_reply_arrives_as_several_valid_html_messages() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(
        &api,
        &model_url,
        json!({}),
        json!({ "limits": { "maxMessageChars": 20000 } }),
    );
    let paragraph = "**Point**: memory <persists> & `code` survives _splitting_ intact.";
    let long = vec![paragraph; 160].join("\n\n");
    assert!(long.chars().count() > 10_000);

    api.push_message(text_message(ADA, user(ADA, "Ada"), &long));
    let sent = api.wait_until("the whole reply", || {
        let calls = api.calls("sendMessage");
        let shown: String = texts(&calls)
            .iter()
            .filter_map(|t| html_check::visible_text(t).ok())
            .collect();
        (shown.matches("intact.").count() == 160).then_some(calls)
    });
    let sent = sent.await;

    assert!(sent.len() >= 3, "{} messages", sent.len());
    for html in texts(&sent) {
        assert!(html.chars().count() <= 4096, "{} characters", html.chars().count());
        let shown = html_check::visible_text(&html).unwrap_or_else(|e| panic!("invalid HTML ({e}): {html}"));
        assert!(
            !shown.contains("**") && !shown.contains('`'),
            "markdown was formatted, not shown"
        );
        assert_eq!(sent[0].params["parse_mode"], "HTML");
    }
    let first = texts(&sent)[0].clone();
    assert!(
        first.starts_with("echo: <b>Point</b>: memory &lt;persists&gt; &amp; <code>code</code>"),
        "{first}"
    );
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_commands_answer_from_memory_and_export_uploads_a_document() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let say = |text: &str| api.push_message(text_message(ADA, user(ADA, "Ada"), text));

    say("remember the heron");
    api.wait_for_calls("sendMessage", 1).await;
    say("/session status");
    let status = api.wait_for_calls("sendMessage", 2).await[1].params["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(status.contains("2 messages in short-term memory"), "{status}");

    say("/session export");
    let upload = api.wait_for_calls("sendDocument", 1).await.remove(0);
    let (name, bytes) = upload.file.unwrap();
    assert!(name.ends_with(".tar.gz"), "{name}");
    assert_eq!(&bytes[..2], [0x1f, 0x8b], "a gzip archive");
    assert!(upload.params["caption"].as_str().unwrap().contains("archive"));
    assert_eq!(upload.params["chat_id"], ADA.to_string());

    say("/session clear");
    let cleared = api.wait_for_calls("sendMessage", 3).await[2].params["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cleared.contains("Cleared"), "{cleared}");
    assert!(stm_records(&mnemo.state(), ADA).is_empty());
    assert_eq!(model.chat_requests().len(), 1, "commands never ask the model");
    let commands = api.calls("setMyCommands");
    assert_eq!(
        commands[0].params["commands"][0]["command"], "session",
        "in the command menu"
    );
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_history_and_undo_edit_long_term_memory_without_the_model() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    let say = |text: &str| api.push_message(text_message(ADA, user(ADA, "Ada"), text));
    let profile = Layout::new(mnemo.state(), "telegram").profile_path(&SafeName::of(&ADA.to_string()));

    say("/session remember I keep bees");
    assert!(
        api.wait_for_calls("sendMessage", 1).await[0].params["text"]
            .as_str()
            .unwrap()
            .contains("<code>i-keep-bees</code>")
    );
    assert!(
        std::fs::read_to_string(&profile)
            .unwrap()
            .contains("- i-keep-bees: I keep bees")
    );
    say("/session history");
    assert!(
        api.wait_for_calls("sendMessage", 2).await[1].params["text"]
            .as_str()
            .unwrap()
            .contains("remembered <code>i-keep-bees</code> by your command")
    );
    say("/session undo");
    assert!(
        api.wait_for_calls("sendMessage", 3).await[2].params["text"]
            .as_str()
            .unwrap()
            .starts_with("Undid the last change to your profile")
    );
    assert!(!profile.exists(), "undo put back the state before: no profile");
    assert!(model.chat_requests().is_empty(), "commands never ask the model");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_command_addressed_to_the_bot_by_name_is_answered() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(GROUP, user(ADA, "Ada"), "/session@other_bot help"));
    api.push_message(text_message(GROUP, user(ADA, "Ada"), "/session@mnemo_test_bot help"));
    let reply = &api.wait_for_calls("sendMessage", 1).await[0];

    assert!(reply.params["text"].as_str().unwrap().contains("/session export"));
    assert_eq!(reply.params["chat_id"], GROUP);
    assert!(model.chat_requests().is_empty());
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_asked_for_in_a_group_goes_to_the_private_chat_or_nowhere() {
    const BOB: i64 = 43;
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));
    api.push_message(text_message(ADA, user(ADA, "Ada"), "remember the heron"));
    api.wait_for_calls("sendMessage", 1).await;

    api.push_message(text_message(GROUP, user(ADA, "Ada"), "/session@mnemo_test_bot status"));
    let sent = api.wait_for_calls("sendMessage", 3).await;
    assert_eq!(sent[1].params["chat_id"], ADA, "the status goes to Ada's private chat");
    assert!(
        sent[1].params["text"]
            .as_str()
            .unwrap()
            .contains("2 messages in short-term memory")
    );
    assert_eq!(sent[2].params["chat_id"], GROUP);
    assert_eq!(sent[2].params["text"], mnemo_channels::SENT_PRIVATELY);

    api.push_message(text_message(GROUP, user(ADA, "Ada"), "/session profile"));
    api.push_message(text_message(GROUP, user(ADA, "Ada"), "/session export"));
    let upload = api.wait_for_calls("sendDocument", 1).await.remove(0);
    assert_eq!(
        upload.params["chat_id"],
        ADA.to_string(),
        "the export goes to Ada alone"
    );
    api.wait_for_calls("sendMessage", 6).await;

    // Bob never started the bot: Telegram refuses the private message, so
    // the group is told to ask privately, and hears nothing of his memory.
    let refused = json!({ "ok": false, "error_code": 403,
        "description": "Forbidden: bot can't initiate conversation with a user" });
    api.fail_next("sendMessage", 403, &refused.to_string());
    api.push_message(text_message(GROUP, user(BOB, "Bob"), "/session status"));
    let sent = api.wait_for_calls("sendMessage", 8).await;
    assert_eq!((sent[6].params["chat_id"].clone(), sent[6].status), (json!(BOB), 403));
    assert_eq!(sent[7].params["chat_id"], GROUP);
    assert_eq!(sent[7].params["text"], mnemo_channels::ASK_PRIVATELY);
    for call in sent.iter().chain(&api.calls("sendDocument")) {
        let chat = &call.params["chat_id"];
        if chat == GROUP || chat.as_str().and_then(|c| c.parse::<i64>().ok()) == Some(GROUP) {
            let text = call.params["text"].as_str().unwrap_or_default();
            let notes = [mnemo_channels::SENT_PRIVATELY, mnemo_channels::ASK_PRIVATELY];
            assert!(notes.contains(&text), "posted in the group: {text}");
            assert!(call.file.is_none(), "a file was posted in the group");
        }
    }
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_that_cannot_be_decoded_is_skipped_and_everyone_else_is_answered() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    let broken = r#"{"message_id":5,"date":0,"chat":{"id":43,"type":"private","first_name":"B"},
        "from":{"id":43,"is_bot":false,"first_name":"\ud83d"},"text":"broken-secret-words"}"#;
    let bad = api.push_raw_message(broken);
    api.push_message(text_message(ADA, user(ADA, "Ada"), "still there?"));
    let reply = &api.wait_for_calls("sendMessage", 1).await[0];

    assert_eq!(reply.params["text"], "echo: still there?");
    api.wait_until("the broken update confirmed", || {
        (api.confirmed_offset() > bad).then_some(())
    })
    .await;
    assert_eq!(model.chat_requests().len(), 1);
    let logs = std::fs::read_to_string(mnemo.dir.path().join("stderr.log")).unwrap();
    let skipped = logs
        .lines()
        .find(|l| l.contains("could not be decoded"))
        .unwrap_or_default();
    assert!(skipped.contains(&bad.to_string()), "logged by id: {logs}");
    assert!(!logs.contains("broken-secret-words"), "the update's text was logged");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_and_help_are_answered_by_mnemo_not_the_model() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "/start"));
    api.push_message(text_message(ADA, user(ADA, "Ada"), "/help"));
    let replies = api.wait_for_calls("sendMessage", 2).await;

    for reply in &replies {
        assert!(
            reply.params["text"].as_str().unwrap().contains("/session export"),
            "{:?}",
            reply.params
        );
    }
    assert!(model.chat_requests().is_empty(), "the model was asked");
    assert!(stm_records(&mnemo.state(), ADA).is_empty(), "a command is not stored");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_telegram_refuses_to_take_is_followed_by_a_message_saying_so() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let refused = json!({ "ok": false, "error_code": 413, "description": "Request Entity Too Large" });
    api.fail_next("sendDocument", 413, &refused.to_string());
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session export"));
    let note = api.wait_for_calls("sendMessage", 1).await.remove(0);

    assert_eq!(api.calls("sendDocument")[0].status, 413);
    let text = note.params["text"].as_str().unwrap();
    assert!(
        text.contains("could not upload it here") && text.contains(".tar.gz"),
        "{text}"
    );
    assert_eq!(note.params["chat_id"], ADA);
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_control_on_send_message_is_waited_out() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    api.fail_next("sendMessage", 429, &fake_api::too_many_requests(2));
    let mnemo = Mnemo::start(&api, &model_url, json!({}), json!({}));

    api.push_message(text_message(ADA, user(ADA, "Ada"), "hello"));
    let calls = api.wait_for_calls("sendMessage", 2).await;

    assert_eq!(calls.iter().map(|c| c.status).collect::<Vec<_>>(), [429, 200]);
    assert!(
        calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(2),
        "retried before retry_after"
    );
    assert_eq!(texts(&calls), ["echo: hello", "echo: hello"]);
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_mode_takes_only_posts_with_the_secret_and_answers_them() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let listen = free_local_address();
    let telegram = json!({ "mode": "webhook", "webhookUrl": "https://bot.example/telegram", "webhookListen": listen });
    let mnemo = Mnemo::start(&api, &model_url, telegram, json!({}));
    let registered = api.wait_for_calls("setWebhook", 1).await;
    assert_eq!(registered[0].params["secret_token"], WEBHOOK_SECRET);

    let update = json!({ "update_id": 500, "message": {
        "message_id": 3, "date": 0, "chat": fake_api::chat(ADA), "from": user(ADA, "Ada"), "text": "via webhook" } });
    let post = |secret: &'static str| {
        reqwest::Client::new()
            .post(format!("http://{listen}/telegram"))
            .header("X-Telegram-Bot-Api-Secret-Token", secret)
            .json(&update)
            .send()
    };
    assert_eq!(post("not-the-secret").await.unwrap().status(), 401);
    assert_eq!(post(WEBHOOK_SECRET).await.unwrap().status(), 200);

    let reply = &api.wait_for_calls("sendMessage", 1).await[0];
    assert_eq!(reply.params["text"], "echo: via webhook");

    // An update that cannot be decoded is taken (200) and skipped, so
    // Telegram does not hold back the updates behind it.
    let broken = r#"{"update_id": 501, "message": {"message_id": 4, "date": 0,
        "chat": {"id": 42, "type": "private", "first_name": "\ud83d"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": "lost"}}"#;
    let response = reqwest::Client::new()
        .post(format!("http://{listen}/telegram"))
        .header("X-Telegram-Bot-Api-Secret-Token", WEBHOOK_SECRET)
        .header("content-type", "application/json")
        .body(broken)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(api.calls("getUpdates").is_empty(), "no polling in webhook mode");
    mnemo.stop(&api).await;
}

/// Telegram delivers again every update not answered 200, so the 200 must
/// wait until the message is stored: a broker that dies (or whose database
/// is gone) after answering would lose it. On Postgres: the answer to a
/// post comes after the message is committed, and with the database down
/// the post is refused (503) and the redelivery, once it is back, is
/// stored and answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_mode_acknowledges_a_post_only_once_its_message_is_stored() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let cluster = mnemo_testkit::pg::Cluster::start();
    let db = cluster.create_database();
    let store = mnemo_pg::PgStore::connect(&db.url(), 2, Duration::from_secs(2)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    // On Postgres the broker reads the channel's rules from the database.
    let open = mnemo::access::AccessFile {
        dm_policy: mnemo::access::DmPolicy::Open,
        ..Default::default()
    };
    mnemo::access::db::edit(&store, "telegram", |rules| *rules = open)
        .await
        .unwrap();
    drop(store);
    let listen = free_local_address();
    let telegram = json!({ "mode": "webhook", "webhookUrl": "https://bot.example/telegram", "webhookListen": listen });
    let extra = json!({ "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL", "poolWaitSecs": 2 } });
    let env = [("MNEMO_DATABASE_URL", db.url())];
    let mnemo = Mnemo::launch(&api, &model_url, telegram, extra, json!({}), &env);
    api.wait_for_calls("setWebhook", 1).await;
    let post = |id: i64, message: i64, text: &str| {
        let update = json!({ "update_id": id, "message": {
            "message_id": message, "date": 0, "chat": fake_api::chat(ADA), "from": user(ADA, "Ada"), "text": text } });
        reqwest::Client::new()
            .post(format!("http://{listen}/telegram"))
            .header("X-Telegram-Bot-Api-Secret-Token", WEBHOOK_SECRET)
            .json(&update)
            .send()
    };
    let stored = async || {
        let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let rows = client
            .query("SELECT text FROM mnemo_messages ORDER BY seq", &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
    };

    assert_eq!(post(700, 1, "first words").await.unwrap().status(), 200);
    assert!(
        stored().await.contains(&"first words".to_string()),
        "answered 200 before the message was stored"
    );
    api.wait_for_calls("sendMessage", 1).await;

    cluster.stop();
    let refused = post(701, 2, "while the database is away").await.unwrap();
    assert_eq!(
        refused.status(),
        503,
        "a message that could not be stored was acknowledged"
    );
    let asked_again = || {
        texts(&api.calls("sendMessage"))
            .iter()
            .any(|t| t.contains("couldn't save your message"))
    };
    assert!(!asked_again(), "Telegram delivers it again: the user need not");
    cluster.start_server();
    // Telegram delivers it again; now it is stored and answered.
    assert_eq!(post(701, 2, "while the database is away").await.unwrap().status(), 200);
    api.wait_until("the answer to the redelivered message", || {
        texts(&api.calls("sendMessage"))
            .contains(&"echo: while the database is away".to_string())
            .then_some(())
    })
    .await;
    assert!(!asked_again());
    let logs = std::fs::read_to_string(mnemo.dir.path().join("stderr.log")).unwrap();
    assert!(
        logs.contains("this access.json is not read on the Postgres store: the channel's rules are in the database"),
        "the start says the state folder's access.json is not used: {logs}"
    );
    // A repeat of an update already taken is acknowledged, not stored twice.
    assert_eq!(post(701, 2, "while the database is away").await.unwrap().status(), 200);
    // An answer is stored right after it is shown: wait for it, then the
    // repeat must not have added anything.
    let expected = [
        "first words",
        "echo: first words",
        "while the database is away",
        "echo: while the database is away",
    ];
    support::eventually("the answer stored", async || stored().await.len() >= expected.len()).await;
    assert_eq!(stored().await, expected);
    mnemo.stop(&api).await;
}

/// A loopback address with a port that was free a moment ago.
fn free_local_address() -> String {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().to_string()
}
