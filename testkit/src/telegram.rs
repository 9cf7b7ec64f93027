//! A fake Telegram Bot API on 127.0.0.1 — the network edge of the Telegram
//! tests, shared by the adapter tests and the end-to-end tests through the
//! test kit. It serves `/bot<TOKEN>/<method>` like the real one:
//! `getMe`, `getUpdates` (long polling over a queue the test fills, with
//! offsets confirmed as Telegram does), `sendMessage`, `editMessageText`
//! (the message must exist and change, as Telegram insists: otherwise its
//! 400s "message to edit not found" / "message is not modified"),
//! `sendChatAction`, `sendDocument` (multipart), `setMyCommands`,
//! `setWebhook`, `deleteWebhook`. It records every call, and answers the next call of a
//! method with a scripted error when a test asks (429, 403, …). A load
//! bench follows the bot's messages as they arrive with
//! [`FakeBotApi::sent_feed`] instead of polling the record.
//!
//! Webhook mode ([`FakeBotApi::deliver_to`]): Telegram POSTs each queued
//! update, oldest first and one at a time (the bot registers
//! `max_connections: 1`), with the `secret_token` the bot gave `setWebhook`
//! in the `X-Telegram-Bot-Api-Secret-Token` header, to a load balancer in
//! front of several brokers. An update is done when a POST is answered 200;
//! any other status, a refused connection or no answer in time makes it
//! deliver the same update again (to the next broker), backing off, before
//! any later update — as Telegram holds back the updates behind an
//! unacknowledged one.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

mod files;
mod payloads;
mod wire;
pub use payloads::{
    blocked_by_user, bot_user, chat, sticker_message, text_message, too_many_requests, topic_message, user,
};
use wire::{lower_camel, read_multipart, reply};

/// The token the fake accepts (any other gets Telegram's 404).
pub const TOKEN: &str = "4242:AAtest-SECRET_token";
pub const BOT_ID: u64 = 4242;
pub const BOT_USERNAME: &str = "mnemo_test_bot";

/// One request the bot made.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    /// The JSON body; for multipart, the text fields as strings.
    pub params: Value,
    /// A multipart upload: the file name and its bytes.
    pub file: Option<(String, Vec<u8>)>,
    /// When it arrived (for "waited at least retry_after" checks).
    pub at: Instant,
    /// The HTTP status it was answered with.
    pub status: u16,
}

#[derive(Default)]
struct Inner {
    /// Updates not yet confirmed by an offset: (update_id, raw JSON), raw so
    /// a test can send what `serde_json::Value` cannot hold (a lone
    /// surrogate escape).
    updates: VecDeque<(i64, String)>,
    next_update_id: i64,
    next_message_id: i64,
    /// The highest offset the bot sent (every update below it is confirmed).
    confirmed: i64,
    calls: Vec<Call>,
    /// The text of every message pushed, for "never logged" checks.
    pushed_texts: Vec<String>,
    scripted: HashMap<String, VecDeque<(u16, String)>>,
    /// Every text message the bot sent, in order: (chat, message id, text
    /// as it shows now).
    sent: Vec<(i64, i64, String)>,
    /// Where each new text message is also told, as it arrives.
    /// Each feed, and whether it is told edits too.
    feeds: Vec<(mpsc::UnboundedSender<Sent>, bool)>,
    /// Webhook mode: which target acknowledged each update, and when.
    acks: HashMap<i64, Ack>,
    /// Webhook mode: POSTs that were not answered 200.
    failed_posts: usize,
    /// The `secret_token` and `max_connections` of the latest
    /// `setWebhook` call.
    webhook: Option<(String, Option<String>)>,
    /// Files by `file_id` ([`FakeBotApi::add_file`]) and downloads made.
    files: files::Files,
    /// Each group's owner and administrators ([`FakeBotApi::set_admin`]),
    /// as `getChatMember` tells them: (chat, user) → `creator` or
    /// `administrator`; anyone else is a `member`.
    admins: HashMap<(i64, i64), &'static str>,
}

