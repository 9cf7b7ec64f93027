//! End-to-end specs of `mnemo bench` on the real binary: the real `App`
//! with the instant in-process model, small numbers, the JSON line parsed,
//! and the state folder checked to show the turns took the product's path.

use flate2::read::GzDecoder;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output};

fn bench(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .arg("bench")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .env_remove("MNEMO_CONFIG")
        .output()
        .unwrap()
}

fn last_json_line(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

fn archived_records(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let mut text = String::new();
        GzDecoder::new(std::fs::File::open(entry.unwrap().path()).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        n += text.lines().count();
    }
    n
}

#[test]
fn bench_prints_a_table_and_a_last_json_line_with_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["--users", "3", "--turns", "4", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("turns/s") && stdout.contains("per turn p99"),
        "{stdout}"
    );
    assert!(
        stderr.contains("running 3 users × 4 turns"),
        "progress goes to stderr: {stderr}"
    );

    let report = last_json_line(&out);
    assert_eq!(report["users"], 3);
    assert_eq!(report["turns"], 4);
    assert_eq!(report["total_turns"], 12);
    assert_eq!(report["fsync"], false);
    assert_eq!(report["recall"], true);
    assert_eq!(report["history"], 0);
    let (p50, p99, max) = (
        report["p50_us"].as_u64().unwrap(),
        report["p99_us"].as_u64().unwrap(),
        report["max_us"].as_u64().unwrap(),
    );
    assert!(p50 <= p99 && p99 <= max, "{report}");
    // Each user's first turn and the rest, apart: both within the whole.
    for part in ["first", "later"] {
        let (p50, p99) = (
            report[format!("{part}_p50_us")].as_u64().unwrap(),
            report[format!("{part}_p99_us")].as_u64().unwrap(),
        );
        assert!(0 < p50 && p50 <= p99 && p99 <= max, "{part}: {report}");
    }
    assert!(
        stdout.contains("first turns") && stdout.contains("later turns"),
        "{stdout}"
    );
    assert!(report["turns_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["peak_rss_mb"].as_f64().unwrap() > 1.0);

    // Recall is on, as in service: the users' messages were indexed.
    assert!(dir.path().join("channels/bench/sessions/recall/bench-user-0").exists());

    // Each user's turns went through the real pipeline: message and reply
    // both in the user's short-term log.
    let stm = dir.path().join("channels/bench/sessions/stm");
    for u in 0..3 {
        assert_eq!(
            lines(&stm.join(format!("bench-user-{u}/messages.jsonl"))),
            8,
            "user {u}"
        );
    }
}

#[test]
fn bench_without_recall_turns_it_off_for_the_bench_channel_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["--users", "2", "--turns", "3", "--no-recall", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("recall off"));
    let report = last_json_line(&out);
    assert_eq!(report["recall"], false);
    assert_eq!(report["total_turns"], 6);
    let sessions = dir.path().join("channels/bench/sessions");
    let config = std::fs::read_to_string(sessions.join("config.json")).unwrap();
    let config: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["recall"]["enabled"], false);
    assert_eq!(lines(&sessions.join("stm/bench-user-1/messages.jsonl")), 6);
}

#[test]
fn bench_history_is_archived_and_summarized_with_the_stm_at_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &["--users", "2", "--turns", "2", "--history", "120", "--fsync", "--json"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = last_json_line(&out);
    assert_eq!(report["history"], 120);
    assert_eq!(report["fsync"], true);
    assert_eq!(report["total_turns"], 4);

    let sessions = dir.path().join("channels/bench/sessions");
    let user = "bench-user-1";
    // contextWindow (10) seeded messages stay in the log, plus 2 turns.
    assert_eq!(lines(&sessions.join(format!("stm/{user}/messages.jsonl"))), 14);
    assert_eq!(archived_records(&sessions.join(format!("archive/{user}"))), 110);
    let summary = std::fs::read_to_string(sessions.join(format!("stm/{user}/summary.md"))).unwrap();
    assert!(summary.contains("110 earlier messages"), "{summary}");
}

#[test]
fn bench_refuses_a_state_folder_that_already_has_a_bench_channel() {
    let dir = tempfile::tempdir().unwrap();
    assert!(bench(dir.path(), &["--users", "1", "--turns", "1"]).status.success());
    let before = std::fs::read(
        dir.path()
            .join("channels/bench/sessions/stm/bench-user-0/messages.jsonl"),
    )
    .unwrap();
    let again = bench(dir.path(), &["--users", "1", "--turns", "1"]);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already exists") && stderr.contains("--state-dir"),
        "{stderr}"
    );
    let after = std::fs::read(
        dir.path()
            .join("channels/bench/sessions/stm/bench-user-0/messages.jsonl"),
    )
    .unwrap();
    assert_eq!(before, after, "nothing of the earlier run was touched");
}

