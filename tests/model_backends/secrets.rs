//! Keys never reach an error message, its Debug form, or `describe`.

use super::fake::{FakeServer, Reply, closed_port_url, env};
use mnemo::model::{ModelError, ModelRequest, build, redact};
use mnemo_sessions::context::Context;
use serde_json::json;

const KEY: &str = "SECRET-sk-live-4242";

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains("SECRET"), "{what} leaks the key: {text}");
}

#[tokio::test]
async fn a_key_in_the_base_url_query_never_shows() {
    let mut cfg = mnemo::model::ModelConfig::new(mnemo::model::Provider::Openai, "m");
    cfg.base_url = Some(format!("{}?key=SECRET", closed_port_url("/v1").await));
    cfg.max_retries = 0;
    let model = build(&cfg, &env(&[])).unwrap();

    let err = model
        .complete(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap_err();

    assert!(matches!(err, ModelError::Unavailable { .. }), "{err:?}");
    assert_hidden("Display", &err.to_string());
    assert_hidden("Debug", &format!("{err:?}"));
    assert_hidden("describe", &model.describe());
    assert!(model.describe().contains("key=[REDACTED]"), "{}", model.describe());
}

#[tokio::test]
async fn a_401_body_echoing_the_key_never_shows_it() {
    let echo = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}")}});
    let server = FakeServer::start(vec![Reply::Json(401, echo)]).await;
    let model = build(&server.openai(json!({})), &env(&[("OPENAI_API_KEY", KEY)])).unwrap();

    let err = model
        .complete(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap_err();

    assert!(matches!(err, ModelError::Auth { status: 401, .. }), "{err:?}");
    assert!(err.to_string().contains("Incorrect API key provided"), "{err}");
    assert_hidden("Display", &err.to_string());
    assert_hidden("Debug", &format!("{err:?}"));
}

#[tokio::test]
async fn an_anthropic_key_is_kept_out_of_errors_too() {
    let server = FakeServer::start(vec![Reply::Json(
        403,
        json!({"error": {"type": "permission_error", "message": format!("key {KEY} lacks access")}}),
    )])
    .await;
    let model = build(&server.anthropic(json!({})), &env(&[("ANTHROPIC_API_KEY", KEY)])).unwrap();

    let err = model
        .complete(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap_err();

    assert!(matches!(err, ModelError::Auth { status: 403, .. }), "{err:?}");
    assert_hidden("Display", &err.to_string());
    assert_hidden("Debug", &format!("{err:?}"));
}

#[test]
fn redact_is_there_for_the_broker_to_reuse() {
    let line = format!("GET https://h/x?token=abc&q=1 with x-api-key: {KEY}");
    assert_eq!(
        redact(&line, &[KEY]),
        "GET https://h/x?token=[REDACTED]&q=1 with x-api-key: [REDACTED]"
    );
}
