//! A fake Discord on 127.0.0.1 for tests: the REST API under `/api/v10`
//! (what serenity's `HttpBuilder::proxy` sends to) and a gateway websocket
//! at `/ws` speaking the real protocol — Hello, Identify, READY, heartbeat
//! ACKs, RESUMED, then whatever dispatches a test pushes. Every REST request
//! is recorded (JSON body or multipart payload + files, when it came and how
//! it was answered) so tests can assert on exactly what the adapter sent.
//! Messages behave like Discord's where the adapter depends on it: a posted
//! message is kept and returned whole; `PATCH
//! /channels/{channel.id}/messages/{message.id}` edits only a message that
//! exists in that channel (else 404 `Unknown Message`, code 10008) and
//! returns the whole edited message; empty or over-2,000-character content
//! is refused with Discord's 400s; a rate limit answers 429 with
//! `retry_after` in the body and the `Retry-After` / `X-RateLimit-*`
//! headers, and keeps answering 429 until that time has passed. Shared by
//! the adapter tests and the end-to-end tests of the binary.

mod cdn;
use crate::PATIENCE;
use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

/// The bot the fake says we are.
pub const BOT_ID: &str = "1000000000000000001";
pub const BOT_NAME: &str = "mnemo";
pub const APP_ID: &str = "1000000000000000002";
/// The DM channel Discord keeps for the bot and `user` (stable per user,
/// as on Discord): `125…` followed by the user id's last 15 digits.
pub fn dm_channel_of(user: &str) -> String {
    format!("1250{}", &user[user.len().saturating_sub(15)..])
}

/// One REST request as the fake received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub authorization: Option<String>,
    /// The JSON body, or a multipart request's `payload_json`.
    pub json: Value,
    /// Multipart files: (field file name, bytes).
    pub files: Vec<(String, Vec<u8>)>,
    /// When it arrived (for pace and "waited out the 429" checks).
    pub at: Instant,
    /// The HTTP status it was answered with.
    pub status: u16,
}

impl Recorded {
    pub fn content(&self) -> &str {
        self.json["content"].as_str().unwrap_or("")
    }
}

/// A scripted failure: the next `times` requests whose path contains
/// `path_part` get `status` with `body`.
struct Failure {
    path_part: String,
    status: StatusCode,
    body: Value,
    times: usize,
}

/// A route Discord has rate limited: requests whose path contains
/// `path_part` get 429 until `until` (set by the first of them).
struct Limit {
    path_part: String,
    retry_after: Duration,
    until: Option<Instant>,
}

/// A message the bot posted, as Discord keeps it.
struct Kept {
    id: u64,
    channel: String,
    content: String,
}

struct Inner {
    base: String,
    requests: Mutex<Vec<Recorded>>,
    failures: Mutex<Vec<Failure>>,
    limits: Mutex<Vec<Limit>>,
    messages: Mutex<Vec<Kept>>,
    /// Numbers the ids of messages and webhook answers.
    next_id: AtomicU64,
    identify: watch::Sender<Option<Value>>,
    /// Resume payloads (`d` of op 6) received so far.
    resumes: watch::Sender<Vec<Value>>,
    /// Drops the current gateway connection without a close frame.
    kick: tokio::sync::Notify,
    /// Dispatches waiting for the gateway session; taken by it after READY.
    dispatches: Mutex<Option<mpsc::UnboundedReceiver<(String, Value)>>>,
    dispatch_tx: mpsc::UnboundedSender<(String, Value)>,
    /// Attachments the CDN serves, by path, and the downloads made.
    cdn: Mutex<std::collections::HashMap<String, (Vec<u8>, String)>>,
    cdn_downloads: Mutex<Vec<String>>,
    /// Members with the fake server's admin role ([`FakeDiscord::set_admin`]).
    admins: Mutex<Vec<String>>,
}

/// The one server every non-DM channel of the fake is in, its owner, and
/// its role that grants `ADMINISTRATOR`.
pub const GUILD: &str = "1100000000000000001";
pub const GUILD_OWNER: &str = "1100000000000000002";
const ADMIN_ROLE: &str = "1100000000000000003";