#[test]
fn bench_concurrency_caps_the_turns_in_flight_and_refuses_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(
        dir.path(),
        &["--users", "6", "--turns", "3", "--concurrency", "2", "--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("at most 2 in flight"), "{stderr}");
    let report = last_json_line(&out);
    assert_eq!(report["concurrency"], 2);
    assert_eq!(report["total_turns"], 18);
    let max = report["max_in_flight"].as_u64().unwrap();
    assert!((1..=2).contains(&max), "{report}");

    // Without the option every user's turn may be in flight.
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["--users", "4", "--turns", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json_line(&out)["concurrency"], 4);

    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["--users", "2", "--turns", "1", "--concurrency", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--concurrency must be at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--store postgres`: the same turns on the database (a throwaway
/// PostgreSQL): the history seeded there, every turn stored there, and the
/// bench's channel gone again afterwards.
#[test]
fn bench_runs_on_postgres_and_leaves_the_database_as_it_found_it() {
    let db = mnemo_testkit::pg::database();
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .arg("bench")
            .args(["--store", "postgres", "--database-url-env", "BENCH_DB"])
            .args(args)
            .arg("--state-dir")
            .arg(dir.path())
            .env_remove("MNEMO_CONFIG")
            .env("BENCH_DB", db.url())
            .output()
            .unwrap()
    };
    let out = run(&["--users", "2", "--turns", "3"]);
    assert!(!out.status.success(), "an unmigrated database is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("mnemo store migrate"));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (client, connection) = rt
        .block_on(tokio_postgres::connect(&db.url(), tokio_postgres::NoTls))
        .unwrap();
    rt.spawn(connection);
    let store = mnemo_pg::PgStore::connect(&db.url(), 2, std::time::Duration::from_secs(5)).unwrap();
    rt.block_on(mnemo_pg::migrate::migrate(&store)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args([
            "bench",
            "--store",
            "postgres",
            "--users",
            "2",
            "--turns",
            "3",
            "--history",
            "300",
            "--json",
        ])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("MNEMO_CONFIG")
        .env("MNEMO_DATABASE_URL", db.url())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("seeded 2 of 2 users with 300 messages each (postgres)"),
        "{stderr}"
    );
    let report = last_json_line(&out);
    assert_eq!(report["store"], "postgres");
    assert_eq!(report["total_turns"], 6);
    assert_eq!(report["history"], 300);
    let left: i64 = rt
        .block_on(client.query_one("SELECT count(*) FROM mnemo_messages", &[]))
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the bench's channel is emptied after the run");
    let layout = mnemo_sessions::Layout::new(dir.path(), "bench");
    assert!(
        layout.config_path().exists() && !layout.stm_root().exists(),
        "nothing of the users' memory went to the state folder"
    );
}

/// `--brokers 2`: two brokers (each its own pool and state folder) on one
/// database, the users shared between them by affinity; every turn
/// answered and stored, each broker's share in the JSON.
#[test]
fn bench_runs_two_brokers_on_one_postgres_and_loses_no_turn() {
    let db = mnemo_testkit::pg::database();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = mnemo_pg::PgStore::connect(&db.url(), 2, std::time::Duration::from_secs(5)).unwrap();
    rt.block_on(mnemo_pg::migrate::migrate(&store)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (users, turns) = (5, 3);
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args([
            "bench",
            "--store",
            "postgres",
            "--brokers",
            "2",
            "--concurrency",
            "2",
            "--json",
        ])
        .args(["--users", &users.to_string(), "--turns", &turns.to_string()])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("MNEMO_CONFIG")
        .env("MNEMO_DATABASE_URL", db.url())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("on 2 brokers"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("broker 0") && stdout.contains("broker 1") && stdout.contains("none lost"),
        "{stdout}"
    );

    let report = last_json_line(&out);
    assert_eq!(report["store"], "postgres");
    assert_eq!(report["brokers"], 2);
    assert_eq!(report["total_turns"], users * turns);
    let per_broker = report["per_broker"].as_array().unwrap();
    assert_eq!(per_broker.len(), 2, "{report}");
    // User u on broker u % 2: users 0, 2, 4 on broker 0; 1, 3 on broker 1.
    for (b, share_users) in [(0, 3), (1, 2)] {
        let share = &per_broker[b];
        assert_eq!(share["broker"], b, "{report}");
        assert_eq!(share["users"], share_users, "{report}");
        assert_eq!(share["total_turns"], share_users * turns, "{report}");
        assert!(share["turns_per_s"].as_f64().unwrap() > 0.0, "{report}");
        let (p50, p99) = (share["p50_us"].as_u64().unwrap(), share["p99_us"].as_u64().unwrap());
        assert!(0 < p50 && p50 <= p99, "{report}");
    }
    let answered: u64 = per_broker.iter().map(|b| b["total_turns"].as_u64().unwrap()).sum();
    assert_eq!(answered, (users * turns) as u64);
    // Every turn's question and answer reached the database: none lost.
    assert_eq!(report["stored_messages"], 2 * users * turns, "{report}");

    // Each broker had its own state folder, and the memory went to the database.
    for b in 0..2 {
        let layout = mnemo_sessions::Layout::new(dir.path().join(format!("broker-{b}")), "bench");
        assert!(layout.config_path().exists(), "broker {b}'s state folder");
        assert!(!layout.stm_root().exists(), "broker {b} kept no memory in files");
    }
    let counts = rt.block_on(store.counts()).unwrap();
    assert_eq!(counts.messages, 0, "the bench's channel is emptied after the run");
}

#[test]
fn bench_refuses_several_brokers_on_the_files_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &["--users", "2", "--turns", "1", "--brokers", "2"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--brokers needs --store postgres") && stderr.contains("one broker owns a state folder"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("channels/bench").exists(),
        "nothing was written before the refusal"
    );

    let out = bench(dir.path(), &["--store", "postgres", "--brokers", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--brokers must be at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
