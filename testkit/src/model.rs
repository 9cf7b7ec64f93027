//! A fake OpenAI-compatible model server on 127.0.0.1 (`/v1/chat/completions`)
//! for the broker's end-to-end tests: answers `echo: <last user message>` (or
//! a summary when JSON is asked for), records every request, counts calls in
//! flight, and can be slowed down or taken down (503) by the test.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
