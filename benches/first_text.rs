//! Time to first text through the broker (issue 17): mnemo's added latency
//! between the model's first byte of answer text and the platform call that
//! carries it to the user, measured on a real run — the `mnemo` binary,
//! its real adapters and the real streaming path — with the fake model
//! (SSE over loopback HTTP) and a fake platform as the only stand-ins:
//!
//! - console: `mnemo chat` on pipes; the call is the first write of the
//!   answer to stdout, timed when this process reads it;
//! - Discord: `mnemo run` against the fake Discord (gateway and REST); the
//!   call is the `POST /channels/{id}/messages` of the answer's first
//!   message, timed when the fake receives it.
//!
//! The model's first byte is when the fake model writes the first text
//! frame of the stream. Both clocks are this process's, so the difference
//! is what mnemo adds: SSE decoding, the tool loop's round, the watch to
//! the live reply, rendering and the platform client up to the request.
//! A custom harness, not criterion: the quantity is a latency distribution
//! across a real process boundary, not a function's time in a loop.
//!
//! `cargo bench --bench first_text` measures 200 turns per channel (after
//! 10 warm-up turns); without `--bench` (CI's `cargo test --benches`) 3
//! turns each, so the benchmark cannot rot or hang (every wait is bounded).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use mnemo_testkit::discord::FakeDiscord;
use mnemo_testkit::model::FakeModel;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// One line, so the console's end of answer is its line break; sent by the
/// fake model as one delta, so no turn waits for the platform's edit pace.
const ANSWER: &str = "Sencha is grassy and gyokuro is shaded; both keep well in a tin.";
const TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.fake.bench-bot-token";
const DM_CHANNEL: &str = "1200000000000000001";
/// The longest any single wait may take before the run fails.
const BOUND: Duration = Duration::from_secs(60);

struct Size {
    warm_up: usize,
    turns: usize,
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let size = match full {
        true => Size {
            warm_up: 10,
            turns: 200,
        },
        false => Size { warm_up: 1, turns: 3 },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        report("console", &console(&size).await);
        report("discord", &discord(&size).await);
    });
}

/// Prints the distribution of `took` (one per turn).
fn report(channel: &str, took: &[Duration]) {
    let mut ms: Vec<f64> = took.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    println!(
        "first_text/{channel}: {} turns, p50 {:.2} ms, p99 {:.2} ms, min {:.2} ms, max {:.2} ms",
        ms.len(),
        at(0.50),
        at(0.99),
        ms[0],
        ms[ms.len() - 1]
    );
}

/// `config.json` in `dir`: the fake model, `channels` as given, and no
/// per-user rate limit (one user asks hundreds of questions in a row, as
/// `mnemo bench` does). Memory settings are the defaults (fsync on).
fn write_config(dir: &Path, model_url: &str, channels: Value) -> std::path::PathBuf {
    let config = json!({
        "stateDir": dir.join("state"),
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_BENCH_KEY",
                   "model": "fake-1", "timeoutSecs": 30, "maxRetries": 0 },
        "channels": channels,
        "limits": { "userMessagesPerMinute": 0 },
    });
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    path
}

/// The real binary with a clean environment.
fn mnemo(config: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    cmd.arg("--config")
        .arg(config)
        .env_clear()
        .env("HOME", home)
        .env("USER", "bench")
        .env("MNEMO_BENCH_KEY", "sk-bench-not-a-secret")
        .stderr(Stdio::null());
    cmd
}

/// The model's first text of streamed reply `n`, once it was written.
async fn model_first_text(model: &FakeModel, n: usize) -> Instant {
    let started = Instant::now();
    loop {
        if let Some(at) = model.first_text_at.lock().expect("lock").get(n) {
            return *at;
        }
        assert!(started.elapsed() < BOUND, "the model was never asked for reply {n}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Console: one question per turn on stdin; the first bytes of each answer
/// on stdout are its first text, its line break its end.
async fn console(size: &Size) -> Vec<Duration> {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(ANSWER));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &model_url, json!({ "console": { "enabled": true } }));
    let mut child = mnemo(&config, dir.path())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("mnemo chat starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let mut took = Vec::new();
    for turn in 0..size.warm_up + size.turns {
        stdin
            .write_all(format!("question {turn}\n").as_bytes())
            .expect("write a question");
        let mut first = None;
        let mut printed = Vec::new();
        while !printed.ends_with(b"\n") {
            let (at, bytes) = tokio::time::timeout(BOUND, rx.recv())
                .await
                .expect("the console answers within the bound")
                .expect("mnemo chat still running");
            first.get_or_insert(at);
            printed.extend(bytes);
        }
        assert!(printed.starts_with(b"Sencha"), "{}", String::from_utf8_lossy(&printed));
        let model_at = model_first_text(&model, turn).await;
        let shown = first.expect("the answer was printed");
        if turn >= size.warm_up {
            took.push(shown.saturating_duration_since(model_at));
        }
    }
    drop(stdin);
    let _ = child.wait();
    let _ = reader.join();
    took
}

/// A DM from Alice as the Discord gateway delivers it.
fn dm(id: u64, text: &str) -> Value {
    let path = format!("{}/channels/tests/discord/fixtures/dm.json", env!("CARGO_MANIFEST_DIR"));
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    m["id"] = json!(id.to_string());
    m["content"] = json!(text);
    m["timestamp"] = json!(chrono::Utc::now().to_rfc3339());
    m
}

/// Discord: one DM per turn through the gateway; the answer's `POST` to
/// the DM channel is its first text.
async fn discord(size: &Size) -> Vec<Duration> {
    let (model, model_url) = FakeModel::start().await;
    model.answer_with(Some(ANSWER));
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let channels = json!({
        "console": { "enabled": false },
        // No hold (issue 40): the first words go out the moment they come, the path measured here.
        "discord": { "enabled": true, "tokenEnv": "MNEMO_BENCH_DISCORD_TOKEN", "apiUrl": fake.url(), "streamHoldMs": 0 }
    });
    let config = write_config(dir.path(), &model_url, channels);
    let access = mnemo_sessions::Layout::new(dir.path().join("state"), "discord").access_path();
    std::fs::create_dir_all(access.parent().expect("a folder")).expect("state folder");
    std::fs::write(access, br#"{"dmPolicy": "open"}"#).expect("access.json");
    let mut child: Child = mnemo(&config, dir.path())
        .arg("run")
        .env("MNEMO_BENCH_DISCORD_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("mnemo run starts");
    tokio::time::timeout(BOUND, fake.identify())
        .await
        .expect("mnemo connects to the gateway");
    let mut took = Vec::new();
    for turn in 0..size.warm_up + size.turns {
        fake.dispatch(
            "MESSAGE_CREATE",
            dm(1_300_000_000_000_000_100 + turn as u64, "which tea?"),
        );
        let posts = fake.channel_messages(DM_CHANNEL, turn + 1).await;
        let post = &posts[turn];
        assert!(post.content().starts_with("Sencha"), "{}", post.content());
        let model_at = model_first_text(&model, turn).await;
        if turn >= size.warm_up {
            took.push(post.at.saturating_duration_since(model_at));
        }
    }
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let _ = child.wait();
    took
}
