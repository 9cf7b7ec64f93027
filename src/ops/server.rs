//! The ops HTTP endpoint (axum), bound to `ops.listen`: `/healthz` (the
//! process answers: always 200, `ok` and then the chat model's health on a
//! line of its own), `/readyz` ([`super::ready`]: 200 or 503 with one line
//! per check) and `/metrics` (Prometheus text, refreshed from the app's
//! queues and the channels' links at scrape time). It serves nothing else
//! and reads nothing a user wrote.

use super::metered;
use super::metrics::metrics;
use super::ready;
use crate::app::App;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use mnemo_channels::{Channel, LinkState};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone)]
struct Ops {
    app: App,
    channels: Arc<Vec<Arc<dyn Channel>>>,
    state_root: PathBuf,
}

/// Binds `addr` now (so a taken port fails the start) and serves until
/// `stop` fires.
pub async fn start(
    addr: SocketAddr,
    app: App,
    channels: Vec<Arc<dyn Channel>>,
    state_root: PathBuf,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("ops endpoint: cannot listen on {addr} (ops.listen): {e}"))?;
    let bound = listener.local_addr()?;
    let ops = Ops {
        app,
        channels: Arc::new(channels),
        state_root,
    };
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(scrape))
        .with_state(ops);
    tracing::info!(addr = %bound, "ops endpoint listening (/healthz, /readyz, /metrics)");
    Ok(tokio::spawn(async move {
        let stop = async move { crate::shutdown::fired(&mut stop).await };
        mnemo_channels::http1::serve(listener, router, stop).await;
    }))
}

/// Liveness: 200 while the process answers, whatever the model does (a
/// restart would not mend a model outage); the model's health is the
/// second line, for a person or a probe that wants it.
async fn healthz() -> String {
    format!("ok\n{}\n", metered::model_health_line())
}

async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    let checks = run_checks(&ops).await;
    let ready = all_pass(&checks);
    let mut body = String::from(if ready { "ready\n" } else { "not ready\n" });
    for check in &checks {
        match &check.failure {
            None => body += &format!("ok {}\n", check.name),
            Some(why) => body += &format!("failing {}: {why}\n", check.name),
        }
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

async fn run_checks(ops: &Ops) -> Vec<ready::Check> {
    let store = ops.app.parts().store.as_ref();
    ready::checks(ops.state_root.clone(), store, &ops.channels).await
}

fn all_pass(checks: &[ready::Check]) -> bool {
    !checks.is_empty() && checks.iter().all(|c| c.failure.is_none())
}

async fn scrape(State(ops): State<Ops>) -> impl IntoResponse {
    let m = metrics();
    m.ready(all_pass(&run_checks(&ops).await));
    let (users, messages) = ops.app.queue_depths();
    m.queues(users, messages);
    for channel in ops.channels.iter() {
        let link = channel.link();
        m.link(channel.name(), link.state == LinkState::Connected, link.connects);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}
