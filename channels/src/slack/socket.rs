//! Socket Mode through slack-morphism's listener: `apps.connections.open`
//! with the app-level token gives a websocket URL (so an `apiUrl` test
//! server can hand out `ws://127.0.0.1/…`); the listener answers `hello`,
//! reconnects on a dropped socket or a `disconnect` envelope, and acks each
//! envelope by `envelope_id` after our callback returns.
//!
//! An envelope is acked only once its message is in the broker's inbox, so
//! a socket that drops first gets it redelivered by Slack (and the event-id
//! memory keeps the redelivery from being answered twice). Never logs
//! envelope contents: they carry message text.

use super::Shared;
use super::web::Client;
use crate::{ChannelError, Inbound, Shutdown};
use slack_morphism::errors::SlackClientError;
use slack_morphism::listener::HttpStatusCode;
use slack_morphism::prelude::*;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Seconds between attempts when `apps.connections.open` itself fails.
const RECONNECT_SECS: u64 = 5;

/// What the listener's callbacks (plain `fn`s) reach through its user state.
struct Route {
    shared: Arc<Shared>,
    inbox: mpsc::Sender<Inbound>,
}

/// The callback failed on our side: the envelope is not acked, so Slack
/// delivers it again.
#[derive(Debug, thiserror::Error)]
#[error("the broker is not taking messages")]
struct NotHandedOver;

pub(super) async fn run(
    shared: Arc<Shared>,
    app_token: &str,
    inbox: mpsc::Sender<Inbound>,
    mut shutdown: Shutdown,
) -> Result<(), ChannelError> {
    let fail = |reason: String| ChannelError::Receive {
        channel: "slack".into(),
        reason,
    };
    let token = SlackApiToken::new(SlackApiTokenValue(app_token.to_string()));
    let web = &shared.web;
    if super::at_startup(&mut shutdown, || web.check_app_token(&token))
        .await?
        .is_none()
    {
        return Ok(());
    }

    let route = Arc::new(Route {
        shared: shared.clone(),
        inbox: inbox.clone(),
    });
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(shared.web.client.clone())
            .with_error_handler(on_error)
            .with_user_state(route),
    );
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_hello_events(on_hello)
        .with_push_events(on_push)
        .with_command_events(on_command);
    // One connection, as Slack's own SDKs keep: redeliveries after a drop
    // cover the gap, and ordering stays simple.
    let config = SlackClientSocketModeConfig::new()
        .with_max_connections_count(1)
        .with_reconnect_timeout_in_seconds(RECONNECT_SECS);
    let listener = SlackClientSocketModeListener::new(&config, environment, callbacks);
    listener
        .listen_for(&token)
        .await
        .map_err(|_| fail("could not register the Socket Mode token".into()))?;
    listener.start().await;
    tracing::info!("slack: Socket Mode started");
    tokio::select! {
        _ = super::stopped(&mut shutdown) => {}
        _ = inbox.closed() => {}
    }
    listener.shutdown().await;
    tracing::info!("slack: Socket Mode stopped");
    Ok(())
}

async fn route(state: &SlackClientEventsUserState) -> Option<Arc<Route>> {
    state.read().await.get_user_state::<Arc<Route>>().cloned()
}

/// Generic over the hello event: slack-morphism does not export its type.
async fn on_hello<Hello: Send>(_: Hello, _: Arc<Client>, state: SlackClientEventsUserState) {
    // Every hello is a new connection: counted even if the drop before it
    // raised no error we saw.
    if let Some(route) = route(&state).await {
        route.shared.link.session();
    }
    tracing::info!("slack: Socket Mode connected");
}

async fn on_push(
    ev: SlackPushEventCallback,
    _: Arc<Client>,
    state: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let route = route(&state).await.ok_or(NotHandedOver)?;
    route
        .shared
        .on_event(&ev, &route.inbox)
        .await
        .map_err(|_| NotHandedOver)?;
    Ok(())
}

/// The ack carries no message: the answer comes from the broker through the
/// command's `response_url`, visible only to the person who typed it.
async fn on_command(
    ev: SlackCommandEvent,
    _: Arc<Client>,
    state: SlackClientEventsUserState,
) -> UserCallbackResult<SlackCommandEventResponse> {
    let route = route(&state).await.ok_or(NotHandedOver)?;
    route
        .shared
        .on_command(&ev, &route.inbox)
        .await
        .map_err(|_| NotHandedOver)?;
    Ok(SlackCommandEventResponse::new(SlackMessageContent::new()))
}

/// Logs what went wrong by kind only (errors may quote envelopes), and tells
/// the listener whether to ack: not when the broker could not take it.
fn on_error(
    err: Box<dyn std::error::Error + Send + Sync>,
    _: Arc<Client>,
    state: SlackClientEventsUserState,
) -> HttpStatusCode {
    if err.downcast_ref::<NotHandedOver>().is_some() {
        tracing::warn!("slack: envelope not acked: the broker is not taking messages");
        return HttpStatusCode::INTERNAL_SERVER_ERROR;
    }
    match err.downcast_ref::<SlackClientError>() {
        Some(SlackClientError::ProtocolError(_)) => tracing::warn!("slack: unreadable Socket Mode envelope skipped"),
        Some(SlackClientError::SocketModeProtocolError(_)) => {
            // A plain fn callback: the state lock is async, so try without waiting.
            if let Ok(state) = state.try_read()
                && let Some(route) = state.get_user_state::<Arc<Route>>()
            {
                route.shared.link.down();
            }
            tracing::warn!("slack: Socket Mode connection error; reconnecting")
        }
        Some(_) | None => tracing::warn!("slack: Socket Mode error"),
    }
    HttpStatusCode::OK
}
