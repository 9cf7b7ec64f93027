//! Many users through `mnemo run` (issue 14): the broker's own CPU per
//! turn, its turns per second and the time from a user's message to the
//! answer, with a thousand users talking at once. Everything real but the
//! network edge: the `mnemo` binary, its Telegram adapter (long polling)
//! and its model client against the fake Bot API and the fake model
//! (OpenAI SSE) of the test kit, on loopback.
//!
//! Each user is a private chat that sends a question, waits for the answer
//! (the fake Bot API's `sendMessage` carrying the model's echo of that
//! question), then sends the next. Every user first has one turn that is
//! not measured (the user's files, access and session are created there),
//! then `turns` measured ones. Measured:
//!
//! - CPU per turn: the mnemo process's user + system time (`/proc/<pid>/stat`,
//!   every thread, background compaction included) over the measured turns,
//!   divided by their number;
//! - turns per second over the same window;
//! - latency per turn: from pushing the message to the fake Bot API to the
//!   answer's `sendMessage` arriving there. It includes the long poll's
//!   hand-over and the fakes' own time, so it is an upper bound on mnemo's.
//!
//! A custom harness, not criterion: the quantities belong to a whole
//! process under load, not to a function in a loop.
//!
//! `cargo bench --bench run_load` runs 1,000 users × 10 turns; without
//! `--bench` (CI's `cargo test --benches`) 20 users × 2 turns, so the bench
//! cannot rot or hang (every wait is bounded). `MNEMO_LOAD_USERS` and
//! `MNEMO_LOAD_TURNS` override the size; `MNEMO_LOAD_SESSIONS` (a JSON
//! object) becomes the channel's `sessions/config.json`, e.g.
//! `{"stm":{"fsync":false},"recall":{"enabled":false}}`;
//! `MNEMO_LOAD_STREAMING=false` turns streaming edits off; `MNEMO_LOAD_PIECE_CHARS=8` streams
//! each answer in 8-character pieces 20 ms apart (a turn's answer is then the
//! message or edit that shows it whole); `MNEMO_LOAD_BIN` runs another
//! `mnemo` binary than the one cargo built (to compare two builds, e.g. two
//! release profiles, in one interleaved series).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use mnemo::bench::procfs::{self, CpuTimes};
use mnemo_testkit::model::FakeModel;
use mnemo_testkit::telegram::{FakeBotApi, Sent, TOKEN, text_message, user};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The longest any single wait may take before the run fails.
const BOUND: Duration = Duration::from_secs(120);
/// Chat (and user) ids are `FIRST_USER + n`.
const FIRST_USER: i64 = 7_000_000;

struct Size {
    users: usize,
    turns: usize,
}

impl Size {
    /// The full size under `--bench`, the CI size otherwise; the
    /// environment may override either (the bench's own knobs: the rule
    /// that only setup reads the environment is the product's).
    #[allow(clippy::disallowed_methods)]
    fn from_args() -> Size {
        let full = std::env::args().any(|a| a == "--bench");
        let (users, turns) = if full { (1_000, 10) } else { (20, 2) };
        let env = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
                .unwrap_or(default)
        };
        Size {
            users: env("MNEMO_LOAD_USERS", users),
            turns: env("MNEMO_LOAD_TURNS", turns),
        }
    }
}

fn main() {
    let size = Size::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(size));
}

/// What one phase of the run cost the mnemo process.
struct Window {
    turns: usize,
    wall: Duration,
    cpu: CpuTimes,
    latencies: Vec<Duration>,
}

