//! A fake Discord on 127.0.0.1 for tests: the REST API under `/api/v10`
//! (what serenity's `HttpBuilder::proxy` sends to) and a gateway websocket
//! at `/ws` speaking the real protocol — Hello, Identify, READY, heartbeat
//! ACKs, RESUMED, then whatever dispatches a test pushes. Every REST request
//! is recorded (JSON body or multipart payload + files) so tests can assert
//! on exactly what the adapter sent. Shared by the adapter tests and the
//! end-to-end tests of the binary.

use crate::PATIENCE;
use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

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

struct Inner {
    base: String,
    requests: Mutex<Vec<Recorded>>,
    failures: Mutex<Vec<Failure>>,
    identify: watch::Sender<Option<Value>>,
    /// Resume payloads (`d` of op 6) received so far.
    resumes: watch::Sender<Vec<Value>>,
    /// Drops the current gateway connection without a close frame.
    kick: tokio::sync::Notify,
    /// Dispatches waiting for the gateway session; taken by it after READY.
    dispatches: Mutex<Option<mpsc::UnboundedReceiver<(String, Value)>>>,
    dispatch_tx: mpsc::UnboundedSender<(String, Value)>,
}

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
            identify: watch::channel(None).0,
            resumes: watch::channel(Vec::new()).0,
            kick: tokio::sync::Notify::new(),
            dispatches: Mutex::new(Some(dispatch_rx)),
            dispatch_tx,
        });
        let app = Router::new()
            .route("/ws", get(gateway))
            .fallback(rest)
            .with_state(inner.clone());
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
    pub fn fail(&self, path_part: &str, status: u16, body: Value, times: usize) {
        let status = StatusCode::from_u16(status).expect("status");
        self.inner.failures.lock().expect("lock").push(Failure {
            path_part: path_part.into(),
            status,
            body,
            times,
        });
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
    let record = Recorded {
        method: method.clone(),
        path: path.clone(),
        authorization,
        json,
        files,
    };
    let count = {
        let mut requests = inner.requests.lock().expect("lock");
        requests.push(record);
        requests.len()
    };

    if let Some((status, body)) = scripted_failure(&inner, &path) {
        return (status, axum::Json(body)).into_response();
    }
    let seq = 1_600_000_000_000_000_000 + count as u64;
    let ws = format!("{}/ws", inner.base.replace("http://", "ws://"));
    let segments: Vec<&str> = path.trim_start_matches("/api/v10/").split('/').collect();
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
        ("POST", ["channels", channel, "messages"]) => axum::Json(sent_message(seq, channel, "")).into_response(),
        ("PUT", ["applications", .., "commands"]) => axum::Json(json!([])).into_response(),
        ("POST", ["users", "@me", "channels"]) => {
            let user = inner.requests.lock().expect("lock")[count - 1].json["recipient_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
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
                        Some(json!({ "op": 0, "s": seq, "t": "READY", "d": ready(&ws) }))
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
