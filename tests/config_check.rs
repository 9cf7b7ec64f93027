#![cfg(all(feature = "telegram", feature = "slack", feature = "discord"))]
//! `mnemo config check` tells the truth: every config that `mnemo run`
//! refuses fails the check too, naming what to fix (one spec per case, each
//! also proving `run` refuses it), and `--online` really asks the model and
//! each platform — fakes on 127.0.0.1 standing in for them.

use crate::support;
use mnemo_testkit::discord as discord_fake;
use mnemo_testkit::slack as slack_fake;
use mnemo_testkit::telegram as telegram_fake;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::{FakeModel, mnemo};

/// A config with the model at `model_url`, the console off, and `channels`
/// and `extra` merged in.
fn config(dir: &Path, model_url: &str, channels: Value, extra: Value) -> PathBuf {
    let mut config = json!({
        "stateDir": dir.join("state"),
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                   "model": "fake-1", "timeoutSecs": 5, "maxRetries": 0 },
        "channels": { "console": { "enabled": false } },
    });
    if let (Some(c), Value::Object(more)) = (config["channels"].as_object_mut(), channels) {
        c.extend(more);
    }
    if let (Some(c), Value::Object(more)) = (config.as_object_mut(), extra) {
        c.extend(more);
    }
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

/// Runs `cmd` to its end (killed after 30 s: a `run` that does not refuse).
async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        for _ in 0..3000 {
            if child.try_wait().unwrap().is_some() {
                return child.wait_with_output().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!("did not end: {}", String::from_utf8_lossy(&out.stderr));
    })
    .await
    .unwrap()
}

