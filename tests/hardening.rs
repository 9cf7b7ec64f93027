//! End to end, the real `mnemo` binary against the fake model server: what
//! hostile input and bad luck must not break (issue 15). Each test is one
//! rule of the "Hardening" section of docs/operations.md: links inside the state folder are
//! refused, never followed; everything mnemo creates is private to its user.

use crate::support;

use serde_json::json;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::{FakeModel, request_text, write_config};

/// The console user `support::mnemo` runs as.
const USER: &str = "ada";

/// `mnemo chat` (through `sh`, so the test can set the umask) with `input`
/// on a pipe; returns (stdout, stderr + log files).
fn chat_with_umask(config: &Path, home: &Path, umask: &str, input: &str) -> (String, String) {
    let base = support::mnemo(config, home);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
        .arg(base.get_program())
        .args(base.get_args())
        .arg("chat")
        .env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = support::with_input(cmd, input.as_bytes());
    let mut logs = String::from_utf8_lossy(&out.stderr).into_owned();
    for file in walk(&home.join("state/logs")) {
        logs.push_str(&String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()));
    }
    assert!(out.status.success(), "mnemo chat failed: {logs}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), logs)
}

/// `mnemo chat` with the usual umask, off the async workers.
async fn chat(config: &Path, home: &Path, input: &str) -> (String, String) {
    let (config, home, input) = (config.to_path_buf(), home.to_path_buf(), input.to_string());
    tokio::task::spawn_blocking(move || chat_with_umask(&config, &home, "022", &input))
        .await
        .unwrap()
}

/// Rewrites the config at `path` with `change` applied.
fn edit_config(path: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    change(&mut value);
    std::fs::write(path, value.to_string()).unwrap();
}

/// Every path under `dir` (folders included), not following links.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.push(path.clone());
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
    }
    out
}

