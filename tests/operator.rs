//! End-to-end tests of the operator's verbs on the real binary:
//! `mnemo sessions report|export|maintain`, `mnemo config check`, and the
//! one-process-per-state-folder lock. Fakes only at the network edge.

use crate::support;

use chrono::{Duration as TimeDelta, SecondsFormat, Utc};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use support::{FakeModel, mnemo, write_config};

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Plants `n` exchanges for `user` in the console channel's STM, `ago` in
/// the past, in the documented JSONL form (the on-disk contract).
fn plant(state: &Path, user: &str, ago: TimeDelta, n: usize) -> PathBuf {
    let dir = state.join("channels/console/sessions/stm").join(user);
    std::fs::create_dir_all(&dir).unwrap();
    let at = (Utc::now() - ago).to_rfc3339_opts(SecondsFormat::Secs, true);
    let mut lines = String::new();
    for i in 0..n {
        lines += &json!({"ts": at, "role": "user", "text": format!("planted question {i}"), "msgId": format!("p{i}"), "channel": "console"}).to_string();
        lines += "\n";
        lines += &json!({"ts": at, "role": "assistant", "text": format!("planted answer {i}"), "msgId": format!("re-p{i}"), "channel": "console"}).to_string();
        lines += "\n";
    }
    let path = dir.join("messages.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

/// The console channel's operator config: summaries due at 00:00 UTC, so
/// a day planted 30 hours ago is always a completed, due day.
fn sessions_config(state: &Path) {
    let dir = state.join("channels/console/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"compacting": {"dailySummaryHour": 0}}"#).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintain_writes_the_missed_daily_summary_once_with_progress() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    sessions_config(&state);
    plant(&state, "ada", TimeDelta::hours(30), 3);

    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "maintain"]);
        c
    })
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("channel console:") && stdout.contains("due:"),
        "progress is shown: {stdout}"
    );
    let day = (Utc::now() - TimeDelta::hours(30)).format("%Y-%m-%d").to_string();
    let daily = state.join(format!("channels/console/sessions/summaries/ada/daily/{day}.md"));
    let body = std::fs::read_to_string(&daily).unwrap();
    assert!(body.contains("the user chatted"), "{body}");
    let summary_calls = fake.requests().len();
    assert!(summary_calls >= 1);

    // A second run has nothing left to do for that day: no model call.
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "maintain"]);
        c
    })
    .await;
    assert!(out.status.success());
    assert_eq!(fake.requests().len(), summary_calls, "the daily is written once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_and_export_show_one_users_data_and_nothing_of_anothers() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state, "ada", TimeDelta::minutes(5), 2);
    plant(&state, "bob", TimeDelta::minutes(5), 1);

    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "report"]);
        c
    })
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("channel console: 2 user(s)"), "{stdout}");
    let ada = stdout.lines().find(|l| l.trim_start().starts_with("ada")).unwrap();
    assert!(
        ada.split_whitespace().any(|w| w == "4"),
        "ada has 4 STM messages: {ada}"
    );

    let bundle = dir.path().join("ada.tar.gz");
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "export", "--channel", "console", "--user", "ada", "--out"])
            .arg(&bundle);
        c
    })
    .await;
    assert!(out.status.success(), "{}", text(&out).1);
    let listing = Command::new("tar").arg("-tzf").arg(&bundle).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("stm/ada/messages.jsonl"), "{listing}");
    assert!(!listing.contains("bob"), "another user's data in the export: {listing}");

    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args([
            "sessions",
            "export",
            "--channel",
            "console",
            "--user",
            "nobody",
            "--out",
        ])
        .arg(dir.path().join("x.tar.gz"));
        c
    })
    .await;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("nothing is stored about user `nobody`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_state_folder_is_refused() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let mut chat = mnemo(&config, dir.path())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    support::eventually("the model call", async || !fake.requests().is_empty()).await;
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "maintain"]);
        c
    })
    .await;
    assert!(!out.status.success());
    let stderr = text(&out).1;
    assert!(
        stderr.contains("another mnemo process") && stderr.contains(&chat.id().to_string()),
        "{stderr}"
    );
    drop(stdin);
    let status = tokio::task::spawn_blocking(move || chat.wait().unwrap()).await.unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_prints_the_effective_config_with_secrets_only_as_set_or_missing() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["config", "check"]);
        c
    })
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("MNEMO_TEST_KEY: set") && stdout.contains("config OK"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"maxConcurrentModelCalls\": 8"),
        "defaults are shown: {stdout}"
    );
    assert!(!stdout.contains("sk-test-not-a-secret") && !stderr.contains("sk-test-not-a-secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_says_a_channel_runs_restrictive_on_a_quarantined_access_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "http://127.0.0.1:9/v1", json!({}));
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    value["channels"] = json!({ "telegram": { "enabled": true, "tokenEnv": "MNEMO_TEST_TG" } });
    std::fs::write(&config, value.to_string()).unwrap();
    let sessions = dir.path().join("state/channels/telegram/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("access.json.corrupt-20261201T070000Z"), "{ broken").unwrap();

    let mut cmd = mnemo(&config, dir.path());
    cmd.env("MNEMO_TEST_TG", "1:token").args(["config", "check"]);
    let out = run(cmd).await;

    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("access.json is missing and its last version was corrupt") && stderr.contains("corrupt-2026"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_rebuilds_every_users_recall_index_with_progress() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state, "ada", TimeDelta::hours(30), 3);
    plant(&state, "bob", TimeDelta::hours(30), 2);
    // A damaged index (a crash mid-append) is replaced, not trusted.
    let ada_index = state.join("channels/console/sessions/recall/ada");
    std::fs::create_dir_all(&ada_index).unwrap();
    std::fs::write(ada_index.join("messages.tsv"), "{\"half").unwrap();

    let mut cmd = mnemo(&config, dir.path());
    cmd.args(["sessions", "reindex", "--channel", "console"]);
    let out = run(cmd).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("reindexed 10 messages of 2 user(s)"), "{stdout}");
    assert!(stderr.contains("console: user 1/2 done: 6 messages"), "{stderr}");
    assert!(stderr.contains("console: user 2/2 done: 4 messages"), "{stderr}");
    let ada = std::fs::read_to_string(ada_index.join("messages.tsv")).unwrap();
    assert_eq!(ada.lines().count(), 6);
    assert!(ada.contains("planted answer 2") && !ada.contains("half"));
    let bob = std::fs::read_to_string(state.join("channels/console/sessions/recall/bob/messages.tsv")).unwrap();
    assert!(
        !bob.contains("planted question 2"),
        "bob's index holds only bob's messages"
    );
}

/// Issue 38 item 4 on the Postgres store: the verbs name the database they
/// act on — its address, never its password — and a command about what is
/// not in it exits non-zero saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_verbs_name_the_database_without_its_password_and_fail_on_what_is_not_there() {
    const PASSWORD: &str = "s3cret-not-shown";
    let (_fake, url) = FakeModel::start().await;
    let db = mnemo_testkit::pg::database();
    // The test server trusts local connections: the password is carried, not checked.
    let db_url = db.url().replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    doc["store"] = json!({ "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" });
    std::fs::write(&config, doc.to_string()).unwrap();
    let verb = |args: &[&str]| {
        let mut c = mnemo(&config, dir.path());
        c.env("MNEMO_DATABASE_URL", &db_url).args(args);
        c
    };
    let shown = db.url().replacen("postgres@", "", 1);

    let out = run(verb(&["store", "migrate"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&shown) && stderr.contains("$MNEMO_DATABASE_URL"),
        "{stderr}"
    );
    let status = run(verb(&["store", "status", "--json"])).await;
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        doc["database"].as_str().map(|d| d.contains(&shown)),
        Some(true),
        "{doc}"
    );

    let out = run(verb(&["access", "revoke", "telegram", "77"])).await;
    let (_, revoke_err) = text(&out);
    assert!(!out.status.success(), "{revoke_err}");
    assert!(
        revoke_err.contains("looked in the database") && revoke_err.contains(&shown),
        "{revoke_err}"
    );

    let out = run(verb(&["sessions", "maintain", "--channel", "nowhere"])).await;
    let (_, maintain_err) = text(&out);
    assert!(!out.status.success(), "{maintain_err}");
    assert!(
        maintain_err.contains("channel `nowhere`") && maintain_err.contains(&shown),
        "{maintain_err}"
    );

    for said in [
        stdout,
        stderr,
        revoke_err,
        maintain_err,
        String::from_utf8_lossy(&status.stdout).into(),
    ] {
        assert!(!said.contains(PASSWORD), "the password shown: {said}");
    }
}
