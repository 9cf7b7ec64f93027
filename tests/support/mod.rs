//! Test doubles at the network edge only: a fake OpenAI-compatible model
//! server on 127.0.0.1, and a fake channel that stands in for a platform.
//! Everything between them is the real broker.

#![allow(dead_code)] // each test file uses a different part of the kit

use async_trait::async_trait;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound, Shutdown};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A fake `/v1/chat/completions`. It answers `echo: <last user message>`,
/// records every request body, and counts calls in flight.
#[derive(Clone, Default)]
pub struct FakeModel {
    pub requests: Arc<Mutex<Vec<Value>>>,
    pub in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
    /// While true, every call answers 503.
    pub down: Arc<AtomicBool>,
    pub delay: Arc<Mutex<Duration>>,
}

impl FakeModel {
    /// Starts the server; returns it and its base URL (`http://127.0.0.1:N/v1`).
    pub async fn start() -> (FakeModel, String) {
        let fake = FakeModel::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, url)
    }

    pub fn set_delay(&self, d: Duration) {
        *self.delay.lock().unwrap() = d;
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// Chat requests only (summarizer calls ask for JSON output).
    pub fn chat_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.get("response_format").is_none())
            .collect()
    }
}

/// The text of every message in a request, in order, as one string.
pub fn request_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|x| x["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The last user message of a request.
pub fn last_user_message(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|x| x["role"] == "user"))
        .and_then(|x| x["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn complete(State(fake): State<FakeModel>, Json(body): Json<Value>) -> Response {
    fake.requests.lock().unwrap().push(body.clone());
    if fake.down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response();
    }
    let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    fake.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let delay = *fake.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    fake.in_flight.fetch_sub(1, Ordering::SeqCst);
    let content = if body.get("response_format").is_some() {
        json!({"summary": "the user chatted", "facts": []}).to_string()
    } else {
        format!("echo: {}", last_user_message(&body))
    };
    Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
    .into_response()
}

/// A platform stand-in: the test pushes [`Inbound`]s in and reads the
/// broker's [`Outbound`]s back.
pub struct FakeChannel {
    name: String,
    inbox: tokio::sync::Mutex<Option<mpsc::Receiver<Inbound>>>,
    pub sent: Arc<Mutex<Vec<Outbound>>>,
}

impl FakeChannel {
    pub fn new(name: &str) -> (Arc<FakeChannel>, mpsc::Sender<Inbound>) {
        let (tx, rx) = mpsc::channel(10_000);
        let channel = FakeChannel {
            name: name.into(),
            inbox: tokio::sync::Mutex::new(Some(rx)),
            sent: Default::default(),
        };
        (Arc::new(channel), tx)
    }

    pub fn sent(&self) -> Vec<Outbound> {
        self.sent.lock().unwrap().clone()
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
                _ = shutdown.changed() => return Ok(()),
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
    child.stdin.take().unwrap().write_all(input).unwrap();
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
        system_prompt: "You are a test.".into(),
        tz: chrono_tz::UTC,
        limits,
        model_timeout: Duration::from_secs(5),
        summarizer: Arc::new(mnemo::model::ModelSummarizer::new(chat.clone())),
        model: chat,
        streaming: Default::default(),
    }
}
