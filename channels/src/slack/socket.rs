//! Socket Mode through slack-morphism's listener: `apps.connections.open`
//! with the app-level token gives a websocket URL (so an `apiUrl` test
//! server can hand out `ws://127.0.0.1/…`); the listener answers `hello`,
//! reconnects on a dropped socket or a `disconnect` envelope, and acks each
//! envelope by `envelope_id` after our callback returns.
//!
//! An `events_api` envelope is acked only once the broker has taken its
//! message (stored it, or refused and answered it), waiting at most
//! [`super::receipts::TAKE_WAIT`] (Slack's deadline is 3 s); otherwise it
//! is left unacked and Slack delivers it again, so a crash between the
//! handover and the store loses nothing acked. The receipts keep a
//! redelivery of a taken message from reaching the broker twice. A
//! `slash_commands` envelope is acked once the command is in the inbox.
//!
//! slack-morphism reads a connection's envelopes one at a time (it awaits
//! each callback before reading the next frame), so the wait also holds
//! back the envelopes behind it; the broker stores on intake, so it is
//! normally a few milliseconds. Never logs envelope contents: they carry
//! message text.

use super::Shared;
use super::receipts::Redelivery;
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

/// The broker has not taken the envelope's message (refused to keep it, not
/// in time, or stopped): [`on_error`] has it left unacked, so Slack
/// delivers it again.
#[derive(Debug, thiserror::Error)]
#[error("the broker has not taken the message")]
struct NotTaken;

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
    let route = route(&state).await.ok_or(NotTaken)?;
    // The envelope's `retry_attempt` does not reach us: another try is assumed.
    match route.shared.on_event(&ev, Redelivery::Follows, &route.inbox).await {
        true => Ok(()),
        false => Err(NotTaken.into()),
    }
}

/// Acked once the command is in the inbox, not once taken
/// (`Shared::on_command` says why). The ack carries no message: the answer
/// comes from the broker through the command's `response_url`, visible only
/// to the person who typed it.
async fn on_command(
    ev: SlackCommandEvent,
    _: Arc<Client>,
    state: SlackClientEventsUserState,
) -> UserCallbackResult<SlackCommandEventResponse> {
    let route = route(&state).await.ok_or(NotTaken)?;
    match route.shared.on_command(&ev, &route.inbox).await {
        true => Ok(SlackCommandEventResponse::new(SlackMessageContent::new())),
        false => Err(NotTaken.into()),
    }
}

/// Logs what went wrong by kind only (errors may quote envelopes), and tells
/// the listener whether to ack: not when the broker has not taken the
/// message. slack-morphism (2.x, `clients_manager_listener.rs`) passes a
/// callback's `Err` here and sends the envelope's ack frame only if the
/// status returned is a success (2xx); any other status sends nothing, and
/// Slack delivers the envelope again.
fn on_error(
    err: Box<dyn std::error::Error + Send + Sync>,
    _: Arc<Client>,
    state: SlackClientEventsUserState,
) -> HttpStatusCode {
    if err.downcast_ref::<NotTaken>().is_some() {
        tracing::info!("slack: envelope not acked (its message is not taken); Slack will deliver it again");
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
