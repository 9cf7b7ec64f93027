//! The command line's machine-readable side on the real binary: `--json`
//! on `sessions report`, `sessions maintain` and `access list`, shell
//! completions, the man pages (`mnemo man`), and `--version` naming the
//! git revision.

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

fn mnemo_bin(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "mnemo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The long flags `--help` lists for a verb, as the man page writes them
/// (roff escapes every `-`).
fn help_flags(verb: &[&str]) -> Vec<String> {
    let help = String::from_utf8(mnemo_bin(&[verb, &["--help"]].concat()).stdout).unwrap();
    let flags: Vec<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|f| f.trim_end_matches([',', '.', ')']).to_string())
        .filter(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(|f| format!("\\-\\-{}", f.replace('-', "\\-")))
        .collect();
    assert!(!flags.is_empty(), "{verb:?} --help lists no flag: {help}");
    flags
}

#[test]
fn man_prints_every_verb_with_the_flags_its_help_lists() {
    let out = mnemo_bin(&["man"]);
    let man = String::from_utf8(out.stdout).unwrap();
    for page in [
        "mnemo",
        "mnemo-run",
        "mnemo-chat",
        "mnemo-sessions-report",
        "mnemo-store-copy",
        "mnemo-man",
    ] {
        assert!(man.contains(&format!(".TH {page} 1 ")), "no page for {page}");
    }
    assert!(
        man.contains("mnemo sessions report"),
        "the synopsis names the whole verb"
    );
    for verb in [
        &["sessions", "report"][..],
        &["store", "copy"],
        &["bench"],
        &["access", "groups", "add"],
        &["man"],
    ] {
        for flag in help_flags(verb) {
            assert!(
                man.contains(&flag),
                "mnemo {verb:?}: {flag} is in --help but not in the man page"
            );
        }
    }
}

#[test]
fn man_out_writes_mnemo_1_and_one_page_per_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man/man1");
    let out = mnemo_bin(&["man", "--out", pages.to_str().unwrap()]);
    let listed = String::from_utf8(out.stdout).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        listed.lines().count(),
        files.len(),
        "each file written is named: {listed}"
    );
    for file in [
        "mnemo.1",
        "mnemo-run.1",
        "mnemo-backup.1",
        "mnemo-sessions-report.1",
        "mnemo-access-groups-add.1",
    ] {
        assert!(files.iter().any(|f| f == file), "{file} missing from {files:?}");
    }
    let printed = String::from_utf8(mnemo_bin(&["man"]).stdout).unwrap();
    assert_eq!(
        printed.matches(".TH ").count(),
        files.len(),
        "the files are the pages `mnemo man` prints"
    );
    let backup = std::fs::read_to_string(pages.join("mnemo-backup.1")).unwrap();
    assert!(
        backup.contains(".TH mnemo-backup 1 ") && backup.contains("\\-\\-out"),
        "{backup}"
    );
}

#[test]
fn man_and_completions_end_cleanly_when_the_reader_has_gone() {
    for args in [&["man"][..], &["completions", "bash"]] {
        // A pipe whose reader is closed before mnemo writes a byte, as
        // `mnemo man | head -1` leaves it once `head` is done.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "mnemo {args:?}: {stderr}"
        );
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

/// Issue 38 item 4: each command that reads or writes state says where
/// (stderr, so stdout and `--json` stay as they were; `--json` also carries
/// the folder), and a command about a user, group or pairing code that is
/// not there exits non-zero naming where it looked — not "allowed" into,
/// or "nothing to revoke" from, a folder the operator did not mean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_commands_name_the_folder_they_act_on_and_fail_on_what_is_not_there() {
    let (_fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    plant(&state);
    let verb = |args: &[&str]| {
        let mut c = mnemo(&config, dir.path());
        c.args(args);
        c
    };
    let text = |out: &Output| {
        (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let access_json = state.join("channels/telegram/sessions/access.json");
    let access_json = access_json.to_str().unwrap();
    let folder = state.to_str().unwrap();

    let out = run(verb(&["access", "allow", "telegram", "42"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("allowed: `42`"), "stdout unchanged: {stdout}");
    assert!(stderr.contains(access_json), "names the file it changed: {stderr}");

    for args in [
        &["access", "revoke", "telegram", "77"][..],
        &["access", "pair", "telegram", "ABCD2345"],
        &["access", "groups", "remove", "telegram", "-1001"],
    ] {
        let out = run(verb(args)).await;
        let (_, stderr) = text(&out);
        assert!(
            !out.status.success(),
            "{args:?} about nothing there succeeded: {stderr}"
        );
        assert!(stderr.contains(access_json), "{args:?} says where it looked: {stderr}");
    }
    // Revoking the one that is there still works.
    let out = run(verb(&["access", "revoke", "telegram", "42"])).await;
    assert!(out.status.success(), "{}", text(&out).1);

    let list = run(verb(&["access", "list", "telegram", "--json"])).await;
    assert_eq!(stdout_json(&list)["stateDir"], folder);

    let out = run(verb(&["sessions", "report"])).await;
    assert!(text(&out).1.contains(folder), "{}", text(&out).1);
    let maintained = stdout_json(&run(verb(&["sessions", "maintain", "--json"])).await);
    assert_eq!(maintained["stateDir"], folder);
    let out = run(verb(&["sessions", "reindex"])).await;
    assert!(
        out.status.success() && text(&out).1.contains(folder),
        "{}",
        text(&out).1
    );

    let out = run(verb(&[
        "sessions",
        "forget",
        "--channel",
        "console",
        "--user",
        "nobody",
        "--yes",
    ]))
    .await;
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(folder), "forget says where it looked: {stderr}");

    let bench_dir = dir.path().join("bench-state");
    let bench = [
        "bench",
        "--users",
        "1",
        "--turns",
        "1",
        "--state-dir",
        bench_dir.to_str().unwrap(),
    ];
    let out = run(verb(&bench)).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(bench_dir.to_str().unwrap()),
        "bench names its folder: {stderr}"
    );
}

/// The example config and the systemd unit name the same state folder, so
/// `sudo -u mnemo mnemo --config /etc/mnemo/config.json <verb>` acts on the
/// folder the service uses; the docs name it too.
#[test]
fn the_example_config_and_the_systemd_unit_agree_on_the_state_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("config.example.json")).unwrap()).unwrap();
    let unit = std::fs::read_to_string(root.join("deploy/mnemo.service")).unwrap();
    let unit_dir = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("Environment=MNEMO_STATE_DIR="))
        .expect("the unit sets MNEMO_STATE_DIR");
    assert_eq!(example["stateDir"].as_str(), Some(unit_dir));
    // StateDirectory=mnemo is /var/lib/mnemo: the folder systemd creates.
    assert!(
        unit.contains("StateDirectory=mnemo") && unit_dir == "/var/lib/mnemo",
        "{unit_dir}"
    );
    let docs = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    assert!(
        docs.contains(&format!("`config.example.json` sets `{unit_dir}`")),
        "docs/configuration.md names the example's stateDir"
    );
}
