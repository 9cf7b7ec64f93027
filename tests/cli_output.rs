//! The command line's machine-readable side on the real binary: `--json`
//! on `sessions report`, `sessions maintain` and `access list`, shell
//! completions, and `--version` naming the git revision.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use support::{FakeModel, mnemo, write_config};

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn stdout_json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn plant(state: &Path) {
    let dir = state.join("channels/console/sessions/stm/ada");
    std::fs::create_dir_all(&dir).unwrap();
    let line = json!({"ts": "2026-01-01T00:00:00Z", "role": "user", "text": "hi", "msgId": "1", "channel": "console"});
    std::fs::write(dir.join("messages.jsonl"), format!("{line}\n{line}\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_maintain_and_access_list_print_one_json_document_with_json() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    plant(&dir.path().join("state"));
    let verb = |args: &[&str]| {
        let mut c = mnemo(&config, dir.path());
        c.args(args);
        c
    };

    let report = stdout_json(&run(verb(&["sessions", "report", "--json"])).await);
    let console = &report["channels"][0];
    assert_eq!(console["channel"], "console");
    assert_eq!(console["users"][0]["user"], "ada");
    assert_eq!(console["users"][0]["stmMessages"], 2);

    let maintained = stdout_json(&run(verb(&["sessions", "maintain", "--json"])).await);
    assert_eq!(maintained["ok"], true);
    assert_eq!(maintained["channels"][0]["channel"], "console");
    assert!(
        maintained["channels"][0]["failures"]
            .as_array()
            .is_some_and(|f| f.is_empty())
    );

    let access = stdout_json(&run(verb(&["access", "list", "telegram", "--json"])).await);
    assert_eq!(access["channel"], "telegram");
    assert_eq!(access["rules"]["dmPolicy"], "pairing", "defaults when there is no file");
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish_and_name_every_verb() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        for verb in ["run", "chat", "backup", "restore", "forget", "maintain"] {
            assert!(script.contains(verb), "{shell} completion lacks {verb}");
        }
    }
}

#[test]
fn version_names_the_git_revision_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!("mnemo {} (git ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        Ok(head) if head.status.success() => {
            let rev = String::from_utf8_lossy(&head.stdout).trim().to_string();
            assert!(version.contains(&rev), "{version} names {rev}");
        }
        _ => assert!(version.contains("(git unknown"), "{version}"),
    }
}