async fn run(size: Size) {
    let (model, model_url) = FakeModel::start().await;
    if let Some(chars) = piece_chars() {
        model.stream_slowly(chars, Duration::from_millis(20));
    }
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &model_url, &api.url);
    let log = dir.path().join("mnemo.log");
    let mut child = mnemo(&config, dir.path(), &log);
    let pid = child.id();
    tokio::time::timeout(BOUND, api.wait_for_calls("getUpdates", 1))
        .await
        .unwrap_or_else(|_| panic!("mnemo never polled Telegram: {}", tail(&log)));

    let users = Users::start(&api, size.users);
    let warm = users.turns(0, 1, pid, &log).await;
    let measured = users.turns(1, size.turns, pid, &log).await;
    let peak_rss_mb = procfs::peak_rss_kb(&pid.to_string()).expect("VmHWM in /proc/<pid>/status") as f64 / 1024.0;

    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let _ = child.wait();

    report(&size, &warm, &measured, peak_rss_mb);
    let total = size.users * (1 + size.turns);
    let per_turn = |method: &str| api.calls(method).len() as f64 / total as f64;
    let summaries = model
        .requests()
        .iter()
        .filter(|r| r.get("response_format").is_some())
        .count();
    println!(
        "run_load/telegram: per turn {:.2} sendMessage, {:.2} editMessageText, {:.2} sendChatAction, \
         {:.3} getUpdates; {summaries} summarizer calls",
        per_turn("sendMessage"),
        per_turn("editMessageText"),
        per_turn("sendChatAction"),
        per_turn("getUpdates"),
    );
}

/// Prints the measured window, and the first turns' CPU beside it.
fn report(size: &Size, warm: &Window, measured: &Window, peak_rss_mb: f64) {
    let mut ms: Vec<f64> = measured.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    let us = |d: Duration, w: &Window| d.as_secs_f64() * 1e6 / w.turns as f64;
    let per_turn_us = |w: &Window| us(w.cpu.total(), w);
    println!(
        "run_load/telegram: {} users x {} turns ({} measured): {:.0} turns/s, CPU {:.0} us/turn \
         (user {:.0}, system {:.0}; first turns {:.0} us/turn), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, \
         peak RSS {peak_rss_mb:.1} MB",
        size.users,
        size.turns,
        measured.turns,
        measured.turns as f64 / measured.wall.as_secs_f64(),
        per_turn_us(measured),
        us(measured.cpu.user, measured),
        us(measured.cpu.system, measured),
        per_turn_us(warm),
        at(0.50),
        at(0.99),
        ms[ms.len() - 1],
    );
}

/// `config.json` in `dir`: Telegram by long polling against the fake, the
/// fake model, and no per-user rate limit (each user asks one question
/// after another without pause). Everything else is the default (fsync on,
/// recall on, streaming on, at most 8 model calls in flight).
// The harness's own knobs (`MNEMO_LOAD_SESSIONS`) come from its environment.
#[allow(clippy::disallowed_methods)]
fn write_config(dir: &Path, model_url: &str, api_url: &str) -> PathBuf {
    let config = json!({
        "stateDir": dir.join("state"),
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_BENCH_KEY",
                   "model": "fake-1", "timeoutSecs": 30, "maxRetries": 0 },
        "channels": {
            "console": { "enabled": false },
            "telegram": { "enabled": true, "apiUrl": api_url, "pollTimeoutSecs": 5,
                          "streaming": streaming() },
        },
        "limits": { "userMessagesPerMinute": 0 },
    });
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    let layout = mnemo_sessions::Layout::new(dir.join("state"), "telegram");
    let access = layout.access_path();
    std::fs::create_dir_all(access.parent().expect("a folder")).expect("state folder");
    std::fs::write(access, br#"{"dmPolicy": "open"}"#).expect("access.json");
    if let Some(sessions) = std::env::var_os("MNEMO_LOAD_SESSIONS") {
        let sessions = sessions.into_string().expect("MNEMO_LOAD_SESSIONS is UTF-8");
        serde_json::from_str::<serde_json::Value>(&sessions).expect("MNEMO_LOAD_SESSIONS is a JSON object");
        std::fs::write(layout.config_path(), sessions).expect("sessions/config.json");
    }
    path
}

/// `MNEMO_LOAD_STREAMING=false` turns Telegram's streaming edits off.
#[allow(clippy::disallowed_methods)]
fn streaming() -> bool {
    std::env::var("MNEMO_LOAD_STREAMING").map_or(true, |v| v != "false")
}

/// `MNEMO_LOAD_PIECE_CHARS=8`: the fake model streams each answer in
/// pieces of that many characters, 20 ms apart (an answer of ~45
/// characters takes ~120 ms), instead of in one piece.
#[allow(clippy::disallowed_methods)]
fn piece_chars() -> Option<usize> {
    let chars = std::env::var("MNEMO_LOAD_PIECE_CHARS").ok()?;
    Some(chars.parse().expect("MNEMO_LOAD_PIECE_CHARS is a number"))
}

