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

/// One scripted round of tool calls: (tool name, arguments) each.
pub type ToolRound = Vec<(String, Value)>;

/// A fake `/v1/chat/completions` (OpenAI-compatible) and `/v1/messages`
/// (Anthropic). It answers `echo: <last user message>` (plus ` | tools: …`
/// with this turn's tool results), records every request body, and counts
/// calls in flight. With [`FakeModel::script_tools`] it calls tools the way
/// the real APIs do: only when the request offers tools and does not say
/// `tool_choice: none`, one scripted round per request; and like them it
/// refuses (400) a conversation whose tool results do not answer the
/// calls just before them.
#[derive(Clone, Default)]
pub struct FakeModel {
    /// Rounds of tool calls still to make: each a list of (tool, arguments).
    pub tool_script: Arc<Mutex<std::collections::VecDeque<ToolRound>>>,
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
            .route("/v1/messages", post(anthropic_messages))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, url)
    }

    /// Queues rounds of tool calls: `[[("memory_search", {"query": "tea"})], …]`;
    /// an empty round makes that request answer in text.
    pub fn script_tools(&self, rounds: Vec<Vec<(&str, Value)>>) {
        let mut script = self.tool_script.lock().unwrap();
        for round in rounds {
            script.push_back(round.into_iter().map(|(n, a)| (n.to_string(), a)).collect());
        }
    }

    /// The next scripted round, if the request lets the model call tools.
    fn next_tool_round(&self, body: &Value) -> Option<ToolRound> {
        let offered = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let none = body["tool_choice"] == "none" || body["tool_choice"]["type"] == "none";
        if !offered || none {
            return None;
        }
        // An empty round stands for "answer in text this time".
        self.tool_script
            .lock()
            .unwrap()
            .pop_front()
            .filter(|round| !round.is_empty())
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

/// The tool results after the last user turn, on one line (for the echo).
fn tool_echo(results: Vec<String>) -> String {
    if results.is_empty() {
        return String::new();
    }
    format!(" | tools: {}", results.join(" / ").replace('\n', " / "))
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}

/// OpenAI's rule: each `role: tool` message answers a call of the assistant
/// message before it, and every call gets its answer.
fn openai_tool_order(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
                let Some(at) = open.iter().position(|o| *o == id) else {
                    return Err(format!("tool message {id:?} answers no preceding tool call"));
                };
                open.remove(at);
            }
            _ if !open.is_empty() => return Err(format!("tool calls {open:?} have no tool messages")),
            Some("assistant") => {
                open = m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| c["id"].as_str().unwrap_or_default().to_string())
                    .collect();
            }
            _ => {}
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("tool calls {open:?} have no tool messages"))
    }
}

async fn complete(State(fake): State<FakeModel>, Json(body): Json<Value>) -> Response {
    fake.requests.lock().unwrap().push(body.clone());
    if fake.down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response();
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if let Err(e) = openai_tool_order(&messages) {
        return bad_request(e);
    }
    if let Some(round) = fake.next_tool_round(&body) {
        let turn = messages.len();
        let calls: Vec<Value> = round
            .iter()
            .enumerate()
            .map(|(i, (name, args))| json!({"id": format!("call_{turn}_{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
            .collect();
        return Json(json!({
            "id": "chatcmpl-test", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }))
        .into_response();
    }
    let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    let results: Vec<String> = messages[last_user..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    fake.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let delay = *fake.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    fake.in_flight.fetch_sub(1, Ordering::SeqCst);
    let content = if body.get("response_format").is_some() {
        json!({"summary": "the user chatted", "facts": []}).to_string()
    } else {
        format!("echo: {}{}", last_user_message(&body), tool_echo(results))
    };
    Json(json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
    .into_response()
}

/// Anthropic's rules: turns alternate starting with the user; a user turn
/// after an assistant's `tool_use` blocks holds a `tool_result` for each,
/// and no `tool_result` answers anything else.
fn anthropic_order(messages: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if m["role"] != want {
            return Err(format!(
                "messages: roles must alternate starting with user (message {i})"
            ));
        }
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let ids = |kind: &str, field: &str| -> Vec<String> {
            blocks
                .iter()
                .filter(|b| b["type"] == kind)
                .map(|b| b[field].as_str().unwrap_or_default().to_string())
                .collect()
        };
        if want == "user" {
            let mut answered = ids("tool_result", "tool_use_id");
            answered.sort();
            open.sort();
            if answered != open {
                return Err(format!(
                    "tool_result blocks {answered:?} do not answer tool_use blocks {open:?}"
                ));
            }
            open.clear();
        } else {
            open = ids("tool_use", "id");
        }
    }
    Ok(())
}

async fn anthropic_messages(State(fake): State<FakeModel>, Json(body): Json<Value>) -> Response {
    fake.requests.lock().unwrap().push(body.clone());
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if body["max_tokens"].as_u64().is_none() {
        return bad_request("max_tokens: field required".into());
    }
    if let Err(e) = anthropic_order(&messages) {
        return bad_request(e);
    }
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    if let Some(round) = fake.next_tool_round(&body) {
        let turn = messages.len();
        let blocks: Vec<Value> = round
            .iter()
            .enumerate()
            .map(|(i, (name, input))| json!({"type": "tool_use", "id": format!("toolu_{turn}_{i}"), "name": name, "input": input}))
            .collect();
        return Json(
            json!({"id": "msg_test", "type": "message", "role": "assistant", "model": "fake-1",
            "content": blocks, "stop_reason": "tool_use", "usage": usage}),
        )
        .into_response();
    }
    let last_text = messages
        .iter()
        .rev()
        .find_map(|m| m["content"].as_str().filter(|_| m["role"] == "user"))
        .unwrap_or_default();
    let last_user = messages.iter().rposition(|m| m["content"].is_string()).unwrap_or(0);
    let results: Vec<String> = messages[last_user..]
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["content"].as_str().map(str::to_string))
        .collect();
    let text = format!("echo: {last_text}{}", tool_echo(results));
    Json(
        json!({"id": "msg_test", "type": "message", "role": "assistant", "model": "fake-1",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": usage}),
    )
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
        max_tool_rounds: config.tool_rounds() as usize,
        model: chat,
    }
}
