//! The broker under test: the real `Pipeline` (one turn at a time, awaited,
//! for step-by-step specs) or the real `App` (served and drained, for
//! batches), with the fake channel and fake model of `tests/support`, a
//! capture of every log line, and the real `mnemo` binary for `access`.

use crate::support::{FakeChannel, FakeModel, app_parts};
use mnemo::app::ChannelMemory;
use mnemo::config::LimitsConfig;
use mnemo::pipeline::Pipeline;
use mnemo_channels::{Channel, ChatKind, Inbound, Outbound, OutboundBody};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::{Layout, Record, SafeName};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The channel every spec runs on: a platform channel, not the console.
pub const CH: &str = "fake";

/// A broker with one fake platform channel, driven one message at a time.
pub struct Broker {
    pub state: tempfile::TempDir,
    pub model: FakeModel,
    pub channel: Arc<FakeChannel>,
    pipeline: Pipeline,
    url: String,
    limits: LimitsConfig,
    /// How often the pipeline looks at `access.json` (see `start`).
    recheck: Duration,
}

/// A real pipeline over the state folder `root`, the model at `url`,
/// looking at `access.json` at most once per `recheck`.
fn pipeline(root: &Path, url: &str, limits: LimitsConfig, channel: &Arc<FakeChannel>, recheck: Duration) -> Pipeline {
    let parts = Arc::new(app_parts(root, url, limits));
    let memory = ChannelMemory::open(root, CH, &LockRegistry::new(), chrono_tz::UTC, parts.summarizer.clone()).unwrap();
    let memories = Arc::new(HashMap::from([(CH.to_string(), memory)]));
    let senders = HashMap::from([(CH.to_string(), channel.clone() as Arc<dyn Channel>)]);
    Pipeline::new(parts, memories, senders).with_access_recheck(recheck)
}

impl Broker {
    /// These specs change the rules between two messages and expect the
    /// next message to see the change, so this broker looks at
    /// `access.json` on every message; [`Broker::start_with_recheck`] keeps
    /// the product's interval.
    pub async fn start(limits: LimitsConfig) -> Broker {
        Self::start_with_recheck(limits, Duration::ZERO).await
    }

    /// A broker that looks at `access.json` at most once per `recheck`.
    pub async fn start_with_recheck(limits: LimitsConfig, recheck: Duration) -> Broker {
        let (model, url) = FakeModel::start().await;
        let state = tempfile::tempdir().unwrap();
        let (channel, _inbox) = FakeChannel::new(CH);
        let pipeline = pipeline(state.path(), &url, limits.clone(), &channel, recheck);
        Broker {
            state,
            model,
            channel,
            pipeline,
            url,
            limits,
            recheck,
        }
    }

    /// The broker after a restart: the same state folder, a new process's
    /// view of it (nothing carried over but the files).
    pub fn restart(&mut self) {
        self.pipeline = pipeline(
            self.state.path(),
            &self.url,
            self.limits.clone(),
            &self.channel,
            self.recheck,
        );
    }

    /// Runs one whole turn and returns what the sender was sent.
    pub async fn say(&self, message: Inbound) -> Vec<String> {
        let before = self.channel.sent().len();
        self.pipeline.handle(message).await;
        texts(&self.channel.sent()[before..])
    }

    pub fn root(&self) -> &Path {
        self.state.path()
    }

    pub fn access_path(&self) -> PathBuf {
        Layout::new(self.root(), CH).access_path()
    }

    pub fn write_access(&self, rules: serde_json::Value) {
        write_access(self.root(), rules);
    }

    pub fn stm(&self, user: &str) -> Vec<Record> {
        stm(self.root(), user)
    }

    /// `mnemo --state-dir <state> access <args>`: (success, stdout + stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        mnemo_access(self.root(), args)
    }
}

pub fn write_access(root: &Path, rules: serde_json::Value) {
    let path = Layout::new(root, CH).access_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec_pretty(&rules).unwrap()).unwrap();
}

pub fn stm(root: &Path, user: &str) -> Vec<Record> {
    let path = Layout::new(root, CH).messages_path(&SafeName::of(user));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[allow(
    clippy::disallowed_methods,
    reason = "the child process gets the real PATH to find its tools"
)]
pub fn mnemo_access(state: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .arg("--state-dir")
        .arg(state)
        .arg("access")
        .args(args)
        .current_dir(state)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", state)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

pub fn texts(sent: &[Outbound]) -> Vec<String> {
    sent.iter()
        .map(|o| match &o.body {
            OutboundBody::Text(t) => t.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// A direct message.
pub fn dm(user: &str, msg_id: &str, text: &str) -> Inbound {
    crate::support::dm(CH, user, msg_id, text)
}

/// A message in group `chat`, mentioning the bot or not.
pub fn group(chat: &str, user: &str, msg_id: &str, text: &str, mentioned: bool) -> Inbound {
    Inbound {
        chat_id: chat.into(),
        chat_kind: ChatKind::Group,
        addressed: mentioned,
        ..dm(user, msg_id, text)
    }
}

/// The pairing code in a reply.
pub fn code_in(reply: &str) -> String {
    let after = reply
        .split("pairing code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {reply:?}"));
    after.chars().take_while(|c| c.is_ascii_alphanumeric()).collect()
}

/// Every file under `root`, with its bytes.
pub fn all_files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Every log line of this test process (all levels the broker and
/// `mnemo-sessions` emit, JSON, as the log files hold them).
pub fn logs() -> String {
    String::from_utf8_lossy(&capture().lock().unwrap()).into_owned()
}

fn capture() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_env_filter("info,mnemo=trace,mnemo_sessions=trace,mnemo_channels=trace")
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buffer
    })
}

/// Installs the log capture; call first in every spec that reads logs.
pub fn capture_logs() {
    capture();
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