#[derive(Clone)]
pub struct FakeDiscord {
    inner: Arc<Inner>,
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let (dispatch_tx, dispatch_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            base,
            requests: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
            limits: Mutex::new(Vec::new()),
            messages: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            identify: watch::channel(None).0,
            resumes: watch::channel(Vec::new()).0,
            kick: tokio::sync::Notify::new(),
            dispatches: Mutex::new(Some(dispatch_rx)),
            dispatch_tx,
            cdn: Mutex::new(std::collections::HashMap::new()),
            cdn_downloads: Mutex::new(Vec::new()),
            admins: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/ws", get(gateway))
            .route("/attachments/{*path}", get(cdn::attachment))
            .fallback(rest)
            .with_state(inner.clone());
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeDiscord { inner }
    }

    /// What to put in `apiUrl`.
    pub fn url(&self) -> String {
        self.inner.base.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().expect("lock").clone()
    }

    /// Waits until `pick` finds at least `n` recorded requests; returns them.
    pub async fn wait_for(&self, n: usize, pick: impl Fn(&Recorded) -> bool) -> Vec<Recorded> {
        crate::eventually(format_args!("{n} matching requests to the fake Discord"), async || {
            let hits: Vec<Recorded> = self.requests().into_iter().filter(|r| pick(r)).collect();
            (hits.len() >= n).then_some(hits)
        })
        .await
    }

    /// Messages posted to channel `id`, once `n` have arrived.
    pub async fn channel_messages(&self, id: &str, n: usize) -> Vec<Recorded> {
        let path = format!("/api/v10/channels/{id}/messages");
        self.wait_for(n, |r| r.method == Method::POST && r.path == path).await
    }

    /// The next `times` requests whose path contains `path_part` fail.
    /// Gives `user` the server's admin role.
    pub fn set_admin(&self, user: &str) {
        self.inner.admins.lock().expect("lock").push(user.to_string());
    }

    pub fn fail(&self, path_part: &str, status: u16, body: Value, times: usize) {
        let status = StatusCode::from_u16(status).expect("status");
        self.inner.failures.lock().expect("lock").push(Failure {
            path_part: path_part.into(),
            status,
            body,
            times,
        });
    }

    /// Rate limits the route: the next request whose path contains
    /// `path_part` gets 429 with `retry_after`, and so does every matching
    /// request until `retry_after` has passed since that first 429 (as
    /// Discord's buckets do).
    pub fn rate_limit(&self, path_part: &str, retry_after: Duration) {
        self.inner.limits.lock().expect("lock").push(Limit {
            path_part: path_part.into(),
            retry_after,
            until: None,
        });
    }

    /// The messages of channel `id` as a person sees them now: every
    /// message the bot posted there, in order, with its latest content.
    pub fn messages_in(&self, id: &str) -> Vec<String> {
        let kept = self.inner.messages.lock().expect("lock");
        kept.iter()
            .filter(|m| m.channel == id)
            .map(|m| m.content.clone())
            .collect()
    }

    /// Posts and edits of messages in channel `id`, in order of arrival.
    pub fn message_calls(&self, id: &str) -> Vec<Recorded> {
        let post = format!("/api/v10/channels/{id}/messages");
        let edit = format!("{post}/");
        let mut calls: Vec<Recorded> = self
            .requests()
            .into_iter()
            .filter(|r| {
                (r.method == Method::POST && r.path == post) || (r.method == Method::PATCH && r.path.starts_with(&edit))
            })
            .collect();
        calls.sort_by_key(|c| c.at);
        calls
    }

    /// The Identify payload (`d`), once the adapter has sent it.
    pub async fn identify(&self) -> Value {
        let mut rx = self.inner.identify.subscribe();
        let got = tokio::time::timeout(PATIENCE, rx.wait_for(Option::is_some)).await;
        got.expect("no Identify within the patience")
            .expect("fake alive")
            .clone()
            .unwrap_or_default()
    }