/// An update a webhook target answered 200 ([`FakeBotApi::deliver_to`]).
#[derive(Clone, Debug)]
pub struct Ack {
    /// The index of the target in the list given to `deliver_to`.
    pub target: usize,
    /// When the 200 arrived.
    pub at: Instant,
    /// Every POST of this update, the acknowledged one last: the target
    /// and when the POST began.
    pub posts: Vec<(usize, Instant)>,
}

/// A text message the bot sent, as [`FakeBotApi::sent_feed`] tells it.
#[derive(Clone, Debug)]
pub struct Sent {
    pub chat: i64,
    pub text: String,
    /// When its `sendMessage` (or `editMessageText`) arrived.
    pub at: Instant,
    /// An `editMessageText` (on [`FakeBotApi::shown_feed`] only).
    pub edited: bool,
}

/// The fake server; cheap to clone.
#[derive(Clone)]
pub struct FakeBotApi {
    /// The base URL to put in `apiUrl`.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    /// Bumped on every change, so waiters never miss one.
    version: Arc<watch::Sender<u64>>,
}

impl FakeBotApi {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let inner = Inner {
            next_update_id: 100,
            next_message_id: 5000,
            ..Inner::default()
        };
        let api = FakeBotApi {
            url,
            inner: Arc::new(Mutex::new(inner)),
            version: Arc::new(watch::channel(0).0),
        };
        let app = Router::new()
            .route("/{token}/{method}", post(handle))
            .route("/file/{token}/{*path}", axum::routing::get(files::download))
            .with_state(api.clone());
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        api
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Queues `message` as the next update (filling in `message_id` and
    /// `date` when absent); returns the update id.
    pub fn push_message(&self, mut message: Value) -> i64 {
        let id = {
            let mut inner = self.inner.lock().unwrap();
            if message.get("message_id").is_none() {
                inner.next_message_id += 1;
                message["message_id"] = json!(inner.next_message_id);
            }
            if message.get("date").is_none() {
                message["date"] = json!(chrono::Utc::now().timestamp());
            }
            if let Some(text) = message["text"].as_str().or(message["caption"].as_str()) {
                inner.pushed_texts.push(text.to_string());
            }
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            inner
                .updates
                .push_back((id, json!({ "update_id": id, "message": message }).to_string()));
            id
        };
        self.changed();
        id
    }

    /// Queues a raw update: `raw_message` is the JSON text of its `message`,
    /// sent as is (e.g. with `"\ud83d"` in a name). Returns its update id.
    pub fn push_raw_message(&self, raw_message: &str) -> i64 {
        let id = {
            let mut inner = self.inner.lock().unwrap();
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            inner
                .updates
                .push_back((id, format!(r#"{{"update_id":{id},"message":{raw_message}}}"#)));
            id
        };
        self.changed();
        id
    }

    /// Answers the next call of `method` with `status` and `body`.
    /// Makes `user` the owner (`creator`) or an `administrator` of the
    /// group `chat`, for `getChatMember`.
    pub fn set_admin(&self, chat: i64, user: i64, status: &'static str) {
        assert!(matches!(status, "creator" | "administrator"), "{status}");
        self.inner.lock().unwrap().admins.insert((chat, user), status);
    }

    /// `getChatMember`'s result for the ids in `params`.
    fn chat_member(&self, params: &Value) -> Value {
        let number = |v: &Value| v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
        let (chat, user) = (number(&params["chat_id"]), number(&params["user_id"]));
        let (Some(chat), Some(user)) = (chat, user) else {
            return json!(null);
        };
        let status = self.inner.lock().unwrap().admins.get(&(chat, user)).copied();
        payloads::chat_member(user, status)
    }

    pub fn fail_next(&self, method: &str, status: u16, body: &str) {
        self.inner
            .lock()
            .unwrap()
            .scripted
            .entry(method.into())
            .or_default()
            .push_back((status, body.into()));
    }

    /// Every call of `method` so far.
    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.inner
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// The text of every message pushed so far.
    pub fn pushed_texts(&self) -> Vec<String> {
        self.inner.lock().unwrap().pushed_texts.clone()
    }

    /// The text messages the bot sent, in order, as they show now (after
    /// every edit): (chat, message id, text).
    pub fn sent_messages(&self) -> Vec<(i64, i64, String)> {
        self.inner.lock().unwrap().sent.clone()
    }

    /// Every text message the bot sends from now on, told as its
    /// `sendMessage` arrives: a bench with thousands of users waits on this
    /// instead of copying the whole record on every look.
    pub fn sent_feed(&self) -> mpsc::UnboundedReceiver<Sent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().unwrap().feeds.push((tx, false));
        rx
    }

    /// [`FakeBotApi::sent_feed`] with every successful `editMessageText`
    /// too: what a chat shows as it changes (a streamed answer's final
    /// text may come in an edit).
    pub fn shown_feed(&self) -> mpsc::UnboundedReceiver<Sent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().unwrap().feeds.push((tx, true));
        rx
    }

    /// Webhook mode: the update ids acknowledged so far, with who did it.
    pub fn acks(&self) -> HashMap<i64, Ack> {
        self.inner.lock().unwrap().acks.clone()
    }

    /// Webhook mode: POSTs answered with anything but 200, or not at all.
    pub fn failed_posts(&self) -> usize {
        self.inner.lock().unwrap().failed_posts
    }

    /// Updates queued and not yet acknowledged (webhook mode) or confirmed
    /// by an offset (polling).
    pub fn pending_updates(&self) -> usize {
        self.inner.lock().unwrap().updates.len()
    }

    /// Webhook mode, as Telegram does it once the bot called `setWebhook`:
    /// delivers every queued update (those queued before and after) by POST
    /// to one of `targets` (base URLs of the brokers behind a load balancer,
    /// chosen by update id), one at a time in update order, with the secret
    /// of the latest `setWebhook` call. An update not answered 200 within
    /// `patience` is posted again to the next target, after a pause that
    /// doubles from 10 ms to 1 s, until one takes it; only then comes the
    /// next. Runs until the process ends.
    pub fn deliver_to(&self, targets: Vec<String>, patience: Duration) {
        assert!(!targets.is_empty(), "a webhook needs somewhere to post");
        let api = self.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(patience)
                .build()
                .expect("an HTTP client");
            let mut version = api.version.subscribe();
            loop {
                let next = api.inner.lock().unwrap().updates.front().cloned();
                let Some((id, raw)) = next else {
                    if version.changed().await.is_err() {
                        return;
                    }
                    continue;
                };
                let ack = api.post_until_taken(&client, &targets, id, raw).await;
                let mut inner = api.inner.lock().unwrap();
                inner.updates.retain(|(queued, _)| *queued != id);
                inner.acks.insert(id, ack);
                drop(inner);
                api.changed();
            }
        });
    }

