//! A scriptable HTTP server on 127.0.0.1:0 that records every request it
//! gets and answers from a script, for testing backends at the network edge.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use mnemo::model::ModelConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, Value),
    /// A status, extra headers and a JSON body.
    JsonWithHeaders(u16, Vec<(&'static str, &'static str)>, Value),
    /// An SSE body made of these chunks, after which the body ends cleanly.
    Sse(Vec<String>),
    /// An SSE body made of these chunks, after which the connection breaks.
    SseThenBreak(Vec<String>),
    /// Nothing until this long has passed, then `{}`.
    Slow(Duration),
    /// An SSE body made of these chunks, after which the server keeps the
    /// connection open with a keep-alive comment (`: ping`) every 100 ms,
    /// forever, as some gateways do.
    SseThenKeepAlive(Vec<String>),
    /// An SSE body made of these chunks, then `more` again every 100 ms,
    /// forever: a model writing words without end.
    SseEndless(Vec<String>, String),
}

/// What the server received.
#[derive(Clone, Debug)]
pub struct Captured {
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Vec<Reply>>,
    seen: Arc<Mutex<Vec<Captured>>>,
}

pub struct FakeServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Captured>>>,
}

impl FakeServer {
    /// Request `i` gets `script[i]`; requests past its end get its last reply.
    pub async fn start(script: Vec<Reply>) -> FakeServer {
        assert!(!script.is_empty(), "a fake server needs at least one reply");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            script: Arc::new(script),
            seen: seen.clone(),
        };
        let app = axum::Router::new().fallback(answer).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeServer { addr, seen }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.seen.lock().unwrap().clone()
    }

    /// An openai config pointing here, with fast retries and timeouts.
    pub fn openai(&self, extra: Value) -> ModelConfig {
        self.config("openai", "/v1", extra)
    }

    /// An anthropic config pointing here.
    pub fn anthropic(&self, extra: Value) -> ModelConfig {
        self.config("anthropic", "", extra)
    }

    fn config(&self, provider: &str, path: &str, extra: Value) -> ModelConfig {
        let mut cfg = serde_json::json!({
            "provider": provider,
            "baseUrl": self.url(path),
            "model": "test-model",
            "timeoutSecs": 5,
            "maxRetries": 0,
        });
        for (key, value) in extra.as_object().cloned().unwrap_or_default() {
            cfg[key] = value;
        }
        serde_json::from_value(cfg).unwrap()
    }
}

/// An address nothing listens on.
pub async fn closed_port_url(path: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}{path}")
}

/// An environment lookup over fixed pairs; the process env is never touched.
pub fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// SSE `data:` events, one chunk each.
pub fn sse_data(events: &[&str]) -> Vec<String> {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

async fn answer(State(shared): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let index = {
        let mut seen = shared.seen.lock().unwrap();
        seen.push(Captured {
            uri: uri.to_string(),
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
        seen.len() - 1
    };
    let reply = shared.script[index.min(shared.script.len() - 1)].clone();
    match reply {
        Reply::Json(status, body) => json(status, &[], body),
        Reply::JsonWithHeaders(status, headers, body) => json(status, &headers, body),
        Reply::Sse(chunks) => sse(chunks, false),
        Reply::SseThenBreak(chunks) => sse(chunks, true),
        Reply::SseThenKeepAlive(chunks) => endless(chunks, ": ping\n\n".into()),
        Reply::SseEndless(chunks, more) => endless(chunks, more),
        Reply::Slow(delay) => {
            tokio::time::sleep(delay).await;
            json(200, &[], serde_json::json!({}))
        }
    }
}

fn json(status: u16, headers: &[(&str, &str)], body: Value) -> Response {
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json");
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(Body::from(body.to_string())).unwrap()
}

fn sse(chunks: Vec<String>, then_break: bool) -> Response {
    use futures_util::StreamExt;
    let items = chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
    let mut body = futures_util::stream::iter(items).boxed();
    if then_break {
        // The pause lets the head and the chunks go out first, so the break
        // lands mid-body rather than before the response starts.
        let broken = futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err(std::io::Error::other("connection lost"))
        });
        body = body.chain(broken).boxed();
    }
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

/// `chunks`, then `again` every 100 ms until the client goes away.
fn endless(chunks: Vec<String>, again: String) -> Response {
    use futures_util::StreamExt;
    let head = futures_util::stream::iter(chunks);
    let tail = futures_util::stream::unfold(again, |again| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Some((again.clone(), again))
    });
    let body = head.chain(tail).map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}