    /// Cuts the gateway connection the way a network failure would.
    pub fn drop_connection(&self) {
        self.inner.kick.notify_one();
    }

    /// The Resume payload, once the adapter has reconnected and resumed.
    pub async fn resumed(&self) -> Value {
        let mut rx = self.inner.resumes.subscribe();
        let got = tokio::time::timeout(PATIENCE, rx.wait_for(|r| !r.is_empty())).await;
        got.expect("no Resume within the patience").expect("fake alive")[0].clone()
    }

    /// Sends a dispatch (`op` 0) with type `t` on the gateway, after READY.
    pub fn dispatch(&self, t: &str, d: Value) {
        let _ = self.inner.dispatch_tx.send((t.to_string(), d));
    }
}

/// The READY payload for our bot.
pub fn ready(base_ws: &str) -> Value {
    json!({
        "v": 10,
        "user": { "id": BOT_ID, "username": BOT_NAME, "discriminator": "0", "global_name": null, "avatar": null,
                  "bot": true, "verified": true, "mfa_enabled": false, "flags": 0 },
        "guilds": [ { "id": "1500000000000000001", "unavailable": true } ],
        "session_id": "fake-session",
        "resume_gateway_url": base_ws,
        "shard": [0, 1],
        "application": { "id": APP_ID, "flags": 0 }
    })
}

/// A message object as Discord returns it for a message the bot sent.
pub fn sent_message(id: u64, channel_id: &str, content: &str) -> Value {
    json!({
        "id": id.to_string(), "channel_id": channel_id, "content": content, "type": 0,
        "author": { "id": BOT_ID, "username": BOT_NAME, "discriminator": "0", "global_name": null, "avatar": null, "bot": true },
        "timestamp": "2026-03-23T03:28:32.000000+00:00", "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
        "pinned": false, "flags": 0, "components": []
    })
}

/// Discord's answer to a message with nothing in it.
fn empty_message() -> (StatusCode, Value) {
    let body = json!({ "code": 50006, "message": "Cannot send an empty message" });
    (StatusCode::BAD_REQUEST, body)
}

/// Discord's answer to content over 2,000 characters.
fn too_long() -> (StatusCode, Value) {
    let body = json!({
        "code": 50035, "message": "Invalid Form Body",
        "errors": { "content": { "_errors": [
            { "code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length." }
        ] } }
    });
    (StatusCode::BAD_REQUEST, body)
}

/// The content Discord would refuse, and how.
fn refused_content(content: Option<&str>, has_files: bool) -> Option<(StatusCode, Value)> {
    match content {
        Some(c) if c.chars().count() > 2000 => Some(too_long()),
        Some(c) if c.trim().is_empty() && !has_files => Some(empty_message()),
        None if !has_files => Some(empty_message()),
        _ => None,
    }
}

/// Posts a message to `channel`, as Discord keeps it; the message object.
fn keep(inner: &Inner, id: u64, channel: &str, content: &str) -> Value {
    inner.messages.lock().expect("lock").push(Kept {
        id,
        channel: channel.into(),
        content: content.into(),
    });
    sent_message(id, channel, content)
}

/// Edits message `id` of `channel` if Discord has it: the whole message
/// object after the edit, or Discord's 404.
fn edit(inner: &Inner, channel: &str, id: &str, content: Option<&str>) -> Response {
    let mut kept = inner.messages.lock().expect("lock");
    let Some(m) = kept.iter_mut().find(|m| m.channel == channel && m.id.to_string() == id) else {
        let body = json!({ "code": 10008, "message": "Unknown Message" });
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    };
    if let Some(content) = content {
        m.content = content.into();
    }
    let mut message = sent_message(m.id, channel, &m.content);
    message["edited_timestamp"] = json!("2026-03-23T03:28:33.000000+00:00");
    axum::Json(message).into_response()
}

