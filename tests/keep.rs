//! The operator's data verbs on the real binary: `mnemo sessions forget`
//! (with and without a bot running on the folder), and `mnemo backup` /
//! `mnemo restore` round-tripping a folder that a chatting bot keeps
//! writing to. The fake model is the only fake.

use crate::support;

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use support::{FakeModel, mnemo, write_config};

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn both(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn sessions(state: &Path) -> PathBuf {
    state.join("channels/console/sessions")
}

/// Plants a short conversation, a profile and its fact log for `user` on
/// the console.
fn plant(state: &Path, user: &str) {
    let stm = sessions(state).join("stm").join(user);
    std::fs::create_dir_all(&stm).unwrap();
    let at = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let line = json!({"ts": at, "role": "user", "text": "planted", "msgId": "p1", "channel": "console"});
    std::fs::write(stm.join("messages.jsonl"), format!("{line}\n")).unwrap();
    let users = sessions(state).join("ltm/users");
    std::fs::create_dir_all(&users).unwrap();
    std::fs::write(
        users.join(format!("{user}.md")),
        "---\nupdated: 2026-01-01T00:00:00Z\n---\n- likes tea\n",
    )
    .unwrap();
    let facts = sessions(state).join("ltm/facts");
    std::fs::create_dir_all(&facts).unwrap();
    let entry = json!({"ts": at, "op": "set", "section": "notes", "key": "likes tea", "value": "", "by": "import"});
    std::fs::write(facts.join(format!("{user}.jsonl")), format!("{entry}\n")).unwrap();
}

/// Everything in `<state>/logs/`.
fn logs(state: &Path) -> String {
    let files = std::fs::read_dir(state.join("logs")).into_iter().flatten().flatten();
    files.fold(String::new(), |acc, e| {
        acc + &String::from_utf8_lossy(&std::fs::read(e.path()).unwrap_or_default())
    })
}

fn stored(state: &Path, user: &str) -> bool {
    ["stm/{user}", "ltm/users/{user}.md", "ltm/facts/{user}.jsonl"]
        .iter()
        .any(|p| sessions(state).join(p.replace("{user}", user)).exists())
}

/// `mnemo chat` with stdin and stdout piped; replies collected as they come.
struct Chat {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    replies: Arc<Mutex<Vec<String>>>,
}

impl Chat {
    fn start(config: &Path, home: &Path) -> Chat {
        let mut child = mnemo(config, home)
            .arg("chat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let replies = Arc::new(Mutex::new(Vec::new()));
        let sink = replies.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("echo: ") {
                    sink.lock().unwrap().push(line);
                }
            }
        });
        Chat { child, stdin, replies }
    }

    fn say(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
    }

    fn answered(&self) -> usize {
        self.replies.lock().unwrap().len()
    }

    /// Waits (bounded) until `n` replies arrived.
    async fn wait_for(&self, n: usize) {
        support::eventually(format_args!("{n} replies"), async || self.answered() >= n).await
    }

    async fn end(mut self) {
        drop(self.stdin.take());
        let status = tokio::task::spawn_blocking(move || self.child.wait().unwrap())
            .await
            .unwrap();
        assert!(status.success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_deletes_one_user_through_the_running_bot_and_leaves_the_others() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state, "bob");
    let mut chat = Chat::start(&config, dir.path());
    chat.say("hello from ada");
    chat.wait_for(1).await;

    let refused = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "forget", "--channel", "console", "--user", "bob"]);
        c
    })
    .await;
    assert!(
        !refused.status.success() && both(&refused).contains("--yes"),
        "{}",
        both(&refused)
    );
    assert!(stored(&state, "bob"), "nothing deleted without confirmation");

    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "forget", "--channel", "console", "--user", "bob", "--yes"]);
        c
    })
    .await;
    assert!(out.status.success(), "{}", both(&out));
    assert!(both(&out).contains("done by the running bot"), "{}", both(&out));
    assert!(!stored(&state, "bob"), "bob's data is gone");
    assert!(stored(&state, "ada"), "ada's is not");

    chat.say("still there?");
    chat.wait_for(2).await;
    chat.end().await;

    let logs = logs(&state);
    assert!(logs.contains("sessions forget"), "the deletion is logged: {logs}");
    assert!(
        !logs.contains("likes tea") && !logs.contains("planted"),
        "without the user's text"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_without_a_running_bot_works_under_the_instance_lock() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state, "bob");
    plant(&state, "carol");
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "forget", "--channel", "console", "--user", "bob", "--yes"]);
        c
    })
    .await;
    assert!(out.status.success(), "{}", both(&out));
    assert!(!stored(&state, "bob") && stored(&state, "carol"));
    let logs = logs(&state);
    assert!(
        logs.contains("sessions forget") && !logs.contains("likes tea"),
        "{logs}"
    );

    let again = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["sessions", "forget", "--channel", "console", "--user", "bob", "--yes"]);
        c
    })
    .await;
    assert!(!again.status.success() && both(&again).contains("nothing is stored about user `bob`"));
}

