//! What the broker's end-to-end tests share: the test kit's fakes at the
//! network edge (re-exported from `mnemo-testkit`: the fake model server,
//! `eventually`), a fake channel that stands in for a platform, and helpers
//! that run the real binary or build the real `App`. Everything between the
//! fakes is the real broker.

#![allow(dead_code)] // each test file uses a different part of the kit

#[allow(unused_imports, reason = "each test file uses a different part of the kit")]
pub use mnemo_testkit::{
    eventually,
    model::{FakeModel, last_user_message, request_text},
};

use async_trait::async_trait;
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound, Shutdown};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A platform stand-in: the test pushes [`Inbound`]s in and reads the
/// broker's [`Outbound`]s back.
pub struct FakeChannel {
    name: String,
    inbox: tokio::sync::Mutex<Option<mpsc::Receiver<Inbound>>>,
    pub sent: Arc<Mutex<Vec<Outbound>>>,
    /// Handed to the broker a moment after the shutdown signal, like a
    /// platform event that arrived as the signal fired.
    on_stop: Mutex<Option<Inbound>>,
}

impl FakeChannel {
    pub fn new(name: &str) -> (Arc<FakeChannel>, mpsc::Sender<Inbound>) {
        let (tx, rx) = mpsc::channel(10_000);
        let channel = FakeChannel {
            name: name.into(),
            inbox: tokio::sync::Mutex::new(Some(rx)),
            sent: Default::default(),
            on_stop: Mutex::new(None),
        };
        (Arc::new(channel), tx)
    }

    pub fn sent(&self) -> Vec<Outbound> {
        self.sent.lock().unwrap().clone()
    }

    /// Makes the channel hand `message` over just after the shutdown signal.
    pub fn hand_over_on_stop(&self, message: Inbound) {
        *self.on_stop.lock().unwrap() = Some(message);
    }
}

#[async_trait]
impl Channel for FakeChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn max_message_chars(&self) -> usize {
        4000
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let Some(mut rx) = self.inbox.lock().await.take() else {
            return Ok(());
        };
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => inbox.send(m).await.map_err(|_| ChannelError::InboxClosed { channel: self.name.clone() })?,
                    None => return Ok(()),
                },
                _ = shutdown.changed() => {
                    let late = self.on_stop.lock().unwrap().take();
                    if let Some(m) = late {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        inbox.send(m).await.map_err(|_| ChannelError::InboxClosed { channel: self.name.clone() })?;
                    }
                    return Ok(());
                }
            }
        }
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        self.sent.lock().unwrap().push(out);
        Ok(())
    }
}

/// A direct message from `user` on the fake channel.
pub fn dm(channel: &str, user: &str, msg_id: &str, text: &str) -> Inbound {
    Inbound {
        channel: channel.into(),
        user_id: user.into(),
        user_name: Some(user.into()),
        chat_id: format!("dm-{user}"),
        chat_kind: ChatKind::Direct,
        thread_id: None,
        msg_id: msg_id.into(),
        text: text.into(),
        ts: chrono::Utc::now(),
        addressed: true,
        interaction: None,
        attachments: Vec::new(),
    }
}

/// Writes a `config.json` for the binary, pointing the model at `model_url`.
pub fn write_config(dir: &std::path::Path, model_url: &str, extra_model: Value) -> std::path::PathBuf {
    let mut model = json!({
        "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
        "model": "fake-1", "timeoutSecs": 5, "maxRetries": 0
    });
    if let (Some(m), Some(extra)) = (model.as_object_mut(), extra_model.as_object()) {
        m.extend(extra.clone());
    }
    let config = json!({ "stateDir": dir.join("state"), "model": model });
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

/// The real `mnemo` binary with a clean environment: `HOME` and `USER`
/// pinned, the test key set (under the name `write_config` uses), stdin
/// closed unless the test pipes it.
#[allow(
    clippy::disallowed_methods,
    reason = "the child process gets the real PATH to find its tools"
)]
pub fn mnemo(config: &std::path::Path, home: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mnemo"));
    cmd.arg("--config")
        .arg(config)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("USER", "ada")
        .env("MNEMO_TEST_KEY", "sk-test-not-a-secret")
        .stdin(std::process::Stdio::null());
    cmd
}

/// Runs `cmd` with `input` on its stdin (closed after it) and collects
/// stdout and stderr.
pub fn with_input(mut cmd: std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A child that exits before reading its input (a start refused for its
    // config, say) closes the pipe: what it said is the result, not the
    // broken pipe.
    match child.stdin.take().unwrap().write_all(input) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("writing the child's stdin: {e}"),
    }
    child.wait_with_output().unwrap()
}

/// Opens `channel` to everyone in direct messages and opts `groups` in
/// (mention required): for specs about something other than access control,
/// which tests/access.rs specifies.
pub fn open_access(state: &std::path::Path, channel: &str, groups: &[&str]) {
    let groups: serde_json::Map<String, Value> = groups.iter().map(|g| (g.to_string(), json!({}))).collect();
    let path = mnemo_sessions::Layout::new(state, channel).access_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let rules = json!({ "dmPolicy": "open", "groups": groups });
    std::fs::write(path, serde_json::to_vec_pretty(&rules).unwrap()).unwrap();
}

/// Sends SIGTERM to a running `mnemo` (as systemd or `kill` would).
pub fn sigterm(pid: u32) {
    let sent = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -TERM {pid} failed");
}

/// The parts of a real `App` whose model is the fake server at `url`.
pub fn app_parts(state: &std::path::Path, url: &str, limits: mnemo::config::LimitsConfig) -> mnemo::app::AppParts {
    let config: mnemo::model::config::ModelConfig = serde_json::from_value(json!({
        "provider": "openai", "baseUrl": url, "apiKeyEnv": "UNUSED_KEY", "model": "fake-1",
        "timeoutSecs": 5, "maxRetries": 0
    }))
    .unwrap();
    let env = |_: &str| Some("sk-test".to_string());
    let chat = mnemo::model::build(&config, &env).unwrap();
    mnemo::app::AppParts {
        state_root: state.to_path_buf(),
        reminders: Default::default(),
        system_prompt: "You are a test.".into(),
        tz: chrono_tz::UTC,
        limits,
        model_timeout: Duration::from_secs(5),
        summarizer: Arc::new(mnemo::model::ModelSummarizer::new(chat.clone())),
        max_tool_rounds: config.tool_rounds() as usize,
        model: chat,
        streaming: Default::default(),
        store: None,
        attachments: Default::default(),
    }
}

/// The records of an STM log as far as they are written: a running bot may
/// be writing a line while this reads, so a last line without its newline
/// is not taken yet. Every complete line must be a whole record.
pub fn stm_written(path: &std::path::Path) -> Vec<mnemo_sessions::Record> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).expect("every complete STM line is a whole record"))
        .collect()
}