fn sessions(home: &Path) -> PathBuf {
    home.join("state/channels/console/sessions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_a_users_log_folder_is_refused_and_nothing_outside_is_written_or_deleted() {
    let (model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("messages.jsonl");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::create_dir_all(sessions(dir.path()).join("stm")).unwrap();
    let link = sessions(dir.path()).join("stm").join(USER);
    symlink(outside.path(), &link).unwrap();
    let config = write_config(dir.path(), &url, json!({}));

    let (out, logs) = chat(
        &config,
        dir.path(),
        "hello\n/session clear\n/session clear all confirm\n",
    )
    .await;

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "written or deleted through the link"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert!(out.contains("couldn't save your message"), "{out}");
    assert!(model.chat_requests().is_empty(), "an unsaved message is not answered");
    assert!(
        logs.contains("symbolic link") && logs.contains(&link.display().to_string()),
        "the refusal is logged naming the path:\n{logs}"
    );
    assert!(
        std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(),
        "the link itself is left for the operator"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_profile_is_never_shown_prompted_or_exported_and_a_linked_topic_folder_is_not_emptied() {
    let (model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.md");
    std::fs::write(&secret, "---\nuser_id: ada\n---\n\n- OUTSIDE-SECRET\n").unwrap();
    let note = outside.path().join("plans.md");
    std::fs::write(&note, "---\ntitle: plans\n---\n\nkeep me\n").unwrap();
    let ltm = sessions(dir.path()).join("ltm");
    std::fs::create_dir_all(ltm.join("users")).unwrap();
    std::fs::create_dir_all(ltm.join("topics")).unwrap();
    symlink(&secret, ltm.join("users").join(format!("{USER}.md"))).unwrap();
    symlink(outside.path(), ltm.join("topics").join(USER)).unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (out, logs) = chat(
        &config,
        dir.path(),
        "/session profile\nwhat do you know about me?\n/session forget plans\n/session export\n",
    )
    .await;

    assert!(!out.contains("OUTSIDE-SECRET"), "printed: {out}");
    let prompts: Vec<String> = model.chat_requests().iter().map(request_text).collect();
    assert_eq!(prompts.len(), 1);
    assert!(!prompts[0].contains("OUTSIDE-SECRET"), "prompted: {}", prompts[0]);
    assert!(note.exists(), "forget deleted through a linked topic folder");
    for bundle in walk(&sessions(dir.path()).join("exports")) {
        let bytes = std::fs::read(&bundle).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text).ok();
        assert!(!text.contains("OUTSIDE-SECRET"), "exported");
    }
    assert!(logs.contains("symbolic link"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_mnemo_creates_under_the_state_folder_is_private_whatever_the_umask() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (c, h) = (config.clone(), dir.path().to_path_buf());

    tokio::task::spawn_blocking(move || chat_with_umask(&c, &h, "000", "hello\n/session export\nbye\n"))
        .await
        .unwrap();

    let state = dir.path().join("state");
    let created = walk(&state);
    assert!(created.iter().any(|p| p.ends_with("messages.jsonl")), "{created:?}");
    assert!(
        created.iter().any(|p| p.starts_with(state.join("logs")) && p.is_file()),
        "{created:?}"
    );
    for path in std::iter::once(state.clone()).chain(created) {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} is {mode:o}", path.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_longer_than_max_reply_chars_is_cut_visibly_stored_cut_and_sent_cut() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    edit_config(&config, |c| {
        c["limits"] = json!({ "maxReplyChars": 1000, "maxMessageChars": 8000 })
    });
    let long = "tell me more ".repeat(500);
    let (out, _) = chat(&config, dir.path(), &format!("{long}\n")).await;

    let marker = "[answer cut here: it was longer than 1000 characters]";
    let shown = out.trim_end();
    assert!(shown.ends_with(marker), "{shown}");
    assert!(
        shown.chars().count() <= 1000,
        "{} characters sent",
        shown.chars().count()
    );
    let log = std::fs::read_to_string(sessions(dir.path()).join("stm").join(USER).join("messages.jsonl")).unwrap();
    let stored: serde_json::Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    let text = stored["text"].as_str().unwrap();
    assert!(
        text.ends_with(marker) && text.chars().count() <= 1000,
        "stored whole: {} chars",
        text.chars().count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_line_that_is_not_utf8_is_answered_and_the_lines_after_it_still_run() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let mut cmd = support::mnemo(&config, dir.path());
    cmd.arg("chat");
    let out = tokio::task::spawn_blocking(move || support::with_input(cmd, b"first\ncaf\xe9 \xff\xfe\nafter\n"))
        .await
        .unwrap();

    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["echo: first", "echo: caf\u{fffd} \u{fffd}\u{fffd}", "echo: after"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_all_says_what_would_go_and_deletes_only_when_confirmed() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let log = sessions(dir.path()).join("stm").join(USER).join("messages.jsonl");

    let (out, _) = chat(&config, dir.path(), "remember the heron\n/session clear all\n").await;
    assert!(
        out.contains("This would delete") && out.contains("/session clear all confirm"),
        "{out}"
    );
    assert!(log.exists(), "asking deleted something");

    let (out, _) = chat(&config, dir.path(), "/session clear all confirm\n").await;
    assert!(out.contains("Deleted everything"), "{out}");
    assert!(!log.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_install_logs_no_warning() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (_, logs) = chat(
        &config,
        dir.path(),
        "/session status\nhello\n/session profile\n/session forget tea\n/session export\n",
    )
    .await;

    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_on_a_stderr_that_is_not_a_terminal_are_plain_and_one_line_per_event() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let mut cmd = support::mnemo(&config, dir.path());
    cmd.arg("chat").env("RUST_LOG", "info");
    let out = tokio::task::spawn_blocking(move || support::with_input(cmd, b"hello\n"))
        .await
        .unwrap();

    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("maintenance run"),
        "the multi-line report was logged: {stderr}"
    );
    assert!(!stderr.contains('\x1b'), "colour codes on a pipe: {stderr:?}");
    for line in stderr.lines() {
        assert!(
            line.starts_with("20"),
            "a line that is not an event of its own: {line:?}"
        );
    }
}

#[test]
fn an_error_prints_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere/config.json");
    let out = support::mnemo(&missing, dir.path()).arg("chat").output().unwrap();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("nowhere/config.json"), "{stderr}");
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
}

#[test]
fn mnemo_run_names_every_missing_platform_token_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "http://127.0.0.1:9/v1", json!({}));
    edit_config(&config, |c| {
        c["channels"] = json!({
            "console": { "enabled": false },
            "telegram": { "enabled": true, "tokenEnv": "MISSING_TG" },
            "slack": { "enabled": true, "botTokenEnv": "MISSING_SLACK_BOT", "appTokenEnv": "MISSING_SLACK_APP" },
            "discord": { "enabled": true, "tokenEnv": "MISSING_DISCORD" }
        })
    });

    let out = support::mnemo(&config, dir.path()).arg("run").output().unwrap();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for var in [
        "MISSING_TG",
        "MISSING_SLACK_BOT",
        "MISSING_SLACK_APP",
        "MISSING_DISCORD",
    ] {
        assert!(stderr.contains(var), "{var} not named: {stderr}");
    }
}

/// `mnemo chat` on a terminal (through `script`), as a person at a keyboard
/// has it: types `hello`, then `after_thinking` once "thinking…" shows
/// (nothing if empty), closes the keyboard once `until` is on screen, and
/// returns everything shown.
async fn on_a_terminal(config: &Path, home: &Path, after_thinking: &[u8], until: &'static str) -> String {
    verb_on_a_terminal("chat", config, home, after_thinking, until).await
}

/// [`on_a_terminal`] for any verb that serves the console (`chat`, `run`).
async fn verb_on_a_terminal(
    verb: &str,
    config: &Path,
    home: &Path,
    after_thinking: &[u8],
    until: &'static str,
) -> String {
    use std::io::Read;
    let base = support::mnemo(config, home);
    let command = format!(
        "{} --config {} {verb}",
        base.get_program().to_string_lossy(),
        config.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qfec", &command, "/dev/null"]).env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let after_thinking = after_thinking.to_vec();
    let screen = tokio::task::spawn_blocking(move || {
        stdin.write_all(b"hello\n").unwrap();
        let (mut seen, mut buf, mut interrupted) = (Vec::new(), [0u8; 4096], after_thinking.is_empty());
        loop {
            let shown = String::from_utf8_lossy(&seen).into_owned();
            if !interrupted && shown.contains("thinking…") {
                stdin.write_all(&after_thinking).unwrap();
                interrupted = true;
            }
            if shown.contains(until) {
                break;
            }
            let n = stdout.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        drop(stdin);
        let _ = stdout.read_to_end(&mut seen);
        let _ = child.wait();
        String::from_utf8_lossy(&seen).into_owned()
    });
    tokio::time::timeout(std::time::Duration::from_secs(60), screen)
        .await
        .expect("the chat ended")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_chat_greets_with_a_banner_and_shows_it_is_thinking() {
    let (model, url) = FakeModel::start().await;
    model.set_delay(std::time::Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));

    let screen = on_a_terminal(&config, dir.path(), b"", "echo: hello").await;

    assert!(screen.contains("chatting with fake-1"), "{screen}");
    assert!(
        screen.contains(&dir.path().join("state").display().to_string()),
        "{screen}"
    );
    assert!(screen.contains("/session help"), "{screen}");
    assert!(
        screen.contains("thinking…\r\x1b[Kecho: hello"),
        "indicator, erased by the answer: {screen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_run_the_console_on_a_terminal_gets_no_log_lines_and_the_files_get_them_all() {
    let (_model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));

    let screen = verb_on_a_terminal("run", &config, dir.path(), b"", "echo: hello").await;

    let logs = dir.path().join("state").join("logs");
    assert!(screen.contains("echo: hello"), "{screen}");
    assert!(
        screen.contains(&format!("logs: {}", logs.display())),
        "the banner says where the logs went: {screen}"
    );
    for log_line in ["mnemo started", "mnemo::turn", "INFO", "WARN"] {
        assert!(
            !screen.contains(log_line),
            "{log_line:?} reached the terminal: {screen:?}"
        );
    }
    let files: String = std::fs::read_dir(&logs)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .collect();
    assert!(files.contains("mnemo started"), "{files}");
    assert!(
        files.contains("mnemo::turn"),
        "the turn's log line is in the files: {files}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_an_answer_finishes_it_and_exits_without_a_fresh_prompt() {
    let (model, url) = FakeModel::start().await;
    model.set_delay(std::time::Duration::from_millis(500));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));

    let screen = on_a_terminal(&config, dir.path(), b"\x03", "\u{0}never").await;

    let after = screen.rsplit("echo: hello").next().unwrap_or_default();
    assert!(
        screen.contains("echo: hello"),
        "the answer in flight was given: {screen:?}"
    );
    assert!(!after.contains('>'), "a fresh prompt after Ctrl-C: {after:?}");
}

/// Issue 38 item 6: a warning about a user's turn names the user as the
/// turn line does, by the hash of channel and id, never by the raw id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_is_logged_with_the_users_hash_not_their_id() {
    // Nothing answers there: the call fails at once (maxRetries is 0).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    const ID: &str = "ada-raw-id-4242";
    let mut cmd = support::mnemo(&config, dir.path());
    cmd.arg("chat").env("USER", ID);
    let out = tokio::task::spawn_blocking(move || support::with_input(cmd, b"hello\n"))
        .await
        .unwrap();
    let mut logs = String::from_utf8_lossy(&out.stderr).into_owned();
    for file in walk(&dir.path().join("state/logs")) {
        logs.push_str(&String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()));
    }
    let hash = mnemo::ops::turn_log::user_hash(ID);
    let failed: Vec<&str> = logs.lines().filter(|l| l.contains("model call failed")).collect();
    assert!(!failed.is_empty(), "the failure is logged: {logs}");
    for line in failed {
        assert!(line.contains(&hash), "named by its hash: {line}");
        assert!(!line.contains(ID), "the raw id in a warning: {line}");
    }
}

/// Every log line that names a user names them by their log id
/// (`SafeName::log_id`, `turn_log::user_hash`), never the raw or encoded
/// id: a `user = …` field in the sources of every crate passes one of
/// them. The log may be read by people who must not see who said what.
#[test]
fn every_log_field_naming_a_user_is_their_log_id() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for dir in ["src", "sessions/src", "pg/src", "channels/src"] {
        for file in walk(&root.join(dir))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                // `user = …` or `user_id = …` as a field of its own (a
                // `bot_user` is the bot).
                let field = ["user = %", "user = ?", "user_id = %", "user_id = ?"].iter().any(|f| {
                    line.match_indices(f)
                        .any(|(at, _)| !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
                });
                let hashed = ["log_id()", "user_hash(", "logged(", "user = %self.user,"]
                    .iter()
                    .any(|h| line.contains(h));
                if field && !hashed {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "user ids in log fields:\n{}",
        offenders.join("\n")
    );
}
