//! A fake OpenAI-compatible (`/v1/chat/completions`) and Anthropic
//! (`/v1/messages`) model server on 127.0.0.1 for the broker's end-to-end
//! tests: answers `echo: <last user message>` (or a summary when JSON is
//! asked for, scripted by words of the request if the test wants facts), records every request, counts calls in flight, calls tools
//! when scripted to, and can be slowed down or taken down (503) by the test.
//! A request with `stream: true` is answered as the real APIs stream (SSE:
//! OpenAI `chat.completion.chunk`s with `tool_calls` deltas and a usage
//! chunk when `stream_options.include_usage` asks; Anthropic's
//! `message_start` … `message_stop` with `tool_use` blocks), by default in
//! one piece; [`FakeModel::stream_slowly`] writes it piece by piece and
//! [`FakeModel::break_stream_after`] drops the connection mid-reply.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod parts;
pub use parts::{content_text, request_images};

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
    /// Summaries to give instead of the default: (words the request must
    /// hold, the reply's content), the latest added tried first.
    pub summaries: Arc<Mutex<Vec<(String, String)>>>,
    /// The answer text instead of the echo, when set.
    pub answer: Arc<Mutex<Option<String>>>,
    pub stream_plan: Arc<Mutex<StreamPlan>>,
    /// When each streamed reply's first text was written, in order.
    pub first_text_at: Arc<Mutex<Vec<std::time::Instant>>>,
    /// Streamed replies written to their end marker.
    pub streams_done: Arc<AtomicUsize>,
    /// Opened by [`FakeModel::release_streams`]: a held stream goes on.
    pub gate: Arc<tokio::sync::watch::Sender<bool>>,
}

/// How streamed replies are written.
#[derive(Clone, Copy, Debug)]
pub struct StreamPlan {
    /// Characters per text delta.
    pub piece_chars: usize,
    /// The pause before each delta after the first.
    pub every: Duration,
    /// After this many text deltas the connection is dropped, without the
    /// end marker.
    pub break_after: Option<usize>,
    /// After this many text deltas the stream waits for
    /// [`FakeModel::release_streams`] (so a test can look mid-reply).
    pub hold_after: Option<usize>,
}

impl Default for StreamPlan {
    fn default() -> Self {
        StreamPlan {
            piece_chars: usize::MAX,
            every: Duration::ZERO,
            break_after: None,
            hold_after: None,
        }
    }
}

/// What one reply says: text, or calls of (id, tool, arguments).
enum Said {
    Text(String),
    Calls(Vec<(String, String, Value)>),
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
        // Each SSE frame leaves at once, as a streaming API sends it (no
        // Nagle hold of a frame until the client's delayed ACK, ~40 ms).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
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

    /// Answers a summarizer request (JSON asked for) whose text holds
    /// `words` with `content`, as a model would answer: any text, well
    /// formed or not. Rules added later are tried first.
    pub fn summarize_when(&self, words: &str, content: impl Into<String>) {
        self.summaries.lock().unwrap().push((words.to_string(), content.into()));
    }

    fn summary_for(&self, body: &Value) -> String {
        let text = request_text(body);
        let rules = self.summaries.lock().unwrap();
        rules
            .iter()
            .rev()
            .find(|(words, _)| text.contains(words.as_str()))
            .map(|(_, content)| content.clone())
            .unwrap_or_else(|| json!({"summary": "the user chatted", "facts": []}).to_string())
    }

    /// Streams replies `piece_chars` characters at a time, `every` apart.
    pub fn stream_slowly(&self, piece_chars: usize, every: Duration) {
        let mut plan = self.stream_plan.lock().unwrap();
        plan.piece_chars = piece_chars.max(1);
        plan.every = every;
    }

    /// Drops each streamed reply's connection after `pieces` text deltas.
    pub fn break_stream_after(&self, pieces: Option<usize>) {
        self.stream_plan.lock().unwrap().break_after = pieces;
    }

    /// Holds each streamed reply after `pieces` text deltas until
    /// [`FakeModel::release_streams`].
    pub fn hold_streams_after(&self, pieces: usize) {
        self.gate.send_replace(false);
        self.stream_plan.lock().unwrap().hold_after = Some(pieces);
    }

    /// Lets held streams go on.
    pub fn release_streams(&self) {
        self.gate.send_replace(true);
    }