/// Every record in the state folder (STM logs and gzipped archives), as
/// parsed JSON; panics on a line that is not a whole record.
fn all_records(state: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![state.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                // The recall index is derived: a copy of the log and archive.
                if name != "recall" {
                    stack.push(path);
                }
                continue;
            }
            let text = if name.ends_with(".jsonl.gz") {
                let mut s = String::new();
                flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
                    .read_to_string(&mut s)
                    .unwrap();
                s
            } else if name == "messages.jsonl" {
                std::fs::read_to_string(&path).unwrap()
            } else {
                continue;
            };
            for line in text.lines() {
                out.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("torn line in {name}: {e}: {line}")));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_taken_while_the_bot_writes_restore_with_nothing_lost() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    std::fs::create_dir_all(sessions(&state)).unwrap();
    // Compaction every few turns, so archives and summaries change during backups.
    std::fs::write(
        sessions(&state).join("config.json"),
        r#"{"stm": {"maxMessages": 12, "contextWindow": 2}, "compacting": {"threshold": 6}}"#,
    )
    .unwrap();
    let mut chat = Chat::start(&config, dir.path());
    chat.say("message number 0");
    chat.wait_for(1).await; // the bot is up and holds the folder
    let mut backups = Vec::new();
    let total: usize = 120;
    for i in 1..total {
        // Up to 10 in flight: within the user's queue depth, so none is refused.
        chat.wait_for(i.saturating_sub(10)).await;
        chat.say(&format!("message number {i}"));
        if i % 30 == 29 {
            let answered = chat.answered();
            let out = dir.path().join(format!("backup-{i}.tar.gz"));
            let done = run({
                let mut c = mnemo(&config, dir.path());
                c.args(["backup", "--out"]).arg(&out);
                c
            })
            .await;
            assert!(done.status.success(), "{}", both(&done));
            assert!(both(&done).contains("by the running bot"), "{}", both(&done));
            assert_eq!(
                std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
                0o600,
                "a backup holds everyone's data: owner only"
            );
            backups.push((out, answered));
        }
    }
    chat.wait_for(total).await;
    chat.end().await;

    for (n, (backup, answered)) in backups.iter().enumerate() {
        let target = dir.path().join(format!("restored-{n}"));
        let out = run({
            let mut c = mnemo(&config, dir.path());
            c.arg("--state-dir").arg(&target).arg("restore").arg(backup);
            c
        })
        .await;
        assert!(out.status.success(), "{}", both(&out));
        let texts: std::collections::HashSet<String> = all_records(&target)
            .iter()
            .filter(|r| r["role"] == "user")
            .filter_map(|r| r["text"].as_str().map(String::from))
            .collect();
        for i in 0..*answered {
            assert!(
                texts.contains(&format!("message number {i}")),
                "backup {n}: message {i} was answered before the backup but is not in it"
            );
        }
        assert!(
            target.join("channels/console/sessions/config.json").is_file(),
            "operator config restored"
        );
    }
    // The live folder itself is intact too: every message is stored once.
    let live: Vec<String> = all_records(&state)
        .iter()
        .filter(|r| r["role"] == "user")
        .filter_map(|r| r["text"].as_str().map(String::from))
        .collect();
    assert_eq!(live.len(), total, "each message exactly once across log and archive");
    assert!(
        std::fs::read_dir(sessions(&state).join("archive/ada")).is_ok_and(|d| d.count() > 1),
        "compaction archived batches while the backups ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_non_empty_folder_without_force_and_a_file_that_is_not_a_backup() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state, "bob");
    std::fs::set_permissions(sessions(&state).join("stm/bob"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let backup = dir.path().join("b.tar.gz");
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["backup", "--out"]).arg(&backup);
        c
    })
    .await;
    assert!(out.status.success(), "{}", both(&out));

    plant(&state, "carol");
    let refused = run({
        let mut c = mnemo(&config, dir.path());
        c.arg("restore").arg(&backup);
        c
    })
    .await;
    assert!(
        !refused.status.success() && both(&refused).contains("--force"),
        "{}",
        both(&refused)
    );
    assert!(stored(&state, "carol"), "nothing touched");

    let forced = run({
        let mut c = mnemo(&config, dir.path());
        c.args(["restore", "--force"]).arg(&backup);
        c
    })
    .await;
    assert!(forced.status.success(), "{}", both(&forced));
    assert!(
        stored(&state, "bob") && !stored(&state, "carol"),
        "the folder is what was backed up"
    );

    let bogus = dir.path().join("bogus.tar.gz");
    std::fs::write(&bogus, b"not a tarball").unwrap();
    let out = run({
        let mut c = mnemo(&config, dir.path());
        c.arg("--state-dir")
            .arg(dir.path().join("fresh"))
            .arg("restore")
            .arg(&bogus);
        c
    })
    .await;
    assert!(!out.status.success());
    assert!(!dir.path().join("fresh/channels").exists());
}

/// `mnemo health` (the image's HEALTHCHECK): 0 while a bot on the state
/// folder answers on its control socket, non-zero naming the folder when
/// none does; it takes no lock, so the bot keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_a_bot_runs_on_the_folder_and_fails_when_none_does() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    let health = || {
        let mut c = mnemo(&config, dir.path());
        c.arg("health");
        c
    };
    let out = run(health()).await;
    assert!(!out.status.success(), "{}", both(&out));
    assert!(both(&out).contains(state.to_str().unwrap()), "{}", both(&out));

    let mut chat = Chat::start(&config, dir.path());
    chat.say("hello");
    chat.wait_for(1).await;
    let out = run(health()).await;
    assert!(out.status.success(), "{}", both(&out));
    chat.say("still there?");
    chat.wait_for(2).await;
    chat.end().await;

    let out = run(health()).await;
    assert!(!out.status.success(), "after the bot stopped: {}", both(&out));
}