    /// Posts update `id` until a target answers 200.
    async fn post_until_taken(&self, client: &reqwest::Client, targets: &[String], id: i64, raw: String) -> Ack {
        let mut target = usize::try_from(id).unwrap_or(0) % targets.len();
        let mut pause = Duration::from_millis(10);
        let mut posts = Vec::new();
        loop {
            let secret = self.webhook_secret().await;
            posts.push((target, Instant::now()));
            let posted = client
                .post(format!("{}/telegram", targets[target]))
                .header("X-Telegram-Bot-Api-Secret-Token", secret)
                .header("content-type", "application/json")
                .body(raw.clone())
                .send()
                .await;
            if posted.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return Ack {
                    target,
                    at: Instant::now(),
                    posts,
                };
            }
            self.inner.lock().unwrap().failed_posts += 1;
            target = (target + 1) % targets.len();
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// The `secret_token` of the latest `setWebhook` call (waiting for
    /// one). The fake posts one update at a time, as Telegram does only
    /// for a webhook registered with `max_connections: 1` (its default is
    /// 40, in parallel): any other registration fails the test.
    async fn webhook_secret(&self) -> String {
        let mut version = self.version.subscribe();
        loop {
            if let Some((secret, connections)) = self.inner.lock().unwrap().webhook.clone() {
                assert_eq!(
                    connections.as_deref(),
                    Some("1"),
                    "the fake delivers one update at a time: register the webhook with max_connections 1"
                );
                return secret;
            }
            tokio::time::timeout(crate::PATIENCE, version.changed())
                .await
                .expect("the bot never called setWebhook")
                .expect("the fake Bot API stopped");
        }
    }

    /// The highest `getUpdates` offset the bot has sent.
    pub fn confirmed_offset(&self) -> i64 {
        self.inner.lock().unwrap().confirmed
    }

    /// Waits until `method` was called `n` times; panics past the deadline.
    pub async fn wait_for_calls(&self, method: &str, n: usize) -> Vec<Call> {
        self.wait_until(&format!("{n} {method} calls"), || {
            let calls = self.calls(method);
            (calls.len() >= n).then_some(calls)
        })
        .await
    }

    /// Waits until `check` returns something ([`crate::eventually`]).
    pub async fn wait_until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        crate::eventually(what, async || check()).await
    }