    /// Answers `text` instead of the echo (`None`: the echo again).
    pub fn answer_with(&self, text: Option<&str>) {
        *self.answer.lock().unwrap() = text.map(str::to_string);
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

/// The last user message of a request (its text parts, when it has
/// image parts too).
pub fn last_user_message(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|x| x["role"] == "user"))
        .and_then(|x| content_text(&x["content"]))
        .unwrap_or_default()
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
    if let Err(e) = request_images(&body) {
        fake.requests.lock().unwrap().push(body.clone());
        return bad_request(e);
    }
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
        if body["stream"] == true {
            let calls = round
                .into_iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("call_{turn}_{i}"), name, args))
                .collect();
            return fake.openai_sse(Said::Calls(calls), &body);
        }
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
        fake.summary_for(&body)
    } else {
        fake.answer_text(format!("echo: {}{}", last_user_message(&body), tool_echo(results)))
    };
    if body["stream"] == true {
        return fake.openai_sse(Said::Text(content), &body);
    }
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
    if let Err(e) = request_images(&body) {
        return bad_request(e);
    }
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    if let Some(round) = fake.next_tool_round(&body) {
        let turn = messages.len();
        if body["stream"] == true {
            let calls = round
                .into_iter()
                .enumerate()
                .map(|(i, (name, input))| (format!("toolu_{turn}_{i}"), name, input))
                .collect();
            return fake.anthropic_sse(Said::Calls(calls));
        }
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
        .filter(|m| m["role"] == "user")
        .find_map(|m| content_text(&m["content"]))
        .unwrap_or_default();
    let last_user = messages
        .iter()
        .rposition(|m| m["role"] == "user" && content_text(&m["content"]).is_some())
        .unwrap_or(0);
    let results: Vec<String> = messages[last_user..]
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["content"].as_str().map(str::to_string))
        .collect();
    let text = fake.answer_text(format!("echo: {last_text}{}", tool_echo(results)));
    if body["stream"] == true {
        return fake.anthropic_sse(Said::Text(text));
    }
    Json(
        json!({"id": "msg_test", "type": "message", "role": "assistant", "model": "fake-1",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": usage}),
    )
    .into_response()
}

impl FakeModel {
    fn answer_text(&self, echo: String) -> String {
        self.answer.lock().unwrap().clone().unwrap_or(echo)
    }

    /// `said` as OpenAI streams it.
    fn openai_sse(&self, said: Said, body: &Value) -> Response {
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let mut head = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        let mut tail = Vec::new();
        let (pieces, finish) = match said {
            Said::Text(text) => (self.pieces(&text), "stop"),
            Said::Calls(calls) => {
                for (i, (id, name, args)) in calls.into_iter().enumerate() {
                    let args = args.to_string();
                    let (a, b) = args.split_at(args.len() / 2);
                    head.push(chunk(json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}), None));
                    head.push(chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}),
                        None,
                    ));
                }
                (Vec::new(), "tool_calls")
            }
        };
        let texts: Vec<Value> = pieces.into_iter().map(|p| chunk(json!({"content": p}), None)).collect();
        tail.push(chunk(json!({}), Some(finish)));
        if body["stream_options"]["include_usage"] == true {
            tail.push(
                json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
            );
        }
        let frame = |v: Value| format!("data: {v}\n\n");
        let mut tail: Vec<String> = tail.into_iter().map(frame).collect();
        tail.push("data: [DONE]\n\n".into());
        self.sse(
            head.into_iter().map(frame).collect(),
            texts.into_iter().map(frame).collect(),
            tail,
        )
    }

    /// `said` as Anthropic streams it.
    fn anthropic_sse(&self, said: Said) -> Response {
        let frame = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap_or_default());
        let start = json!({"type": "message_start", "message": {"id": "msg_test", "type": "message", "role": "assistant",
            "model": "fake-1", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}});
        let mut head = vec![frame(start)];
        let mut texts = Vec::new();
        let mut tail = Vec::new();
        let stop = match said {
            Said::Text(text) => {
                head.push(frame(
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ));
                texts = self
                    .pieces(&text)
                    .into_iter()
                    .map(|p| frame(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})))
                    .collect();
                tail.push(frame(json!({"type": "content_block_stop", "index": 0})));
                "end_turn"
            }
            Said::Calls(calls) => {
                for (i, (id, name, input)) in calls.into_iter().enumerate() {
                    head.push(frame(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                    head.push(frame(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
                    head.push(frame(json!({"type": "content_block_stop", "index": i})));
                }
                "tool_use"
            }
        };
        tail.push(frame(
            json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}),
        ));
        tail.push(frame(json!({"type": "message_stop"})));
        self.sse(head, texts, tail)
    }

    /// `text` cut into the plan's pieces (on character boundaries).
    fn pieces(&self, text: &str) -> Vec<String> {
        let size = self.stream_plan.lock().unwrap().piece_chars;
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(size.min(chars.len().max(1)))
            .map(|c| c.iter().collect())
            .collect()
    }

    /// An SSE response: `head` at once, each of `texts` after the plan's
    /// pause (the connection dropped after `break_after` of them), `tail`.
    fn sse(&self, head: Vec<String>, texts: Vec<String>, tail: Vec<String>) -> Response {
        let plan = *self.stream_plan.lock().unwrap();
        let first_text_at = self.first_text_at.clone();
        let done = self.streams_done.clone();
        let mut gate = self.gate.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel::<String>(16);
        tokio::spawn(async move {
            for frame in head {
                let _ = tx.send(frame).await;
            }
            for (n, frame) in texts.into_iter().enumerate() {
                if plan.break_after == Some(n) {
                    return; // the connection drops: no end marker
                }
                if plan.hold_after == Some(n) {
                    let _ = gate.wait_for(|open| *open).await;
                }
                if n > 0 {
                    tokio::time::sleep(plan.every).await;
                } else {
                    first_text_at.lock().unwrap().push(std::time::Instant::now());
                }
                let _ = tx.send(frame).await;
            }
            for frame in tail {
                let _ = tx.send(frame).await;
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
        let body = futures_util::stream::unfold(rx, |mut rx| async move {
            let frame = rx.recv().await?;
            Some((Ok::<_, std::convert::Infallible>(frame), rx))
        });
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from_stream(body))
            .unwrap()
    }
}