/// `mnemo run` with a clean environment, its log in `log`.
#[allow(clippy::disallowed_methods)]
fn mnemo(config: &Path, home: &Path, log: &Path) -> Child {
    let binary = std::env::var_os("MNEMO_LOAD_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_mnemo").into());
    Command::new(binary)
        .arg("--config")
        .arg(config)
        .arg("run")
        .env_clear()
        .env("HOME", home)
        .env("USER", "bench")
        .env("MNEMO_BENCH_KEY", "sk-bench-not-a-secret")
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("mnemo run starts")
}

/// The users: each a private chat with its own inbox of the bot's messages.
struct Users {
    api: FakeBotApi,
    inboxes: Vec<tokio::sync::Mutex<mpsc::UnboundedReceiver<Sent>>>,
}

impl Users {
    /// `count` users, and a task that hands each message the bot sends to
    /// the inbox of the chat it was sent to.
    fn start(api: &FakeBotApi, count: usize) -> std::sync::Arc<Users> {
        let mut feed = api.shown_feed();
        let (senders, inboxes): (Vec<_>, Vec<_>) = (0..count)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                (tx, tokio::sync::Mutex::new(rx))
            })
            .unzip();
        tokio::spawn(async move {
            while let Some(sent) = feed.recv().await {
                let n = usize::try_from(sent.chat - FIRST_USER).expect("a bench user's chat");
                let _ = senders[n].send(sent);
            }
        });
        std::sync::Arc::new(Users {
            api: api.clone(),
            inboxes,
        })
    }

    /// Turns `first..first + count` of every user, all users at once, each
    /// waiting for its answer before its next question; the process's CPU
    /// and the wall time over them.
    async fn turns(self: &std::sync::Arc<Self>, first: usize, count: usize, pid: u32, log: &Path) -> Window {
        let cpu_before = cpu_time(pid);
        let started = Instant::now();
        let tasks: Vec<_> = (0..self.inboxes.len())
            .map(|n| {
                let users = self.clone();
                tokio::spawn(async move { users.converse(n, first, count).await })
            })
            .collect();
        let mut latencies = Vec::with_capacity(self.inboxes.len() * count);
        for task in tasks {
            match task.await {
                Ok(Ok(took)) => latencies.extend(took),
                Ok(Err(waited)) => panic!("{waited}: {}", tail(log)),
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        Window {
            turns: latencies.len(),
            wall: started.elapsed(),
            cpu: cpu_time(pid) - cpu_before,
            latencies,
        }
    }

    /// User `n`'s turns `first..first + count`: how long each answer took,
    /// or what was never answered.
    async fn converse(&self, n: usize, first: usize, count: usize) -> Result<Vec<Duration>, String> {
        let chat = FIRST_USER + n as i64;
        let mut inbox = self.inboxes[n].lock().await;
        let mut took = Vec::with_capacity(count);
        for turn in first..first + count {
            let question = format!("question {turn} from user {n} about tea");
            let asked = Instant::now();
            self.api
                .push_message(text_message(chat, user(chat, "Reader"), &question));
            // A streamed answer's first message may hold its first words
            // only: the answer is the message or edit showing it whole.
            let answer = loop {
                let shown = tokio::time::timeout(BOUND, inbox.recv())
                    .await
                    .map_err(|_| format!("user {n} got no answer to turn {turn} within {BOUND:?}"))?
                    .ok_or("the fake Bot API stopped")?;
                if shown.text.contains(&question) {
                    break shown;
                }
            };
            took.push(answer.at.saturating_duration_since(asked));
        }
        Ok(took)
    }
}

/// User and system CPU time of the running mnemo, all its threads so far.
fn cpu_time(pid: u32) -> CpuTimes {
    procfs::cpu_times(&pid.to_string()).expect("mnemo is running")
}

/// The last lines of mnemo's log, for a failed run's message (the log
/// holds no message text: mnemo never logs it).
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "mnemo's log ends:\n{}",
        lines[lines.len().saturating_sub(20)..].join("\n")
    )
}
