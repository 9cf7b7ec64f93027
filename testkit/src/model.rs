//! A fake OpenAI-compatible (`/v1/chat/completions`) and Anthropic
//! (`/v1/messages`) model server on 127.0.0.1 for the broker's end-to-end
//! tests: answers `echo: <last user message>` (or a summary when JSON is
//! asked for), records every request, counts calls in flight, calls tools
//! when scripted to, and can be slowed down or taken down (503) by the test.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A fake `/v1/chat/completions` (OpenAI-compatible) and `/v1/messages`
/// (Anthropic). It answers `echo: <last user message>` (plus ` | tools: …`
/// with this turn's tool results), records every request body, and counts
/// calls in flight. With [`FakeModel::script_tools`] it calls tools the way
/// the real APIs do: only when the request offers tools and does not say
/// `tool_choice: none`, one scripted round per request; and like them it
/// refuses (400) a conversation whose tool results do not answer the
/// calls just before them.
/// One scripted round of tool calls: (tool, arguments) each.
pub type ToolRound = Vec<(String, Value)>;

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
