//! Retries, timeouts and the fallback model, as a person waiting for a
//! reply experiences them: transient failures are retried (honouring
//! `Retry-After`), our own mistakes are not, and a dead model hands over to
//! its fallback.

use super::fake::{FakeServer, Reply, closed_port_url, env};
use futures_util::StreamExt;
use mnemo::model::{ModelConfig, ModelError, ModelRequest, build, build_serving};
use mnemo_sessions::context::Context;
use serde_json::json;
use std::time::{Duration, Instant};

fn ok(text: &str) -> Reply {
    Reply::Json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}),
    )
}

fn hello() -> ModelRequest {
    ModelRequest::new(Context::default(), "hello")
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_once_after_the_asked_wait() {
    let server = FakeServer::start(vec![
        Reply::JsonWithHeaders(
            429,
            vec![("retry-after", "1")],
            json!({"error": {"message": "slow down"}}),
        ),
        ok("hi"),
    ])
    .await;
    let model = build(&server.openai(json!({"maxRetries": 3})), &env(&[])).unwrap();

    let started = Instant::now();
    let reply = model.complete(&hello()).await.unwrap();

    assert_eq!(reply.text, "hi");
    assert_eq!(server.requests().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn shutdown_ends_a_retry_wait_and_the_call_fails_with_the_last_error() {
    let server = FakeServer::start(vec![Reply::JsonWithHeaders(
        429,
        vec![("retry-after", "60")],
        json!({"error": {"message": "slow down"}}),
    )])
    .await;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let model = build_serving(&server.openai(json!({"maxRetries": 3})), &env(&[]), "model", shutdown).unwrap();
    let call = tokio::spawn(async move { model.complete(&hello()).await });
    // The bound only keeps a broken build from hanging the suite: the wait
    // shutdown must cut short is 60 s per retry.
    let err = tokio::time::timeout(Duration::from_secs(30), async {
        while server.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.send_replace(true);
        call.await
    })
    .await
    .expect("the wait ended on shutdown")
    .unwrap()
    .unwrap_err();
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1, "no retry after shutdown");
}

#[tokio::test]
async fn server_errors_are_retried_max_retries_times_then_reported_as_unavailable() {
    let server = FakeServer::start(vec![Reply::Json(500, json!({"error": {"message": "boom"}}))]).await;
    let model = build(&server.openai(json!({"maxRetries": 2})), &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(matches!(err, ModelError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("boom"), "{err}");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_401_is_not_retried_and_is_an_auth_error() {
    let server = FakeServer::start(vec![Reply::Json(401, json!({"error": {"message": "bad key"}}))]).await;
    let model = build(&server.openai(json!({"maxRetries": 3})), &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(matches!(err, ModelError::Auth { status: 401, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn other_client_errors_are_not_retried() {
    let server = FakeServer::start(vec![Reply::Json(
        400,
        json!({"error": {"message": "context too long"}}),
    )])
    .await;
    let model = build(&server.openai(json!({"maxRetries": 3})), &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(matches!(err, ModelError::BadRequest { status: 400, .. }), "{err:?}");
    assert!(err.to_string().contains("context too long"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_slow_server_is_a_timeout() {
    let server = FakeServer::start(vec![Reply::Slow(Duration::from_secs(30))]).await;
    let model = build(&server.openai(json!({"timeoutSecs": 1, "maxRetries": 2})), &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(
        matches!(err, ModelError::Timeout { after } if after == Duration::from_secs(1)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
    assert_eq!(
        err.user_message(),
        "The model took too long to answer. Your message is saved; please try again in a moment."
    );
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_unavailable() {
    let mut cfg = ModelConfig::new(mnemo::model::Provider::Openai, "m");
    cfg.base_url = Some(closed_port_url("/v1").await);
    cfg.max_retries = 1;
    let model = build(&cfg, &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(matches!(err, ModelError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("could not connect"), "{err}");
}

#[tokio::test]
async fn the_fallback_answers_when_the_primary_stays_unavailable() {
    let primary = FakeServer::start(vec![Reply::Json(503, json!({"error": {"message": "overloaded"}}))]).await;
    let backup = FakeServer::start(vec![ok("from the fallback")]).await;
    let mut cfg = primary.openai(json!({"maxRetries": 1}));
    cfg.fallback = Some(Box::new(backup.openai(json!({"model": "backup-model"}))));
    let model = build(&cfg, &env(&[])).unwrap();

    let reply = model.complete(&hello()).await.unwrap();

    assert_eq!(reply.text, "from the fallback");
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(backup.requests()[0].body["model"], "backup-model");
    assert!(
        model.describe().contains("fallback: openai backup-model"),
        "{}",
        model.describe()
    );
}

#[tokio::test]
async fn the_fallback_also_serves_streams_that_cannot_open() {
    let primary = FakeServer::start(vec![Reply::Json(500, json!({}))]).await;
    let backup = FakeServer::start(vec![Reply::Sse(super::fake::sse_data(&[
        r#"{"choices":[{"delta":{"content":"backup"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]))])
    .await;
    let mut cfg = primary.openai(json!({}));
    cfg.fallback = Some(Box::new(backup.openai(json!({}))));
    let model = build(&cfg, &env(&[])).unwrap();

    let deltas: Vec<String> = model
        .stream(&hello())
        .await
        .unwrap()
        .filter_map(|p| async move { p.unwrap().into_text() })
        .collect()
        .await;

    assert_eq!(deltas, vec!["backup"]);
}

#[tokio::test]
async fn the_fallback_is_not_used_when_the_primary_refuses_our_key() {
    let primary = FakeServer::start(vec![Reply::Json(401, json!({"error": {"message": "bad key"}}))]).await;
    let backup = FakeServer::start(vec![ok("from the fallback")]).await;
    let mut cfg = primary.openai(json!({}));
    cfg.fallback = Some(Box::new(backup.openai(json!({}))));
    let model = build(&cfg, &env(&[])).unwrap();

    let err = model.complete(&hello()).await.unwrap_err();

    assert!(matches!(err, ModelError::Auth { .. }), "{err:?}");
    assert!(backup.requests().is_empty());
}
