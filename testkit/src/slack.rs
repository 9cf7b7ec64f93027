//! A fake Slack on 127.0.0.1 for tests: the Web API methods the adapter
//! calls (recorded with their bodies; `chat.update` and `chat.delete`
//! refuse a message that does not exist with `message_not_found`, as
//! Slack does), a Socket Mode websocket that sends
//! envelopes and records acks (and, on request, sends an unacked envelope
//! again, as Slack does), an upload URL and `response_url` endpoints.
//! Shared by the channel-level tests and the binary's end-to-end tests
//! through the test kit.

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

mod files;
pub use files::SIGN_IN_PAGE;

pub const BOT_TOKEN: &str = "xoxb-test-bot-token";
pub const APP_TOKEN: &str = "xapp-test-app-token";
pub const BOT_USER: &str = "UBOT";

/// One Web API call as the fake received it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    /// The JSON body, or the query string's pairs for GET calls.
    pub body: Value,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    base: String,
    calls: Mutex<Vec<Call>>,
    acks: Mutex<Vec<Value>>,
    sockets: Mutex<Vec<mpsc::UnboundedSender<Option<String>>>>,
    uploads: Mutex<Vec<(String, Vec<u8>)>>,
    responses: Mutex<Vec<Value>>,
    /// `method → how many 503s to answer before serving it`.
    failing: Mutex<HashMap<String, u32>>,
    /// `method → how many 429s to answer before serving it`.
    limited: Mutex<HashMap<String, u32>>,
    limited_at: Mutex<Vec<(String, Instant)>>,
    ts: AtomicU64,
    /// Messages posted and not deleted, in order: (channel, ts, text now).
    messages: Mutex<Vec<(String, String, String)>>,
    /// Private files by path ([`FakeSlack::add_file`]) and downloads made.
    files: Mutex<HashMap<String, (Vec<u8>, String)>>,
    file_downloads: Mutex<Vec<(String, bool)>>,
    /// Workspace admins ([`FakeSlack::set_admin`]), as `users.info` says.
    admins: Mutex<std::collections::HashSet<String>>,
}