    fn record(&self, method: &str, params: Value, file: Option<(String, Vec<u8>)>, status: u16) {
        let call = Call {
            method: method.into(),
            params,
            file,
            at: Instant::now(),
            status,
        };
        self.inner.lock().unwrap().calls.push(call);
        self.changed();
    }

    fn scripted(&self, method: &str) -> Option<(u16, String)> {
        self.inner.lock().unwrap().scripted.get_mut(method)?.pop_front()
    }

    /// `getUpdates`: drops what the offset confirms, then answers with what
    /// is queued, at most `limit` updates (1-100, default 100, as Telegram
    /// does), waiting up to `timeout` seconds for something to arrive.
    async fn updates(&self, params: &Value) -> String {
        let offset = params["offset"].as_i64();
        let timeout = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0));
        let limit = params["limit"].as_u64().map_or(100, |limit| limit.clamp(1, 100)) as usize;
        let mut version = self.version.subscribe();
        if let Some(offset) = offset {
            let mut inner = self.inner.lock().unwrap();
            inner.updates.retain(|(id, _)| *id >= offset);
            inner.confirmed = inner.confirmed.max(offset);
        }
        let ready = || {
            let inner = self.inner.lock().unwrap();
            let ready: Vec<String> = inner.updates.iter().take(limit).map(|(_, raw)| raw.clone()).collect();
            (!ready.is_empty()).then_some(ready)
        };
        let wait = async {
            loop {
                if let Some(ready) = ready() {
                    return ready;
                }
                if version.changed().await.is_err() {
                    return Vec::new();
                }
            }
        };
        let ready = tokio::time::timeout(timeout, wait).await.unwrap_or_default();
        format!("[{}]", ready.join(","))
    }

    fn sent_message(&self, params: &Value, extra: (&str, Value)) -> Value {
        let mut inner = self.inner.lock().unwrap();
        inner.next_message_id += 1;
        let chat_id = chat_of(params);
        if let Some(text) = extra.1.as_str() {
            let id = inner.next_message_id;
            inner.sent.push((chat_id, id, text.to_string()));
            let sent = Sent {
                chat: chat_id,
                text: text.to_string(),
                at: Instant::now(),
                edited: false,
            };
            inner.feeds.retain(|(feed, _)| feed.send(sent.clone()).is_ok());
        }
        let mut message = json!({
            "message_id": inner.next_message_id,
            "date": chrono::Utc::now().timestamp(),
            "chat": chat(chat_id),
            "from": bot_user(),
        });
        message[extra.0] = extra.1;
        message
    }
}