/// 429 for a rate-limited route, as Discord answers it.
fn limited(inner: &Inner, path: &str) -> Option<Response> {
    let now = Instant::now();
    let mut limits = inner.limits.lock().expect("lock");
    let limit = limits
        .iter_mut()
        .find(|l| path.contains(&l.path_part) && l.until.is_none_or(|until| now < until))?;
    let until = *limit.until.get_or_insert(now + limit.retry_after);
    let wait = until.saturating_duration_since(now).as_secs_f64();
    let body = json!({ "message": "You are being rate limited.", "retry_after": wait, "global": false });
    let headers = [
        ("retry-after", format!("{}", wait.ceil())),
        ("x-ratelimit-limit", "5".into()),
        ("x-ratelimit-remaining", "0".into()),
        ("x-ratelimit-reset-after", format!("{wait:.3}")),
        ("x-ratelimit-bucket", "fake-messages-bucket".into()),
        ("x-ratelimit-scope", "user".into()),
    ];
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    for (name, value) in headers {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    Some(response)
}

async fn rest(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    let (mut json, mut files) = (Value::Null, Vec::new());
    if multipart {
        let mut form = Multipart::from_request(req, &()).await.expect("multipart body");
        while let Some(field) = form.next_field().await.expect("multipart field") {
            let name = field.name().unwrap_or_default().to_string();
            let file_name = field.file_name().map(String::from);
            let bytes = field.bytes().await.expect("field bytes").to_vec();
            match file_name {
                Some(file_name) => files.push((file_name, bytes)),
                None if name == "payload_json" => json = serde_json::from_slice(&bytes).expect("payload_json"),
                None => {}
            }
        }
    } else {
        let bytes = axum::body::to_bytes(req.into_body(), 64 << 20).await.expect("body");
        json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    }
    let at = Instant::now();
    let seq = 1_600_000_000_000_000_000 + inner.next_id.fetch_add(1, Ordering::SeqCst);
    let response = answer(&inner, &method, &path, &json, !files.is_empty(), seq);
    inner.requests.lock().expect("lock").push(Recorded {
        method,
        path,
        authorization,
        json,
        files,
        at,
        status: response.status().as_u16(),
    });
    response
}

/// What Discord answers; `seq` is the id a new message gets.
fn answer(inner: &Inner, method: &Method, path: &str, json: &Value, has_files: bool, seq: u64) -> Response {
    if let Some(response) = limited(inner, path) {
        return response;
    }
    if let Some((status, body)) = scripted_failure(inner, path) {
        return (status, axum::Json(body)).into_response();
    }
    let ws = format!("{}/ws", inner.base.replace("http://", "ws://"));
    let segments: Vec<&str> = path.trim_start_matches("/api/v10/").split('/').collect();
    let content = json["content"].as_str();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway"]) => axum::Json(json!({ "url": ws })).into_response(),
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": ws, "shards": 1,
            "session_start_limit": { "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 }
        }))
        .into_response(),
        ("POST", ["channels", _, "typing"]) | ("POST", ["interactions", _, _, "callback"]) => {
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["channels", channel, "messages"]) => match refused_content(content, has_files) {
            Some((status, body)) => (status, axum::Json(body)).into_response(),
            None => axum::Json(keep(inner, seq, channel, content.unwrap_or_default())).into_response(),
        },
        ("PATCH", ["channels", channel, "messages", id]) => {
            match content.and_then(|c| refused_content(Some(c), true)) {
                Some((status, body)) => (status, axum::Json(body)).into_response(),
                None => edit(inner, channel, id, content),
            }
        }
        ("PUT", ["applications", .., "commands"]) => axum::Json(json!([])).into_response(),
        // As Discord, with only the fields a client reads for rights.
        ("GET", ["channels", channel]) if channel.starts_with("1250") => {
            axum::Json(json!({ "id": channel, "type": 1 })).into_response()
        }
        ("GET", ["channels", channel]) => {
            axum::Json(json!({ "id": channel, "type": 0, "guild_id": GUILD, "name": "general" })).into_response()
        }
        ("GET", ["guilds", GUILD]) => axum::Json(json!({
            "id": GUILD, "name": "Team", "owner_id": GUILD_OWNER,
            "roles": [{ "id": GUILD, "name": "@everyone", "permissions": "1024" },
                      { "id": ADMIN_ROLE, "name": "admins", "permissions": "8" }],
        }))
        .into_response(),
        ("GET", ["guilds", GUILD, "members", user]) => {
            let admin = inner.admins.lock().expect("lock").iter().any(|a| a == user);
            let roles = if admin { json!([ADMIN_ROLE]) } else { json!([]) };
            axum::Json(json!({ "user": { "id": user, "username": "someone" }, "roles": roles })).into_response()
        }
        ("POST", ["users", "@me", "channels"]) => {
            let user = json["recipient_id"].as_str().unwrap_or_default().to_string();
            axum::Json(json!({
                "id": dm_channel_of(&user), "type": 1, "last_message_id": null,
                "recipients": [{ "id": user, "username": "someone", "discriminator": "0", "avatar": null }]
            }))
            .into_response()
        }
        ("PATCH", ["webhooks", _, _, "messages", _]) | ("POST", ["webhooks", _, _]) => {
            axum::Json(sent_message(seq, "1200000000000000009", "")).into_response()
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "code": 0, "message": "404: Not Found" })),
        )
            .into_response(),
    }
}