#[derive(Clone)]
pub struct FakeSlack {
    inner: Arc<Inner>,
    /// The Web API base to configure as `apiUrl`.
    pub api_url: String,
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake slack");
        let addr = listener.local_addr().expect("fake slack address");
        let inner = Arc::new(Inner {
            base: format!("http://{addr}"),
            ..Inner::default()
        });
        let app = Router::new()
            .route("/api/{method}", any(api))
            .route("/socket", get(socket))
            .route("/upload/{file}", post(upload))
            .route("/files-pri/{*path}", get(files::download))
            .route("/respond/{id}", post(respond))
            .with_state(inner.clone());
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await.expect("fake slack serves") });
        FakeSlack {
            api_url: format!("http://{addr}/api"),
            inner,
        }
    }

    /// A `response_url` pointing at this fake.
    pub fn response_url(&self, id: &str) -> String {
        format!("{}/respond/{id}", self.inner.base)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.inner.calls.lock().unwrap().clone()
    }

    /// Calls of one method, in order.
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.method == method).collect()
    }

    /// Text of every message posted or updated into `channel`, in order,
    /// placeholders included.
    pub fn texts_in(&self, channel: &str) -> Vec<String> {
        self.calls()
            .iter()
            .filter(|c| matches!(c.method.as_str(), "chat.postMessage" | "chat.update"))
            .filter(|c| c.body["channel"] == channel)
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The messages in `channel` as they show now (after updates, without
    /// deleted ones), in the order they were posted.
    pub fn messages_in(&self, channel: &str) -> Vec<String> {
        self.inner
            .messages
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _, _)| c == channel)
            .map(|(_, _, text)| text.clone())
            .collect()
    }

    pub fn acks(&self) -> Vec<Value> {
        self.inner.acks.lock().unwrap().clone()
    }

    pub fn acked(&self, envelope_id: &str) -> bool {
        self.acks().iter().any(|a| a["envelope_id"] == envelope_id)
    }

    pub fn uploads(&self) -> Vec<(String, Vec<u8>)> {
        self.inner.uploads.lock().unwrap().clone()
    }

    /// Bodies POSTed to `response_url`s.
    pub fn responses(&self) -> Vec<Value> {
        self.inner.responses.lock().unwrap().clone()
    }

    /// Socket Mode connections opened so far.
    pub fn connections(&self) -> usize {
        self.inner.sockets.lock().unwrap().len()
    }

    /// Makes the next `times` calls to `method` answer 429 with
    /// `Retry-After: 1`.
    /// Makes `user` a workspace admin (`users.info` says `is_admin`).
    pub fn set_admin(&self, user: &str) {
        self.inner.admins.lock().unwrap().insert(user.to_string());
    }

    pub fn rate_limit(&self, method: &str, times: u32) {
        self.inner.limited.lock().unwrap().insert(method.to_string(), times);
    }

    /// Makes the next `times` calls to `method` fail with HTTP 503, as
    /// during an outage.
    pub fn fail(&self, method: &str, times: u32) {
        self.inner.failing.lock().unwrap().insert(method.to_string(), times);
    }

    pub fn rate_limited_at(&self, method: &str) -> Vec<Instant> {
        self.inner
            .limited_at
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, t)| *t)
            .collect()
    }

    /// Sends one envelope on the newest Socket Mode connection.
    pub fn send(&self, envelope: Value) {
        let sockets = self.inner.sockets.lock().unwrap();
        let socket = sockets.last().expect("a Socket Mode connection is open");
        socket.send(Some(envelope.to_string())).expect("the socket is open");
    }

    /// Sends one envelope as Slack does when it is not acked: if no ack for
    /// it comes within `wait`, it is sent again, at most [`SLACK_RETRIES`]
    /// times, each copy on the newest connection with `retry_attempt` one
    /// higher, `retry_reason` `timeout` and the envelope id
    /// [`retry_envelope_id`]. (Slack spaces its retries out over minutes;
    /// tests pass a short `wait`.)
    pub fn send_until_acked(&self, envelope: Value, wait: std::time::Duration) {
        let fake = self.clone();
        let first_id = str_of(&envelope["envelope_id"]);
        self.send(envelope.clone());
        tokio::spawn(async move {
            let mut sent = vec![first_id.clone()];
            for attempt in 1..=SLACK_RETRIES {
                tokio::time::sleep(wait).await;
                if sent.iter().any(|id| fake.acked(id)) {
                    return;
                }
                let mut again = envelope.clone();
                let id = retry_envelope_id(&first_id, attempt);
                again["envelope_id"] = json!(id);
                again["retry_attempt"] = json!(attempt);
                again["retry_reason"] = json!("timeout");
                fake.send(again);
                sent.push(id);
            }
        });
    }

    /// Sends one envelope as Slack does to a bot that may die and come back:
    /// the copies and their ids are [`FakeSlack::send_until_acked`]'s, but
    /// each goes to the newest connection still open, and a copy due while
    /// none is (the bot killed, not yet reconnected) waits for the next one,
    /// at most [`crate::PATIENCE`]. Slack retries an unacknowledged event at
    /// once, after a minute and after five: a bot back within those minutes
    /// gets it on its new connection. A copy written to a connection the bot
    /// has just lost is lost with it, and the next retry covers it.
    pub fn send_until_acked_across_restarts(&self, envelope: Value, wait: std::time::Duration) {
        let fake = self.clone();
        let first_id = str_of(&envelope["envelope_id"]);
        tokio::spawn(async move {
            let mut sent: Vec<String> = Vec::new();
            for attempt in 0..=SLACK_RETRIES {
                if attempt > 0 {
                    tokio::time::sleep(wait).await;
                    if sent.iter().any(|id| fake.acked(id)) {
                        return;
                    }
                }
                let mut copy = envelope.clone();
                if attempt > 0 {
                    copy["envelope_id"] = json!(retry_envelope_id(&first_id, attempt));
                    copy["retry_attempt"] = json!(attempt);
                    copy["retry_reason"] = json!("timeout");
                }
                let (text, give_up) = (copy.to_string(), tokio::time::Instant::now() + crate::PATIENCE);
                while !fake.send_on_open_connection(&text) {
                    if tokio::time::Instant::now() >= give_up {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                sent.push(str_of(&copy["envelope_id"]));
            }
        });
    }

    /// Sends `text` on the newest connection whose bot end is still there;
    /// false when there is none.
    fn send_on_open_connection(&self, text: &str) -> bool {
        let sockets = self.inner.sockets.lock().unwrap();
        sockets
            .iter()
            .rev()
            .find(|socket| !socket.is_closed())
            .is_some_and(|socket| socket.send(Some(text.to_string())).is_ok())
    }

    /// Drops the newest connection without a close handshake, as a network
    /// failure would.
    pub fn drop_socket(&self) {
        let sockets = self.inner.sockets.lock().unwrap();
        if let Some(socket) = sockets.last() {
            let _ = socket.send(None);
        }
    }

    /// Waits until `ready` holds ([`crate::eventually`]); panics naming
    /// `what` if that takes unreasonably long (a hang guard, not a timing
    /// assertion).
    pub async fn wait_until(&self, what: &str, ready: impl Fn(&FakeSlack) -> bool) {
        crate::eventually(format_args!("fake Slack: {what}"), async || ready(self)).await
    }
}

/// How often Slack retries a delivery that was not acknowledged.
pub const SLACK_RETRIES: u32 = 3;

/// The envelope id the fake gives retry `attempt` (1 to [`SLACK_RETRIES`])
/// of the envelope `envelope_id` in [`FakeSlack::send_until_acked`].
pub fn retry_envelope_id(envelope_id: &str, attempt: u32) -> String {
    format!("{envelope_id}-retry{attempt}")
}

/// An `events_api` envelope carrying one event callback.
pub fn events_envelope(envelope_id: &str, event_id: &str, event: Value) -> Value {
    json!({
        "envelope_id": envelope_id, "type": "events_api", "accepts_response_payload": false,
        "retry_attempt": 0, "retry_reason": "",
        "payload": event_callback(event_id, event),
    })
}

pub fn event_callback(event_id: &str, event: Value) -> Value {
    json!({
        "token": "unused", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000, "event": event,
    })
}

/// A user's direct message to the bot.
pub fn dm_event(user: &str, ts: &str, text: &str) -> Value {
    json!({"type": "message", "channel": format!("D{user}"), "channel_type": "im", "user": user, "text": text, "ts": ts})
}

/// A `slash_commands` envelope for `/session <text>`.
pub fn command_envelope(envelope_id: &str, payload: Value) -> Value {
    json!({"envelope_id": envelope_id, "type": "slash_commands", "accepts_response_payload": true, "payload": payload})
}

pub fn command_payload(user: &str, channel: &str, text: &str, response_url: &str, trigger: &str) -> Value {
    json!({
        "token": "unused", "team_id": "T1", "team_domain": "team", "channel_id": channel, "channel_name": "x",
        "user_id": user, "user_name": "someone", "command": "/session", "text": text,
        "response_url": response_url, "trigger_id": trigger, "api_app_id": "A1",
    })
}

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn ok(body: Value) -> Response {
    let mut body = body;
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn slack_error(code: &str) -> Response {
    axum::Json(json!({"ok": false, "error": code})).into_response()
}

/// One Web API call: a failure the test scripted, a wrong token, or the
/// method's answer (the call recorded first).
async fn api(
    State(fake): State<Arc<Inner>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    if let Some(failure) = scripted_failure(&fake, &method, now) {
        return failure;
    }
    let body = request_body(&body, query);
    let token = bearer(&headers).to_string();
    let wanted = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    if token != wanted {
        return slack_error("invalid_auth");
    }
    fake.calls.lock().unwrap().push(Call {
        method: method.clone(),
        body: body.clone(),
        at: now,
    });
    answer(&fake, &method, &body)
}

/// A 429 or a 503 the test asked for, counted down per method.
fn scripted_failure(fake: &Inner, method: &str, now: Instant) -> Option<Response> {
    {
        let mut limited = fake.limited.lock().unwrap();
        if let Some(left) = limited.get_mut(method).filter(|n| **n > 0) {
            *left -= 1;
            fake.limited_at.lock().unwrap().push((method.to_string(), now));
            return Some(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "1")],
                    axum::Json(json!({"ok": false, "error": "ratelimited"})),
                )
                    .into_response(),
            );
        }
    }
    let mut failing = fake.failing.lock().unwrap();
    if let Some(left) = failing.get_mut(method).filter(|n| **n > 0) {
        *left -= 1;
        return Some(StatusCode::SERVICE_UNAVAILABLE.into_response());
    }
    None
}