fn both(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `mnemo <verb>` with `config`, `home` and `env` set.
fn verb_with_env(config: &Path, home: &Path, env: &[(&str, &str)], verb: &[&str]) -> Command {
    let mut c = mnemo(config, home);
    c.args(verb);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// `config check` fails naming `needle`, and `run` refuses the same config.
async fn refused_by_check_and_run(config: &Path, home: &Path, env: &[(&str, &str)], needle: &str) {
    let with_env = |verb: &[&str]| verb_with_env(config, home, env, verb);
    let check = output(with_env(&["config", "check"])).await;
    assert!(!check.status.success(), "check passed: {}", both(&check));
    assert!(
        both(&check).contains(needle),
        "check names `{needle}`: {}",
        both(&check)
    );
    assert!(!both(&check).contains("config OK"));
    let run = output(with_env(&["run"])).await;
    assert!(!run.status.success(), "run accepted what check refused: {}", both(&run));
}

/// [`refused_by_check_and_run`] for a config with `channels` and `extra`
/// merged in and nothing else planted.
async fn config_refused(channels: Value, extra: Value, env: &[(&str, &str)], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "http://127.0.0.1:9/v1", channels, extra);
    refused_by_check_and_run(&config, dir.path(), env, needle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_telegram_token_fails_the_check() {
    config_refused(
        json!({"telegram": {"enabled": true}}),
        json!({}),
        &[],
        "TELEGRAM_BOT_TOKEN",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_slack_app_token_fails_the_check() {
    let env = [("SLACK_BOT_TOKEN", "xoxb-1")];
    config_refused(json!({"slack": {"enabled": true}}), json!({}), &env, "SLACK_APP_TOKEN").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_discord_token_fails_the_check() {
    config_refused(
        json!({"discord": {"enabled": true}}),
        json!({}),
        &[],
        "DISCORD_BOT_TOKEN",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarizer_without_its_key_fails_the_check() {
    let summarizer = json!({"summarizer": {"provider": "anthropic", "model": "claude-haiku-4-5"}});
    config_refused(
        json!({"console": {"enabled": true}}),
        summarizer,
        &[],
        "ANTHROPIC_API_KEY",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_prompt_file_fails_the_check() {
    let prompt = json!({"systemPromptFile": "prompts/missing.md"});
    config_refused(json!({"console": {"enabled": true}}), prompt, &[], "missing.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sessions_config_of_a_platform_channel_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        json!({"telegram": {"enabled": true}}),
        json!({}),
    );
    let sessions = dir.path().join("state/channels/telegram/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("config.json"), r#"{"stm": {"maxMesages": 5}}"#).unwrap();
    refused_by_check_and_run(&config, dir.path(), &[("TELEGRAM_BOT_TOKEN", "1:abc")], "maxMesages").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ops_port_that_is_taken_fails_the_check() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let ops = json!({"ops": {"listen": port}});
    let telegram = json!({"telegram": {"enabled": true, "apiUrl": "http://127.0.0.1:9"}});
    config_refused(telegram, ops, &[("TELEGRAM_BOT_TOKEN", "1:abc")], "ops.listen").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_with_no_channel_enabled_fails_the_check() {
    config_refused(json!({}), json!({}), &[], "no channel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_reports_the_model_and_every_platform_as_ok_against_working_services() {
    let (model, url) = FakeModel::start().await;
    let telegram = telegram_fake::FakeBotApi::start().await;
    let slack = slack_fake::FakeSlack::start().await;
    let discord = discord_fake::FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let channels = json!({
        "telegram": {"enabled": true, "apiUrl": telegram.url},
        "slack": {"enabled": true, "apiUrl": slack.api_url},
        "discord": {"enabled": true, "apiUrl": discord.url()},
    });
    let config = config(dir.path(), &url, channels, json!({}));
    let mut cmd = mnemo(&config, dir.path());
    cmd.args(["config", "check", "--online"])
        .env("TELEGRAM_BOT_TOKEN", telegram_fake::TOKEN)
        .env("SLACK_BOT_TOKEN", slack_fake::BOT_TOKEN)
        .env("SLACK_APP_TOKEN", slack_fake::APP_TOKEN)
        .env("DISCORD_BOT_TOKEN", "discord-test-token");
    let out = output(cmd).await;
    let text = both(&out);
    assert!(out.status.success(), "{text}");
    for name in ["model", "channel telegram", "channel slack", "channel discord"] {
        assert!(text.contains(&format!("ok      {name}:")), "{name} ok: {text}");
    }
    assert_eq!(model.chat_requests().len(), 1, "one tiny request to the model");
    assert_eq!(telegram.calls("getMe").len(), 1);
    assert!(telegram.calls("sendMessage").is_empty(), "probes send nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_reports_a_failing_model_and_a_refused_token_with_why() {
    let (model, url) = FakeModel::start().await;
    model.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let telegram = telegram_fake::FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &url,
        json!({"telegram": {"enabled": true, "apiUrl": telegram.url}}),
        json!({}),
    );
    let mut cmd = mnemo(&config, dir.path());
    cmd.args(["config", "check", "--online"])
        .env("TELEGRAM_BOT_TOKEN", "999:wrong-token-for-the-fake");
    let out = output(cmd).await;
    let text = both(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("failing model:") && text.contains("503"), "{text}");
    assert!(text.contains("failing channel telegram:"), "{text}");
    assert!(
        !text.contains("wrong-token-for-the-fake"),
        "the token is never printed: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_base_url_in_the_environment_is_honoured_when_the_config_sets_none() {
    let (model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let config = json!({
        "stateDir": dir.path().join("state"),
        "model": { "provider": "openai", "apiKeyEnv": "MNEMO_TEST_KEY", "model": "fake-1", "maxRetries": 0 },
    });
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let mut cmd = mnemo(&path, dir.path());
    cmd.args(["config", "check", "--online"]).env("OPENAI_BASE_URL", &url);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", both(&out));
    assert!(both(&out).contains(&url), "the effective baseUrl is shown");
    assert_eq!(model.chat_requests().len(), 1);
}

/// The `error:` lines of a check's stderr.
fn error_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("error: "))
        .map(str::to_owned)
        .collect()
}

/// `config check` reports exactly one problem, and it is `expected` (the
/// one shape: file, field, line and column, reason); `run`, when it must
/// refuse, prints the same words.
async fn one_config_error(config: &Path, home: &Path, env: &[(&str, &str)], expected: &str, run_refuses: bool) {
    let with_env = |verb: &[&str]| verb_with_env(config, home, env, verb);
    let check = output(with_env(&["config", "check"])).await;
    assert!(!check.status.success(), "check passed: {}", both(&check));
    let errors = error_lines(&check);
    assert_eq!(errors.len(), 1, "one error: {}", both(&check));
    assert!(
        errors[0].starts_with(&format!("error: {expected}")),
        "{expected}\n{}",
        both(&check)
    );
    if run_refuses {
        let run = output(with_env(&["run"])).await;
        assert!(!run.status.success(), "run accepted what check refused: {}", both(&run));
        assert!(
            both(&run).contains(expected),
            "run says it the same way: {}",
            both(&run)
        );
    }
}

/// A config serving Telegram (nothing listens at its API) with `text`
/// planted as `name` in the channel's sessions folder; the config and the
/// planted file.
fn telegram_with(dir: &Path, name: &str, text: &str) -> (PathBuf, PathBuf) {
    let telegram = json!({"telegram": {"enabled": true, "apiUrl": "http://127.0.0.1:9"}});
    let config = config(dir, "http://127.0.0.1:9/v1", telegram, json!({}));
    let sessions = dir.join("state/channels/telegram/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join(name), text).unwrap();
    (config, sessions.join(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_in_the_app_config_names_file_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let text = "{\n  \"channels\": { \"console\": { \"enabled\": true } },\n  \"limits\": {\n    \"maxMessageChars\": \"lots\"\n  }\n}\n";
    std::fs::write(&path, text).unwrap();
    let expected = format!(
        "the app config {}, field `limits.maxMessageChars`, line 4, column 29: invalid type: string \"lots\"",
        path.display()
    );
    one_config_error(&path, dir.path(), &[], &expected, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_value_in_the_app_config_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        json!({"console": {"enabled": true}}),
        json!({"limits": {"userQueueDepth": 0}}),
    );
    let expected = format!(
        "the app config {}, field `limits.userQueueDepth`: must be at least 1; change it",
        config.display()
    );
    one_config_error(&config, dir.path(), &[], &expected, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_in_a_sessions_config_names_file_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (config, file) = telegram_with(dir.path(), "config.json", "{\n  \"recall\": { \"maxTokens\": -5 }\n}\n");
    let expected = format!(
        "the session config {}, field `recall.maxTokens`, line 2, column 29: invalid value: integer `-5`",
        file.display()
    );
    one_config_error(&config, dir.path(), &[("TELEGRAM_BOT_TOKEN", "1:abc")], &expected, true).await;
}

/// On the Postgres store the rules are the database's row: an
/// `access.json` left in the state folder is not read, so the check does
/// not report it (the database's URL is what it asks for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_stale_access_json_is_not_what_the_check_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = telegram_with(dir.path(), "access.json", "{\n  \"dmPolicy\": \"sometimes\"\n}\n");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    doc["store"] = json!({"kind": "postgres", "urlEnv": "MNEMO_TEST_DB_URL"});
    std::fs::write(&config, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let env = [("TELEGRAM_BOT_TOKEN", "1:abc"), ("MNEMO_TEST_KEY", "k")];
    let check = output(verb_with_env(&config, dir.path(), &env, &["config", "check"])).await;
    let said = both(&check);
    assert!(!check.status.success(), "{said}");
    assert!(said.contains("`MNEMO_TEST_DB_URL` (store.urlEnv) is not set"), "{said}");
    assert!(!said.contains("access list"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_policy_in_access_json_names_file_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (config, file) = telegram_with(dir.path(), "access.json", "{\n  \"dmPolicy\": \"sometimes\"\n}\n");
    let expected = format!(
        "the access list {}, field `dmPolicy`, line 2, column 25: unknown variant `sometimes`",
        file.display()
    );
    // `run` serves on the restrictive fallback instead of refusing to start.
    one_config_error(
        &config,
        dir.path(),
        &[("TELEGRAM_BOT_TOKEN", "1:abc")],
        &expected,
        false,
    )
    .await;
}
