//! A streamed call is one call (issue 38): `timeoutSecs` bounds it from
//! the request to the reply's end, whatever the server sends meanwhile.
//! Keep-alive comments before any text end it as a timeout when the
//! deadline comes (at opening, where retries and the fallback act); words
//! without end are cut at the deadline, what came kept. And a server that
//! ignores `stream: true` and answers one `application/json` reply is read
//! as that reply, text, tool calls and usage, on both backends.

use super::fake::{FakeServer, Reply, env, sse_data};
use futures_util::StreamExt;
use mnemo::model::{ModelError, ModelRequest, StreamPart, ToolCall, Usage, build};
use serde_json::json;
use std::time::{Duration, Instant};

fn hello() -> ModelRequest {
    ModelRequest::new(Default::default(), "hello")
}

/// The call's deadline (1 s) plus room for a loaded machine, and well
/// under the 5 s a test waits before calling it a hang.
const WITHIN: Duration = Duration::from_secs(4);

/// Reads the whole stream of `stream()`, or fails when it outlives 5 s.
async fn read_all(model: &dyn mnemo::model::Model) -> Result<Vec<Result<StreamPart, ModelError>>, ModelError> {
    let read = async {
        let parts = model.stream(&hello()).await?;
        Ok(parts.collect::<Vec<_>>().await)
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the streamed call outlived its deadline")
}

fn openai_text(text: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}).to_string()
}

#[tokio::test]
async fn keep_alive_comments_before_any_text_end_in_a_timeout_at_the_deadline() {
    let role = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}).to_string();
    let mut chunks = vec![": ping\n\n".to_string()];
    chunks.extend(sse_data(&[&role]));
    let server = FakeServer::start(vec![Reply::SseThenKeepAlive(chunks)]).await;
    let model = build(&server.openai(json!({"timeoutSecs": 1, "maxRetries": 2})), &env(&[])).unwrap();

    let started = Instant::now();
    let err = read_all(&*model).await.unwrap_err();

    assert!(
        matches!(err, ModelError::Timeout { after } if after == Duration::from_secs(1)),
        "{err:?}"
    );
    assert!(started.elapsed() < WITHIN, "{:?}", started.elapsed());
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn an_openai_reply_kept_open_with_pings_is_cut_at_the_deadline_after_its_text() {
    let chunks = sse_data(&[&openai_text("The first "), &openai_text("words")]);
    let server = FakeServer::start(vec![Reply::SseThenKeepAlive(chunks)]).await;
    let model = build(&server.openai(json!({"timeoutSecs": 1})), &env(&[])).unwrap();

    let started = Instant::now();
    let items = read_all(&*model).await.unwrap();

    assert!(started.elapsed() < WITHIN, "{:?}", started.elapsed());
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &StreamPart::Text("The first ".into()));
    assert!(matches!(items[2], Err(ModelError::Timeout { .. })), "{items:?}");
}

#[tokio::test]
async fn an_anthropic_reply_of_words_without_end_is_cut_at_the_deadline() {
    let event = |data: serde_json::Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    let word =
        event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "and "}}));
    let chunks = vec![
        event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
    ];
    let server = FakeServer::start(vec![Reply::SseEndless(chunks, word)]).await;
    let model = build(&server.anthropic(json!({"timeoutSecs": 1})), &env(&[])).unwrap();

    let started = Instant::now();
    let items = read_all(&*model).await.unwrap();

    assert!(started.elapsed() < WITHIN, "{:?}", started.elapsed());
    let (last, words) = items.split_last().unwrap();
    assert!(matches!(last, Err(ModelError::Timeout { .. })), "{last:?}");
    assert!(words.len() >= 3, "the words that came are kept: {words:?}");
    assert!(
        words
            .iter()
            .all(|w| w.as_ref().unwrap() == &StreamPart::Text("and ".into()))
    );
}

#[tokio::test]
async fn a_json_completion_to_a_streaming_openai_request_is_read_as_the_reply() {
    let whole = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Stay in Gion."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7}
    });
    let server = FakeServer::start(vec![Reply::Json(200, whole)]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let items = read_all(&*model).await.unwrap();

    assert_eq!(server.requests()[0].body["stream"], true, "a stream was asked for");
    let parts: Vec<StreamPart> = items.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        parts,
        [
            StreamPart::Text("Stay in Gion.".into()),
            StreamPart::Usage(Usage {
                input_tokens: 42,
                output_tokens: 7
            })
        ]
    );
}

#[tokio::test]
async fn a_json_completion_with_tool_calls_to_a_streaming_request_yields_the_calls() {
    let calls = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "memory_search", "arguments": "{\"query\":\"tea\"}"}}]}}]
    });
    let server = FakeServer::start(vec![Reply::Json(200, calls)]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let parts: Vec<StreamPart> = read_all(&*model)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();

    assert_eq!(
        parts,
        [StreamPart::Call(ToolCall {
            id: "call_1".into(),
            name: "memory_search".into(),
            arguments: json!({"query": "tea"}),
        })]
    );
}

#[tokio::test]
async fn a_json_message_to_a_streaming_anthropic_request_is_read_as_the_reply() {
    let whole = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
        "content": [{"type": "text", "text": "Stay in Gion."}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 30, "output_tokens": 5}
    });
    let server = FakeServer::start(vec![Reply::Json(200, whole)]).await;
    let model = build(&server.anthropic(json!({})), &env(&[])).unwrap();

    let items = read_all(&*model).await.unwrap();

    assert_eq!(server.requests()[0].body["stream"], true);
    assert_eq!(items[0].as_ref().unwrap(), &StreamPart::Text("Stay in Gion.".into()));
}

#[tokio::test]
async fn a_json_body_that_is_no_reply_is_still_unreadable() {
    let server = FakeServer::start(vec![Reply::Json(200, json!({"unexpected": true}))]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let err = read_all(&*model).await.unwrap_err();

    assert!(matches!(err, ModelError::Protocol { .. }), "{err:?}");
}
