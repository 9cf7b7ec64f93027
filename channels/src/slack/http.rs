//! The Events API over HTTP, served by axum (as the Telegram webhook is):
//! Slack's signed POSTs to [`EVENTS_PATH`] (JSON event callbacks, the
//! `url_verification` challenge) and [`COMMANDS_PATH`] (form-encoded slash
//! commands). Other paths get 404, other methods 405.
//!
//! Every request is verified ([`super::signature`]) before its body is
//! parsed; a bad or stale signature gets 401 and nothing else happens.
//! Bodies are capped at 1 MiB (413, at once when `Content-Length` says
//! more, before the body is read) and must arrive within a deadline
//! (408), since the only client is Slack (normally behind the operator's
//! TLS proxy).
//!
//! An event is answered 200 only once the broker has taken its message
//! (stored it, or refused and answered it), waiting at most
//! [`super::receipts::TAKE_WAIT`], under Slack's 3 s; otherwise 503, and
//! Slack retries it (at once, after a minute, after five). A retry of a
//! message not taken is handed over again; one of a taken message is
//! answered 200 without a second handover. A slash command is answered 200
//! once it is in the broker's inbox. Never logs bodies.

use super::Shared;
use super::receipts::Redelivery;
use super::signature;
use crate::{ChannelError, Inbound, Shutdown};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use slack_morphism::prelude::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub const EVENTS_PATH: &str = "/slack/events";
pub const COMMANDS_PATH: &str = "/slack/commands";

const MAX_BODY: usize = 1024 * 1024;
/// Slack gives up after 3 s; a client slower than this is not Slack.
const READ_DEADLINE: Duration = Duration::from_secs(10);
/// The header that numbers Slack's retries of an event (absent on the first
/// delivery).
const RETRY_NUM: &str = "x-slack-retry-num";
/// Slack retries an event at most this often; after its last retry it
/// delivers it no more.
const SLACK_RETRIES: u32 = 3;

/// What every request handler reaches.
#[derive(Clone)]
struct Intake {
    shared: Arc<Shared>,
    secret: Arc<String>,
    inbox: mpsc::Sender<Inbound>,
}

/// Serves the Events API on `listen` until `shutdown` fires or the broker
/// stops taking messages.
pub(super) async fn run(
    shared: Arc<Shared>,
    secret: String,
    listen: SocketAddr,
    inbox: mpsc::Sender<Inbound>,
    mut shutdown: Shutdown,
) -> Result<(), ChannelError> {
    let fail = |reason: String| ChannelError::Receive {
        channel: "slack".into(),
        reason,
    };
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| fail(format!("could not listen on {listen} (channels.slack.listen): {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| fail(format!("listener has no address: {e}")))?;
    shared.listening.send_replace(Some(addr));
    shared.link.up();
    tracing::info!(%addr, "slack: Events API listening");
    let intake = Intake {
        shared,
        secret: Arc::new(secret),
        inbox: inbox.clone(),
    };
    let app = Router::new()
        .route(EVENTS_PATH, post(event))
        .route(COMMANDS_PATH, post(command))
        .with_state(intake);
    let stop = async move {
        tokio::select! {
            _ = super::stopped(&mut shutdown) => {}
            _ = inbox.closed() => {}
        }
    };
    crate::http1::serve(listener, app, stop).await;
    tracing::info!("slack: Events API stopped");
    Ok(())
}

/// The body of `request` once its signature is verified; otherwise the
/// response that refuses it.
async fn verified(intake: &Intake, path: &str, request: Request) -> Result<Bytes, Response> {
    let headers: HeaderMap = request.headers().clone();
    // A declared length over the cap is refused before a byte of the body
    // is read (the connection is closed, not drained).
    if declared_length(&headers).is_some_and(|n| n > MAX_BODY as u64) {
        tracing::warn!(path, "slack: request refused, its Content-Length is over the 1 MiB cap");
        return Err(StatusCode::PAYLOAD_TOO_LARGE.into_response());
    }
    let body = match tokio::time::timeout(READ_DEADLINE, axum::body::to_bytes(request.into_body(), MAX_BODY)).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return Err(StatusCode::PAYLOAD_TOO_LARGE.into_response()),
        Err(_) => return Err(StatusCode::REQUEST_TIMEOUT.into_response()),
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let verdict = signature::verify(
        &intake.secret,
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        chrono::Utc::now().timestamp(),
    );
    if let Err(refused) = verdict {
        tracing::warn!(path, reason = %refused, "slack: request refused");
        return Err(StatusCode::UNAUTHORIZED.into_response());
    }
    Ok(body)
}

/// The request's `Content-Length`, when it has a readable one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// One POST to [`EVENTS_PATH`].
async fn event(State(intake): State<Intake>, request: Request) -> Response {
    let redelivery = redelivery(request.headers());
    let body = match verified(&intake, EVENTS_PATH, request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let handed = match serde_json::from_slice::<SlackPushEvent>(&body) {
        Ok(SlackPushEvent::UrlVerification(v)) => return (StatusCode::OK, Body::from(v.challenge)).into_response(),
        Ok(SlackPushEvent::EventCallback(cb)) => intake.shared.on_event(&cb, redelivery, &intake.inbox).await,
        Ok(SlackPushEvent::AppRateLimited(_)) => {
            tracing::warn!("slack: Slack is dropping events for this app (app_rate_limited)");
            true
        }
        Err(_) => {
            tracing::warn!("slack: unreadable event body");
            return StatusCode::BAD_REQUEST.into_response();
        }
    };
    answer(handed)
}

/// One POST to [`COMMANDS_PATH`].
async fn command(State(intake): State<Intake>, request: Request) -> Response {
    let body = match verified(&intake, COMMANDS_PATH, request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let Ok(fields) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body) else {
        tracing::warn!("slack: unreadable slash command");
        return StatusCode::BAD_REQUEST.into_response();
    };
    if fields.iter().any(|(k, _)| k == "ssl_check") {
        return StatusCode::OK.into_response();
    }
    let object: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    match serde_json::from_value::<SlackCommandEvent>(serde_json::Value::Object(object)) {
        Ok(command) => answer(intake.shared.on_command(&command, &intake.inbox).await),
        Err(_) => {
            tracing::warn!("slack: unreadable slash command");
            StatusCode::BAD_REQUEST.into_response()
        }
    }
}

/// Whether Slack delivers this event again if it is not answered 200.
fn redelivery(headers: &HeaderMap) -> Redelivery {
    let retry = headers
        .get(RETRY_NUM)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    match retry >= SLACK_RETRIES {
        true => Redelivery::Never,
        false => Redelivery::Follows,
    }
}

/// 200 once the message is safe with the broker (or there was none);
/// otherwise 503, which Slack retries (never with `X-Slack-No-Retry`).
fn answer(kept: bool) -> Response {
    match kept {
        true => StatusCode::OK.into_response(),
        false => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}