fn scripted_failure(inner: &Inner, path: &str) -> Option<(StatusCode, Value)> {
    let mut failures = inner.failures.lock().expect("lock");
    let failure = failures
        .iter_mut()
        .find(|f| f.times > 0 && path.contains(&f.path_part))?;
    failure.times -= 1;
    Some((failure.status, failure.body.clone()))
}

async fn gateway(State(inner): State<Arc<Inner>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| session(inner, socket))
}

/// One gateway connection: Hello, then Identify → READY (or Resume →
/// RESUMED), heartbeat ACKs, and the test's dispatches in order.
async fn session(inner: Arc<Inner>, mut socket: WebSocket) {
    let send = |v: Value| WsMessage::Text(v.to_string().into());
    if socket
        .send(send(json!({ "op": 10, "d": { "heartbeat_interval": 41250 } })))
        .await
        .is_err()
    {
        return;
    }
    let mut seq = 0u64;
    let mut dispatches: Option<mpsc::UnboundedReceiver<(String, Value)>> = None;
    loop {
        let mut connected = false;
        let next_dispatch = async {
            match dispatches.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = socket.recv() => {
                let Some(Ok(frame)) = frame else { break };
                let WsMessage::Text(text) = frame else { continue };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else { continue };
                let reply = match payload["op"].as_u64() {
                    Some(1) => Some(json!({ "op": 11 })),
                    Some(2) => {
                        inner.identify.send_replace(Some(payload["d"].clone()));
                        seq += 1;
                        let ws = format!("{}/ws", inner.base.replace("http://", "ws://"));
                        // READY names the shard the Identify asked for.
                        let mut d = ready(&ws);
                        if payload["d"]["shard"].is_array() {
                            d["shard"] = payload["d"]["shard"].clone();
                        }
                        Some(json!({ "op": 0, "s": seq, "t": "READY", "d": d }))
                    }
                    Some(6) => {
                        inner.resumes.send_modify(|r| r.push(payload["d"].clone()));
                        seq = payload["d"]["seq"].as_u64().unwrap_or(seq) + 1;
                        Some(json!({ "op": 0, "s": seq, "t": "RESUMED", "d": {} }))
                    }
                    _ => None,
                };
                let Some(reply) = reply else { continue };
                let ready = reply["t"] == "READY" || reply["t"] == "RESUMED";
                if socket.send(send(reply)).await.is_err() {
                    break;
                }
                connected = ready;
            }
            _ = inner.kick.notified() => break,
            Some((t, d)) = next_dispatch => {
                seq += 1;
                if socket.send(send(json!({ "op": 0, "s": seq, "t": t, "d": d }))).await.is_err() {
                    break;
                }
            }
        }
        if connected && dispatches.is_none() {
            dispatches = inner.dispatches.lock().expect("lock").take();
        }
    }
    // A reconnect gets the queue back.
    if let Some(rx) = dispatches {
        *inner.dispatches.lock().expect("lock") = Some(rx);
    }
}
