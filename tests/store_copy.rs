//! `mnemo store copy` (issue 20, part 4) through the real binary and a real
//! PostgreSQL from the test kit: a history made by `mnemo chat` on files
//! (folded, so archives exist) copied into the database, where `mnemo
//! chat` recalls its old facts, and copied back into a fresh state folder
//! with the same messages; a copy killed mid-way, or losing its database
//! mid-way, finished by running it again without duplicating anything; a
//! row the database does not store as sent caught by the verification;
//! the tokens spent (the user's and the channel's) carried both ways;
//! a different user in the target refused unless `--replace`; bad input
//! (malformed lines, NUL, a folder that is not a user) reported, not fatal.

use crate::support;

use mnemo_sessions::maintenance::digests;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, Record, SafeName, archive, facts, locks::LockRegistry, versions};
use mnemo_testkit::pg;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use support::{FakeModel, request_text};

/// A config for the binary whose state folder is `dir/<state>`, with the
/// given store kind; the database URL comes from `MNEMO_DATABASE_URL`.
fn config(dir: &Path, model_url: &str, state: &str, kind: &str) -> PathBuf {
    let path = support::write_config(dir, model_url, json!({}));
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["stateDir"] = json!(dir.join(state));
    config["store"] = json!({ "kind": kind, "urlEnv": "MNEMO_DATABASE_URL" });
    let path = dir.join(format!("{state}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

/// Small folds on the console channel, so a short chat archives batches.
fn small_folds(state: &Path) {
    let path = Layout::new(state, "console").config_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let sessions = json!({ "stm": {"maxMessages": 12, "contextWindow": 4}, "compacting": {"threshold": 8} });
    std::fs::write(path, sessions.to_string()).unwrap();
}

/// How the tests run the binary: a pinned home, the database's URL.
#[derive(Clone)]
struct Bin {
    home: PathBuf,
    db: String,
}

impl Bin {
    fn cmd(&self, config: &Path, args: &[&str]) -> std::process::Command {
        let mut cmd = support::mnemo(config, &self.home);
        cmd.env("MNEMO_DATABASE_URL", &self.db).args(args);
        cmd
    }
}

struct Env {
    dir: tempfile::TempDir,
    bin: Bin,
}

impl Env {
    fn new(db: String) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        Env {
            bin: Bin { home, db },
            dir,
        }
    }

    async fn run(&self, config: &Path, args: &[&str], input: &[u8]) -> Output {
        let (cmd, input) = (self.bin.cmd(config, args), input.to_vec());
        tokio::task::spawn_blocking(move || support::with_input(cmd, &input))
            .await
            .unwrap()
    }

    /// Runs the binary and expects it to succeed; its stdout.
    async fn ok(&self, config: &Path, args: &[&str], input: &[u8]) -> String {
        let out = self.run(config, args, input).await;
        assert!(
            out.status.success(),
            "mnemo {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// One user's messages in the file store, as the sessions readers give
/// them: archive (oldest batch first), then the log.
fn file_messages(state: &Path, channel: &str, user: &SafeName) -> Vec<Record> {
    let layout = Layout::new(state, channel);
    let mut records = Vec::new();
    for path in archive::files(&layout, user).unwrap() {
        records.extend(archive::read_batch(&layout, &path).unwrap());
    }
    let stm = Stm::new(layout, LockRegistry::new(), false);
    records.extend(stm.read_all(user).unwrap().records);
    records
}

/// What the copy keeps of a message: its time to the microsecond (the
/// database's precision), role, text (NUL as U+2400) and id.
fn key(r: &Record) -> (String, String, String, String) {
    use chrono::Timelike;
    let ts = r.ts.with_nanosecond(r.ts.nanosecond() / 1000 * 1000).unwrap();
    let role = format!("{:?}", r.role);
    (
        ts.to_rfc3339(),
        role,
        r.text.replace('\0', "\u{2400}"),
        r.msg_id.clone(),
    )
}

async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// A usage row as both sides compare it: day, purpose, tokens in and out.
type UsageLine = (String, String, u64, u64);

/// The console channel's token rows in the database: a user's, or (`None`)
/// the channel's totals, by day and purpose.
async fn pg_usage(client: &tokio_postgres::Client, user: Option<&str>) -> Vec<UsageLine> {
    let order = "ORDER BY day, array_position(ARRAY['answer', 'tools', 'summary', 'digest'], purpose)";
    let rows = match user {
        Some(user) => client
            .query(
                &format!(
                    "SELECT day, purpose, tokens_in, tokens_out FROM mnemo_usage
                     WHERE channel = 'console' AND user_key = $1 {order}"
                ),
                &[&user],
            )
            .await
            .unwrap(),
        None => client
            .query(
                &format!(
                    "SELECT day, purpose, tokens_in, tokens_out FROM mnemo_channel_usage WHERE channel = 'console' {order}"
                ),
                &[],
            )
            .await
            .unwrap(),
    };
    rows.iter()
        .map(|r| {
            let day: chrono::NaiveDate = r.get(0);
            (
                day.to_string(),
                r.get(1),
                r.get::<_, i64>(2) as u64,
                r.get::<_, i64>(3) as u64,
            )
        })
        .collect()
}

/// The same rows from a state folder's `usage/` files.
fn file_usage(layout: &Layout, user: Option<&SafeName>) -> Vec<UsageLine> {
    mnemo_sessions::store::files::read_usage(layout, user)
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.day.to_string(),
                r.purpose.as_str().to_string(),
                r.tokens_in,
                r.tokens_out,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_history_moves_to_postgres_is_recalled_there_and_comes_back_to_files_unchanged() {
    let (fake, url) = FakeModel::start().await;
    let db = pg::database();
    let env = Env::new(db.url());
    let dir = env.dir.path();
    let files = config(dir, &url, "files", "files");
    let postgres = config(dir, &url, "pg-broker", "postgres");
    let back = config(dir, &url, "back", "files");
    let state = dir.join("files");
    small_folds(&state);
    fake.summarize_when(
        "Dr. Okafor",
        json!({"summary": "Ada told me about her dentist.", "facts": [
            {"section": "facts", "key": "dentist", "value": "Dr. Okafor on Elm Street"},
            {"section": "topics", "key": "bike repair", "value": "the chain needs oiling"}
        ]})
        .to_string(),
    );
    let mut input = String::from("my dentist is Dr. Okafor on Elm Street\n");
    input.push_str("my bicycle is painted vermilion\n");
    // Under the default limit of 20 messages a minute.
    for i in 0..16 {
        input.push_str(&format!("small talk number {i} about the weather\n"));
    }
    input.push_str("the door code is 12\0 34\n");
    env.ok(&files, &["chat"], input.as_bytes()).await;

    let ada = SafeName::of("ada");
    let layout = Layout::new(&state, "console");
    let batches = archive::files(&layout, &ada).unwrap().len();
    assert!(batches >= 2, "the chat folded at least twice: {batches} batches");
    // Bad input beside the history: a malformed line in the log, and a
    // folder under stm/ whose name is no user's (not a SafeName).
    let log = layout.messages_path(&ada);
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{this is not a record\n");
    std::fs::write(&log, text).unwrap();
    // And one in the oldest archive batch (the reader skips it too).
    let oldest = archive::files(&layout, &ada).unwrap()[0].clone();
    let mut lines = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&oldest).unwrap()),
        &mut lines,
    )
    .unwrap();
    lines.push_str("not json either\n");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, lines.as_bytes()).unwrap();
    std::fs::write(&oldest, gz.finish().unwrap()).unwrap();
    let stray = layout.stm_root().join("not a user");
    std::fs::create_dir_all(&stray).unwrap();
    std::fs::write(stray.join("messages.jsonl"), "{}\n").unwrap();
    let source = file_messages(&state, "console", &ada);
    let source_facts = facts::read(&layout, &ada).unwrap().entries;
    let source_versions = versions::history(&layout, &ada).unwrap();
    assert!(!source_facts.is_empty() && !source_versions.is_empty());
    let note = layout.topic_path(&ada, &SafeName::of("bike-repair")).unwrap();
    let source_note = std::fs::read_to_string(&note).unwrap();
    // An operator's shared note of the channel.
    let shared = layout.shared_topic_path(&SafeName::of("house-rules"));
    std::fs::create_dir_all(shared.parent().unwrap()).unwrap();
    let shared_note = "---\ntitle: House rules\n---\n\nThe bicycle rack is by the gate.\n";
    std::fs::write(&shared, shared_note).unwrap();
    // A daily summary as maintenance writes it, and a weekly whose
    // frontmatter was edited away.
    let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
    let daily_path = layout.daily_path(&ada, day);
    let generated = chrono::DateTime::parse_from_rfc3339("2026-12-01T03:00:00Z")
        .unwrap()
        .to_utc();
    let meta = digests::DigestMeta::new(&ada, digests::Period::Day(day), chrono_tz::Europe::Berlin, generated, 7);
    let daily_text = digests::render(&daily_path, &meta, "Ada talked about her dentist and her bicycle.").unwrap();
    std::fs::create_dir_all(daily_path.parent().unwrap()).unwrap();
    std::fs::write(&daily_path, &daily_text).unwrap();
    let weekly_path = layout.weekly_path(&ada, 2026, 48);
    std::fs::create_dir_all(weekly_path.parent().unwrap()).unwrap();
    std::fs::write(&weekly_path, "A week of small talk (notes by hand).\n").unwrap();
    // A reminder and a timezone (`/session remind`, `/session timezone`),
    // with the nanoseconds a live bot's clock gives.
    let set_at = chrono::Utc::now();
    let reminder = mnemo_sessions::reminders::Reminder {
        id: "k3f9qa".into(),
        text: "water the plants".into(),
        at: set_at + chrono::TimeDelta::days(3),
        due: set_at + chrono::TimeDelta::days(3),
        repeat: Some("0 9 * * MON".into()),
        timezone: "Europe/Lisbon".into(),
        place: mnemo_sessions::reminders::Place {
            chat_id: "console".into(),
            thread_id: None,
            group: false,
            platform: None,
        },
        created: set_at,
        state: mnemo_sessions::reminders::State::Active,
        claimed_at: None,
        attempts: 0,
        missed: None,
    };
    let book = mnemo_sessions::reminders::Book {
        timezone: Some("Europe/Lisbon".into()),
        reminders: vec![reminder],
    };
    mnemo_sessions::store::files::write_book(&layout, &ada, &book).unwrap();

    // The tokens the chat spent: the user's answers and summaries, and the
    // channel's totals.
    let source_usage = file_usage(&layout, Some(&ada));
    let source_totals = file_usage(&layout, None);
    assert!(
        source_usage.iter().any(|u| u.1 == "answer") && source_usage.iter().any(|u| u.1 == "summary"),
        "{source_usage:?}"
    );
    assert!(!source_totals.is_empty());

    // Not migrated: a clear refusal that says what to run.
    let out = env
        .run(&files, &["store", "copy", "--from", "files", "--to", "postgres"], b"")
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("run `mnemo store migrate`"),
        "{stderr}"
    );
    env.ok(&postgres, &["store", "migrate"], b"").await;

    let args = ["store", "copy", "--from", "files", "--to", "postgres", "--json"];
    let out = env.run(&files, &args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("[1/1] console/ada: {} messages", source.len())),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["users"], 1, "{report}");
    assert_eq!(report["copied"], 1, "{report}");
    assert_eq!(report["messages"], source.len(), "{report}");
    assert_eq!(report["folds"], batches, "{report}");
    assert_eq!(report["malformedLinesSkipped"], 2, "{report}");
    assert_eq!(report["verified"], json!({"users": 1, "messages": source.len()}));

    let client = pg_client(&db.url()).await;
    assert_eq!(
        pg_usage(&client, Some("ada")).await,
        source_usage,
        "the user's tokens went along"
    );
    assert_eq!(pg_usage(&client, None).await, source_totals, "and the channel's totals");
    assert_eq!(
        (report["usageRows"].clone(), report["channelUsageRows"].clone()),
        (json!(source_usage.len()), json!(source_totals.len())),
        "{report}"
    );
    let reminders = client
        .query_one(
            "SELECT count(*), min(r.text), min(u.timezone) FROM mnemo_reminders r JOIN mnemo_users u USING (channel, user_key)
             WHERE r.channel = 'console' AND r.user_key = 'ada'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            reminders.get::<_, i64>(0),
            reminders.get::<_, String>(1),
            reminders.get::<_, String>(2)
        ),
        (1, "water the plants".to_string(), "Europe/Lisbon".to_string()),
        "the reminder and the timezone went along"
    );
    let rows = client
        .query(
            "SELECT ts, role, text, msg_id, fold IS NOT NULL FROM mnemo_messages
             WHERE channel = 'console' AND user_key = 'ada' ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    let stored: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| {
            let ts: chrono::DateTime<chrono::Utc> = r.get(0);
            let role: String = r.get(1);
            let role = if role == "user" { "User" } else { "Assistant" };
            (ts.to_rfc3339(), role.to_string(), r.get(2), r.get(3))
        })
        .collect();
    let expected: Vec<_> = source.iter().map(key).collect();
    assert!(expected.iter().any(|k| k.2 == "the door code is 12\u{2400} 34"));
    assert_eq!(
        stored, expected,
        "the same messages in the same order (NUL kept as U+2400)"
    );
    let archived = archive::files(&layout, &ada)
        .unwrap()
        .iter()
        .map(|p| archive::read_batch(&layout, p).unwrap().len())
        .sum::<usize>();
    let folded: Vec<bool> = rows.iter().map(|r| r.get(4)).collect();
    assert!(
        folded[..archived].iter().all(|f| *f) && folded[archived..].iter().all(|f| !*f),
        "archived rows first, then the short-term ones: {folded:?}"
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_folds WHERE kind = 'summarized'").await,
        batches as i64
    );
    let (summary, profile): (Option<String>, Option<String>) = client
        .query_one("SELECT summary, profile FROM mnemo_users", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert!(summary.is_some_and(|s| !s.trim().is_empty()), "the rolling summary");
    assert!(profile.unwrap().contains("Dr. Okafor on Elm Street"));
    // Long-term memory too: the fact log, the versions, the topic note.
    assert_eq!(report["facts"], source_facts.len(), "{report}");
    assert_eq!(report["versions"], source_versions.len(), "{report}");
    assert_eq!(report["topicNotes"], 1, "{report}");
    assert_eq!(report["sharedNotes"], 1, "{report}");
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_facts WHERE by = 'compaction'").await,
        source_facts.len() as i64
    );
    let stored_note: String = client
        .query_one("SELECT document FROM mnemo_topics WHERE slug = 'bike-repair'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored_note, source_note);
    assert_eq!(report["dailyWeeklySummaries"], 2, "{report}");
    let digest_rows: Vec<(String, String, i32, String)> = client
        .query(
            "SELECT kind, period, messages, body FROM mnemo_digests ORDER BY kind, period",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        digest_rows,
        vec![
            (
                "daily".into(),
                "2026-11-30".into(),
                7,
                "Ada talked about her dentist and her bicycle.\n".into()
            ),
            (
                "weekly".into(),
                "2026-W48".into(),
                0,
                "A week of small talk (notes by hand).\n".into()
            ),
        ]
    );

    // Run again: everything is already there, nothing is added.
    let again = env
        .ok(&files, &["store", "copy", "--from", "files", "--to", "postgres"], b"")
        .await;
    assert!(again.contains("1 user(s) (0 new, 1 already there"), "{again}");
    assert!(
        again.contains(&format!("verified 1 users / {} messages", source.len())),
        "{again}"
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_messages").await,
        source.len() as i64
    );
    assert_eq!(
        pg_usage(&client, None).await,
        source_totals,
        "a copy run again counts the channel's tokens once"
    );

    // A broker on the database recalls what was said before the copy.
    env.ok(&postgres, &["chat"], b"what colour is my bicycle?\n").await;
    let asked = fake.chat_requests().pop().unwrap();
    let context = request_text(&asked);
    assert!(
        context.contains("vermilion"),
        "an archived message is recalled: {context}"
    );
    assert!(
        context.contains("Dr. Okafor"),
        "the profile is in the context: {context}"
    );
    assert!(
        context.contains("[shared note: house-rules] The bicycle rack is by the gate."),
        "the shared note is recalled: {context}"
    );

    // Back to a fresh state folder: the same messages, and the new turn.
    let out = env
        .run(&back, &["store", "copy", "--from", "postgres", "--to", "files"], b"")
        .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("verified 1 users / {} messages", source.len() + 2)),
        "{stdout}"
    );
    let back_layout = Layout::new(dir.join("back"), "console");
    let pg_ada = pg_usage(&client, Some("ada")).await;
    assert!(
        pg_ada.iter().map(|u| u.2).sum::<u64>() > source_usage.iter().map(|u| u.2).sum::<u64>(),
        "the turn on the database spent tokens there: {pg_ada:?}"
    );
    assert_eq!(file_usage(&back_layout, Some(&ada)), pg_ada, "the tokens came back");
    assert_eq!(file_usage(&back_layout, None), pg_usage(&client, None).await);
    let returned = file_messages(&dir.join("back"), "console", &ada);
    let returned: Vec<_> = returned.iter().map(key).collect();
    assert_eq!(returned[..source.len()], expected[..], "the same messages came back");
    assert_eq!(returned[source.len()].2, "what colour is my bicycle?");
    let back_book = mnemo_sessions::store::files::read_book(&back_layout, &ada).unwrap();
    let stored = mnemo_pg::copy::UserMemory {
        reminders: book.clone(),
        ..Default::default()
    }
    .as_stored()
    .reminders;
    assert_eq!(back_book, stored, "the reminders came back (to the microsecond)");
    assert_eq!(archive::files(&back_layout, &ada).unwrap().len(), batches);
    let back_facts = facts::read(&back_layout, &ada).unwrap().entries;
    let micros = |entries: &[facts::FactEntry]| {
        entries
            .iter()
            .map(|e| {
                (
                    e.ts.timestamp_micros(),
                    e.key.clone(),
                    e.value.clone(),
                    e.sources.clone(),
                    e.by,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        micros(&back_facts[..source_facts.len()]),
        micros(&source_facts),
        "the fact log came back (to the microsecond)"
    );
    let back_versions = versions::history(&back_layout, &ada).unwrap();
    // An earlier profile comes back with its body (its frontmatter is
    // made anew: the database keeps bodies).
    let whats = |v: &[versions::Version]| {
        v.iter()
            .map(|v| {
                let before = v.before.as_deref().map(mnemo_sessions::profile::body_of_document);
                (v.seq, v.what.clone(), v.file.clone(), before)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        whats(&back_versions[back_versions.len() - source_versions.len()..]),
        whats(&source_versions),
        "the versions came back"
    );
    let back_note = back_layout.topic_path(&ada, &SafeName::of("bike-repair")).unwrap();
    assert_eq!(std::fs::read_to_string(back_note).unwrap(), source_note);
    assert_eq!(
        std::fs::read_to_string(back_layout.daily_path(&ada, day)).unwrap(),
        daily_text,
        "the daily came back as it was"
    );
    let (meta, body) = digests::read_digest(&dir.join("back"), &back_layout.weekly_path(&ada, 2026, 48))
        .unwrap()
        .unwrap();
    assert_eq!(body, "A week of small talk (notes by hand).\n");
    assert_eq!(meta.unwrap().period, "2026-W48", "given frontmatter on the way");
    let back_shared = back_layout.shared_topic_path(&SafeName::of("house-rules"));
    assert_eq!(std::fs::read_to_string(back_shared).unwrap(), shared_note);
    assert!(!back_layout.copy_marker_path(&ada).exists());
    let mode = std::fs::metadata(back_layout.messages_path(&ada)).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    // `mnemo chat` on the files copy sees the history: the profile, and the
    // archived fact through recall.
    env.ok(&back, &["chat"], b"is my bicycle still vermilion?\n").await;
    let context = request_text(&fake.chat_requests().pop().unwrap());
    assert!(
        context.contains("my bicycle is painted vermilion"),
        "recalled from the archive: {context}"
    );
    assert!(context.contains("Elm Street"), "the profile: {context}");

    // Copying back again over the now different files: refused, naming
    // the user, unless --replace.
    let args = ["store", "copy", "--from", "postgres", "--to", "files"];
    let out = env.run(&back, &args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("console/ada") && stderr.contains("--replace"),
        "{stderr}"
    );
    let replaced = env.ok(&back, &[&args[..], &["--replace"]].concat(), b"").await;
    assert!(replaced.contains("1 replaced"), "{replaced}");
    let again = file_messages(&dir.join("back"), "console", &ada);
    assert_eq!(
        again.len(),
        source.len() + 2,
        "the database's copy, without the files' extra turn"
    );
    let kept = mnemo_sessions::versions::history(&back_layout, &ada).unwrap();
    assert!(
        kept.iter()
            .any(|v| v.by == mnemo_sessions::versions::Author::Operator && v.before.is_some()),
        "the replaced profile is kept as a version: {kept:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_catches_a_row_the_database_changed_and_a_changed_user_is_not_merged() {
    let (_fake, url) = FakeModel::start().await;
    let db = pg::database();
    let env = Env::new(db.url());
    let dir = env.dir.path();
    let files = config(dir, &url, "files", "files");
    let postgres = config(dir, &url, "pg-broker", "postgres");
    env.ok(&files, &["chat"], b"one\ntwo\nthree\n").await;
    env.ok(&postgres, &["store", "migrate"], b"").await;
    let client = pg_client(&db.url()).await;
    // The database stores something else than it was sent for one row.
    client
        .batch_execute(
            "CREATE FUNCTION tamper() RETURNS trigger AS $$
             BEGIN IF NEW.text = 'two' THEN NEW.text := 'tw0'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql;
             CREATE TRIGGER tamper BEFORE INSERT ON mnemo_messages FOR EACH ROW EXECUTE FUNCTION tamper();",
        )
        .await
        .unwrap();
    let args = ["store", "copy", "--from", "files", "--to", "postgres"];
    let out = env.run(&files, &args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("verification failed for user console/ada"), "{stderr}");
    assert!(!stderr.contains("tw0"), "no message text in errors: {stderr}");
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_messages").await,
        0,
        "nothing of the user was committed"
    );
    assert_eq!(count(&client, "SELECT count(*) FROM mnemo_users").await, 0);

    client
        .batch_execute("DROP TRIGGER tamper ON mnemo_messages")
        .await
        .unwrap();
    let out = env.ok(&files, &args, b"").await;
    assert!(out.contains("verified 1 users / 6 messages"), "{out}");
    // Someone edits a row afterwards: the next copy finds the user
    // different and refuses to merge; --replace puts the copy back.
    client
        .execute("UPDATE mnemo_messages SET text = 'edited' WHERE text = 'three'", &[])
        .await
        .unwrap();
    let out = env.run(&files, &args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("user console/ada is already in the database with different memory"),
        "{stderr}"
    );
    env.ok(&files, &[&args[..], &["--replace"]].concat(), b"").await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_messages WHERE text = 'three'").await,
        1
    );
    assert_eq!(count(&client, "SELECT count(*) FROM mnemo_messages").await, 6);
}

/// Starts `mnemo store copy …`, waits for its first progress line, then
/// `then` (kill it, stop the database…); its stderr so far.
fn interrupt(bin: &Bin, config: &Path, args: &[&str], then: impl FnOnce(u32)) -> String {
    let mut child = bin
        .cmd(config, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("[1/") {
            break;
        }
    }
    then(child.id());
    for line in lines {
        seen.push_str(&line.unwrap_or_default());
        seen.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the copy finished before it was interrupted: {seen}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_killed_or_losing_its_database_mid_way_finishes_on_the_next_run_without_duplicates() {
    let (_fake, url) = FakeModel::start().await;
    let cluster = pg::Cluster::start();
    let db = cluster.create_database();
    let env = Env::new(db.url());
    let dir = env.dir.path();
    let files = config(dir, &url, "files", "files");
    let back = config(dir, &url, "back", "files");
    let postgres = config(dir, &url, "pg-broker", "postgres");
    env.ok(&postgres, &["store", "migrate"], b"").await;
    // A larger history, seeded the way the product keeps it: 150 users of
    // 80 earlier messages, most of them archived (large enough that a copy
    // is still running when it is interrupted after its first user).
    let state = dir.join("files");
    env.ok(
        &files,
        &[
            "bench",
            "--state-dir",
            state.to_str().unwrap(),
            "--users",
            "150",
            "--turns",
            "1",
            "--history",
            "80",
        ],
        b"",
    )
    .await;
    let users = mnemo_sessions::report::known_users(&Layout::new(&state, "bench"))
        .unwrap()
        .len();
    assert_eq!(users, 150);
    let total: usize = mnemo_sessions::report::known_users(&Layout::new(&state, "bench"))
        .unwrap()
        .iter()
        .map(|u| file_messages(&state, "bench", u).len())
        .sum();

    let to_pg = ["store", "copy", "--from", "files", "--to", "postgres", "--json"];
    tokio::task::spawn_blocking({
        let (bin, files) = (env.bin.clone(), files.clone());
        move || {
            let seen = interrupt(&bin, &files, &to_pg, |pid| {
                // SIGKILL: no chance to clean up, as a crash.
                std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .unwrap();
            });
            assert!(!seen.contains("[150/150]"), "{seen}");
        }
    })
    .await
    .unwrap();
    let client = pg_client(&db.url()).await;
    let partial = count(&client, "SELECT count(*) FROM mnemo_users").await;
    assert!((1..150).contains(&partial), "{partial} users copied before the kill");

    // The database goes away mid-way through the next run: an error naming
    // the user, and how to go on.
    let cluster = std::sync::Arc::new(cluster);
    let seen = tokio::task::spawn_blocking({
        let (bin, files, cluster) = (env.bin.clone(), files.clone(), cluster.clone());
        move || interrupt(&bin, &files, &to_pg, |_| cluster.stop())
    })
    .await
    .unwrap();
    assert!(
        seen.contains("copying user bench/") && seen.contains("run the same command again to resume"),
        "{seen}"
    );
    cluster.start_server();

    let out = env.run(&files, &to_pg, b"").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["users"], 150, "{report}");
    assert!(report["alreadyThere"].as_u64().unwrap() >= partial as u64, "{report}");
    assert_eq!(report["verified"]["messages"], total, "{report}");
    let client = pg_client(&db.url()).await;
    assert_eq!(count(&client, "SELECT count(*) FROM mnemo_users").await, 150);
    assert_eq!(
        count(&client, "SELECT count(*) FROM mnemo_messages").await,
        total as i64,
        "every message once"
    );

    // Into files, killed mid-way: the next run finishes the user it was
    // writing and the rest, and the files hold every message once.
    let to_files = ["store", "copy", "--from", "postgres", "--to", "files", "--json"];
    tokio::task::spawn_blocking({
        let (bin, back) = (env.bin.clone(), back.clone());
        move || {
            interrupt(&bin, &back, &to_files, |pid| {
                std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .unwrap();
            })
        }
    })
    .await
    .unwrap();
    let out = env.run(&back, &to_files, b"").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], json!({"users": 150, "messages": total}), "{report}");
    let back_state = dir.join("back");
    let back_layout = Layout::new(&back_state, "bench");
    let back_users = mnemo_sessions::report::known_users(&back_layout).unwrap();
    let again: usize = back_users
        .iter()
        .map(|u| file_messages(&back_state, "bench", u).len())
        .sum();
    assert_eq!(again, total);
    assert!(back_users.iter().all(|u| !back_layout.copy_marker_path(u).exists()));

    // Where the kill lands is up to the scheduler; what a kill in the middle
    // of a user leaves is certain: the user's marker, some of their files
    // (here: the archive and summary written, the log not yet). The next run
    // redoes that user and only that user.
    let user = back_users.iter().nth(70).unwrap();
    std::fs::remove_file(back_layout.messages_path(user)).unwrap();
    std::fs::write(back_layout.copy_marker_path(user), "").unwrap();
    let out = env.run(&back, &to_files, b"").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["resumed"], 1, "{report}");
    assert_eq!(report["alreadyThere"], 149, "{report}");
    assert_eq!(report["verified"]["messages"], total, "{report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("bench/{user}: 82 messages (finished an interrupted copy)")),
        "{stderr}"
    );
    assert_eq!(file_messages(&back_state, "bench", user).len(), 82);
    assert!(!back_layout.copy_marker_path(user).exists());

    // A kill can also land after the marker's folder is made and before the
    // marker is renamed into it: the user's only trace is a folder holding a
    // temporary file. The next run copies that user as new.
    let user = back_users.iter().nth(71).unwrap();
    for root in mnemo_sessions::report::user_roots(&back_layout, user).unwrap() {
        if root.is_dir() {
            std::fs::remove_dir_all(&root).unwrap();
        } else if root.exists() {
            std::fs::remove_file(&root).unwrap();
        }
    }
    let folder = back_layout.stm_dir(user);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(".tmp-copy-incomplete-1-1-1"), "").unwrap();
    let out = env.run(&back, &to_files, b"").await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["copied"], 1, "{report}");
    assert_eq!(report["verified"]["messages"], total, "{report}");
    assert_eq!(file_messages(&back_state, "bench", user).len(), 82);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_reported_or_refused_and_nothing_is_written_where_it_must_not_be() {
    let (_fake, url) = FakeModel::start().await;
    let db = pg::database();
    let env = Env::new(db.url());
    let dir = env.dir.path();
    let files = config(dir, &url, "files", "files");
    let postgres = config(dir, &url, "pg-broker", "postgres");
    let back = config(dir, &url, "back", "files");
    env.ok(&files, &["chat"], b"one\ntwo\nthree\n").await;
    env.ok(&postgres, &["store", "migrate"], b"").await;
    let layout = Layout::new(dir.join("files"), "console");
    let ada = SafeName::of("ada");
    let log = layout.messages_path(&ada);
    let text = std::fs::read_to_string(&log).unwrap();
    let first = text.lines().next().unwrap().to_string();

    // The same record twice (as a crash between archiving and cutting the
    // log leaves it): copied once, and counted.
    std::fs::write(&log, format!("{text}{first}\n")).unwrap();
    let to_pg = ["store", "copy", "--from", "files", "--to", "postgres", "--json"];
    let report: Value = serde_json::from_str(&env.ok(&files, &to_pg, b"").await).unwrap();
    assert_eq!(report["messages"], 6, "{report}");
    assert_eq!(report["repeatedRecords"], 1, "{report}");

    // A different record under a msg id already used: the copy stops there,
    // naming the user and the id, not the text.
    let mut other: Value = serde_json::from_str(&first).unwrap();
    other["text"] = json!("a secret different text");
    std::fs::write(&log, format!("{text}{other}\n")).unwrap();
    let out = env.run(&files, &[&to_pg[..], &["--replace"]].concat(), b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("reading user console/ada") && stderr.contains("two different messages carry the msg id"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");

    // A user's log that is a link out of the state folder: refused, naming
    // the path, and nothing is read through it.
    let outside = dir.join("outside.jsonl");
    std::fs::write(&outside, format!("{first}\n")).unwrap();
    let eve = SafeName::of("eve");
    std::fs::create_dir_all(layout.stm_dir(&eve)).unwrap();
    std::os::unix::fs::symlink(&outside, layout.messages_path(&eve)).unwrap();
    let out = env.run(&files, &[&to_pg[..], &["--user", "eve"]].concat(), b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("reading user console/eve") && stderr.contains("is a symbolic link"),
        "{stderr}"
    );

    // A user nobody stored: an error, not an empty copy.
    let out = env
        .run(&files, &[&to_pg[..], &["--user", "nobody"]].concat(), b"")
        .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing is stored about user `nobody`"));

    // Into a state folder a bot is running on: refused, nothing written.
    let to_files = ["store", "copy", "--from", "postgres", "--to", "files"];
    let busy = mnemo::instance::InstanceLock::acquire(&dir.join("back")).unwrap();
    let out = env.run(&back, &to_files, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("stop it before copying"),
        "{stderr}"
    );
    assert!(!dir.join("back/channels").exists());
    drop(busy);

    // A user key in the database that is not a folder name mnemo writes:
    // refused, never turned into a path.
    let client = pg_client(&db.url()).await;
    client
        .execute(
            "INSERT INTO mnemo_users (channel, user_key) VALUES ('console', '../escape')",
            &[],
        )
        .await
        .unwrap();
    let out = env.run(&back, &to_files, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(r#"user key "../escape""#), "{stderr}");
    // It sorts first: the copy stopped before writing anything.
    assert!(!dir.join("escape").exists() && !dir.join("back/channels").exists());
}

/// Each channel's access rules travel too: access.json → its row and back,
/// a re-run finds them already there, and different rules on the other
/// side are never merged (`--replace` overwrites them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_rules_are_copied_both_ways_and_never_merged() {
    let (_fake, url) = FakeModel::start().await;
    let db = pg::database();
    let env = Env::new(db.url());
    let dir = env.dir.path();
    let files = config(dir, &url, "files", "files");
    let postgres = config(dir, &url, "pg-broker", "postgres");
    let fresh = config(dir, &url, "fresh", "files");
    env.ok(&files, &["access", "allow", "telegram", "111"], b"").await;
    env.ok(&files, &["access", "policy", "telegram", "allowlist"], b"")
        .await;
    env.ok(&postgres, &["store", "migrate"], b"").await;
    let listed = async |config: &Path| -> Value {
        let out = env.ok(config, &["access", "list", "telegram", "--json"], b"").await;
        serde_json::from_str::<Value>(out.trim()).unwrap()["rules"].clone()
    };

    let to_pg = ["store", "copy", "--from", "files", "--to", "postgres"];
    let out = env.ok(&files, &to_pg, b"").await;
    assert!(out.contains("access rules of 1 channel(s): 1 copied"), "{out}");
    let in_db = listed(&postgres).await;
    assert_eq!(in_db, listed(&files).await);
    assert_eq!(
        (in_db["dmPolicy"].clone(), in_db["allowFrom"].clone()),
        (json!("allowlist"), json!(["111"]))
    );
    let out = env.ok(&files, &[&to_pg[..], &["--json"]].concat(), b"").await;
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["accessRules"]["alreadyThere"], 1, "{summary}");

    // The database's rules change (as on a live deployment).
    env.ok(&postgres, &["access", "allow", "telegram", "222"], b"").await;
    let out = env.run(&files, &to_pg, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("access rules of channel `telegram` in the database differ"),
        "{stderr}"
    );
    assert_eq!(
        listed(&postgres).await["allowFrom"],
        json!(["111", "222"]),
        "not overwritten"
    );

    // Back to files: a fresh folder takes them; the old one only with --replace.
    let to_files = ["store", "copy", "--from", "postgres", "--to", "files"];
    let out = env.ok(&fresh, &to_files, b"").await;
    assert!(out.contains("1 copied"), "{out}");
    assert_eq!(listed(&fresh).await, listed(&postgres).await);
    let out = env.run(&files, &to_files, b"").await;
    assert!(!out.status.success());
    assert_eq!(listed(&files).await["allowFrom"], json!(["111"]));
    let out = env.ok(&files, &[&to_files[..], &["--replace"]].concat(), b"").await;
    assert!(out.contains("1 replaced"), "{out}");
    assert_eq!(listed(&files).await["allowFrom"], json!(["111", "222"]));
}