fn chat_of(params: &Value) -> i64 {
    match &params["chat_id"] {
        Value::String(s) => s.parse::<i64>().unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

impl FakeBotApi {
    /// `editMessageText` as Telegram answers it: the edited message, or
    /// the description of its 400 when there is no such message of the
    /// bot's or nothing changes.
    fn edit_message(&self, params: &Value) -> Result<Value, String> {
        let bad = |what: &str| format!("Bad Request: {what}");
        let (chat_id, id) = (chat_of(params), params["message_id"].as_i64().unwrap_or(0));
        let text = params["text"].as_str().unwrap_or_default();
        if text.chars().count() > 4096 {
            return Err(bad("MESSAGE_TOO_LONG"));
        }
        let mut inner = self.inner.lock().unwrap();
        let Some(sent) = inner.sent.iter_mut().find(|(c, m, _)| (*c, *m) == (chat_id, id)) else {
            return Err(bad("message to edit not found"));
        };
        if sent.2 == text {
            return Err(bad(
                "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            ));
        }
        sent.2 = text.to_string();
        let edited = Sent {
            chat: chat_id,
            text: text.to_string(),
            at: Instant::now(),
            edited: true,
        };
        inner
            .feeds
            .retain(|(feed, edits)| !*edits || feed.send(edited.clone()).is_ok());
        Ok(json!({
            "message_id": id,
            "date": chrono::Utc::now().timestamp(),
            "edit_date": chrono::Utc::now().timestamp(),
            "chat": chat(chat_id),
            "from": bot_user(),
            "text": text,
        }))
    }
}

async fn handle(
    State(api): State<FakeBotApi>,
    Path((token, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    // Telegram's method names are case-insensitive; teloxide sends `GetMe`.
    let method = lower_camel(&method);
    let multipart = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let (params, file) = if multipart {
        read_multipart(Multipart::from_request(request, &()).await.unwrap()).await
    } else {
        let body = Bytes::from_request(request, &()).await.unwrap();
        (serde_json::from_slice(&body).unwrap_or_else(|_| json!({})), None)
    };
    if token != format!("bot{TOKEN}") {
        api.record(&method, params, file, 404);
        return reply(
            404,
            json!({"ok": false, "error_code": 404, "description": "Not Found"}).to_string(),
        );
    }
    if let Some((status, body)) = api.scripted(&method) {
        api.record(&method, params, file, status);
        return reply(status, body);
    }
    const KNOWN: [&str; 11] = [
        "getMe",
        "getChatMember",
        "getFile",
        "getUpdates",
        "sendMessage",
        "editMessageText",
        "sendDocument",
        "sendChatAction",
        "setMyCommands",
        "setWebhook",
        "deleteWebhook",
    ];
    if !KNOWN.contains(&method.as_str()) {
        api.record(&method, params, file, 404);
        return reply(
            404,
            json!({"ok": false, "error_code": 404, "description": "Not Found: method not found"}).to_string(),
        );
    }
    if method == "editMessageText" {
        let edited = api.edit_message(&params);
        api.record(&method, params, file, if edited.is_ok() { 200 } else { 400 });
        return match edited {
            Ok(message) => reply(200, json!({ "ok": true, "result": message }).to_string()),
            Err(description) => reply(
                400,
                json!({"ok": false, "error_code": 400, "description": description}).to_string(),
            ),
        };
    }
    if method == "setWebhook" {
        // Multipart or JSON: read each field as text.
        let text = |v: &Value| {
            v.as_str()
                .map(str::to_string)
                .or_else(|| v.as_u64().map(|n| n.to_string()))
        };
        let secret = text(&params["secret_token"]).unwrap_or_default();
        api.inner.lock().unwrap().webhook = Some((secret, text(&params["max_connections"])));
    }
    // Recorded on arrival, so a test can see a long poll that is waiting.
    api.record(&method, params.clone(), file, 200);
    let result = match method.as_str() {
        "getMe" => json!({
            "id": BOT_ID, "is_bot": true, "first_name": "Mnemo", "username": BOT_USERNAME,
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "has_main_web_app": false,
        }),
        "getUpdates" => return reply(200, format!(r#"{{"ok":true,"result":{}}}"#, api.updates(&params).await)),
        "sendMessage" => api.sent_message(&params, ("text", params["text"].clone())),
        "getFile" => return files::get_file(&api, &params),
        "getChatMember" => api.chat_member(&params),
        "sendDocument" => api.sent_message(&params, ("document", json!({"file_id": "doc", "file_unique_id": "d"}))),
        _ => json!(true),
    };
    reply(200, json!({ "ok": true, "result": result }).to_string())
}