/// The call's arguments: a JSON body, or else the form-encoded query.
fn request_body(body: &[u8], query: Option<String>) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| {
        let pairs = query.unwrap_or_default();
        Value::Object(
            pairs
                .split('&')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect(),
        )
    })
}

/// What Slack answers `method` with `body`, as the fake keeps its state.
fn answer(fake: &Inner, method: &str, body: &Value) -> Response {
    let next_ts = || format!("1800000000.{:06}", fake.ts.fetch_add(1, Ordering::SeqCst) + 1);
    match method {
        "auth.test" => ok(
            json!({"user_id": BOT_USER, "team_id": "T1", "user": "mnemo", "team": "Team",
                                 "bot_id": "B1", "url": "https://team.slack.com/"}),
        ),
        // As Slack: every flag a bot with `users:read` is shown.
        "users.info" => {
            let id = str_of(&body["user"]);
            let admin = fake.admins.lock().unwrap().contains(&id);
            ok(
                json!({"user": {"id": id, "team_id": "T1", "name": id.to_lowercase(), "deleted": false,
                               "is_admin": admin, "is_owner": false, "is_primary_owner": false,
                               "is_restricted": false, "is_ultra_restricted": false, "is_bot": false,
                               "is_app_user": false}}),
            )
        }
        "apps.connections.open" => ok(json!({"url": format!("{}/socket", fake.base.replace("http://", "ws://"))})),
        "chat.postMessage" => {
            let ts = next_ts();
            let (channel, text) = (str_of(&body["channel"]), str_of(&body["text"]));
            fake.messages.lock().unwrap().push((channel, ts.clone(), text));
            ok(json!({"channel": body["channel"], "ts": ts, "message": {"ts": ts, "text": body["text"]}}))
        }
        // As Slack: only a message that exists can be updated or deleted.
        "chat.update" => {
            let mut messages = fake.messages.lock().unwrap();
            let (channel, ts) = (str_of(&body["channel"]), str_of(&body["ts"]));
            match messages.iter_mut().find(|(c, t, _)| *c == channel && *t == ts) {
                Some(message) => {
                    message.2 = str_of(&body["text"]);
                    ok(
                        json!({"channel": body["channel"], "ts": body["ts"], "text": body["text"],
                              "message": {"text": body["text"]}}),
                    )
                }
                None => slack_error("message_not_found"),
            }
        }
        "chat.delete" => {
            let mut messages = fake.messages.lock().unwrap();
            let (channel, ts) = (str_of(&body["channel"]), str_of(&body["ts"]));
            match messages.iter().position(|(c, t, _)| *c == channel && *t == ts) {
                Some(at) => {
                    messages.remove(at);
                    ok(json!({"channel": body["channel"], "ts": body["ts"]}))
                }
                None => slack_error("message_not_found"),
            }
        }
        "chat.postEphemeral" => ok(json!({"message_ts": next_ts()})),
        "conversations.open" => {
            let user = body["users"]
                .as_str()
                .or_else(|| body["users"][0].as_str())
                .unwrap_or("U0")
                .to_string();
            ok(json!({"channel": {"id": format!("D{user}")}}))
        }
        "files.getUploadURLExternal" => {
            let id = format!("F{}", fake.ts.fetch_add(1, Ordering::SeqCst) + 1);
            ok(json!({"upload_url": format!("{}/upload/{id}", fake.base), "file_id": id}))
        }
        "files.completeUploadExternal" => ok(json!({"files": body["files"]})),
        _ => slack_error("unknown_method"),
    }
}

async fn upload(State(fake): State<Arc<Inner>>, Path(file): Path<String>, body: Bytes) -> impl IntoResponse {
    let len = body.len();
    fake.uploads.lock().unwrap().push((file, body.to_vec()));
    format!("OK - {len}")
}

async fn respond(State(fake): State<Arc<Inner>>, body: Bytes) -> impl IntoResponse {
    fake.responses
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    "ok"
}

async fn socket(State(fake): State<Arc<Inner>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve_socket(fake, socket))
}

/// Sends `hello`, then whatever the test queues; records acks. A queued
/// `None` drops the connection on the floor.
async fn serve_socket(fake: Arc<Inner>, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<String>>();
    let n = {
        let mut sockets = fake.sockets.lock().unwrap();
        sockets.push(tx);
        sockets.len()
    };
    let hello = json!({"type": "hello", "num_connections": n, "connection_info": {"app_id": "A1"},
                       "debug_info": {"host": "fake", "approximate_connection_time": 18060}});
    if socket.send(Message::Text(hello.to_string().into())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(Some(text)) => {
                    if socket.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                _ => break,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ack) = serde_json::from_str::<Value>(text.as_str()) {
                        fake.acks.lock().unwrap().push(ack);
                    }
                }
                Some(Ok(_)) => {}
                _ => break,
            },
        }
    }
}
