//! The `anthropic` backend speaks the Messages API: the exact request (with
//! its alternation and `max_tokens` rules), the reply, and its event stream.

use super::fake::{FakeServer, Reply, env};
use futures_util::StreamExt;
use mnemo::model::{ModelError, ModelRequest, StreamPart, Usage, build};
use mnemo_sessions::context::{Context, Turn};
use mnemo_sessions::record::Role;
use serde_json::json;

fn turn(role: Role, content: &str) -> Turn {
    Turn {
        role,
        content: content.into(),
    }
}

fn message(text: &str) -> serde_json::Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 30, "output_tokens": 5}
    })
}

/// `event: <type>` + `data: <json>` events, one chunk each.
fn events(items: &[serde_json::Value]) -> Vec<String> {
    items
        .iter()
        .map(|data| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap()))
        .collect()
}

fn text_delta(text: &str) -> serde_json::Value {
    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
}

#[tokio::test]
async fn sends_system_apart_merges_same_role_turns_and_authenticates_with_x_api_key() {
    let server = FakeServer::start(vec![Reply::Json(200, message("Gion."))]).await;
    let model = build(
        &server.anthropic(json!({})),
        &env(&[("ANTHROPIC_API_KEY", "sk-ant-test")]),
    )
    .unwrap();
    let context = super::context_of(
        "You are mnemo.\n\nSummary so far: a trip to Kyoto.",
        vec![
            turn(Role::User, "Which month is best?"),
            turn(Role::User, "We like hiking."),
            turn(Role::Assistant, "November."),
            turn(Role::Assistant, "The leaves turn then."),
        ],
    );

    let reply = model
        .complete(&ModelRequest::new(context, "Where to stay?"))
        .await
        .unwrap();

    assert_eq!(reply.text, "Gion.");
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 30,
            output_tokens: 5
        })
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.uri, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(
        sent.body,
        json!({
            "model": "test-model",
            "max_tokens": 1024,
            "system": "You are mnemo.\n\nSummary so far: a trip to Kyoto.",
            "messages": [
                {"role": "user", "content": "Which month is best?\n\nWe like hiking."},
                {"role": "assistant", "content": "November.\n\nThe leaves turn then."},
                {"role": "user", "content": "Where to stay?"}
            ]
        })
    );
}

#[tokio::test]
async fn a_trailing_user_turn_is_merged_with_the_message() {
    let server = FakeServer::start(vec![Reply::Json(200, message("ok"))]).await;
    let model = build(&server.anthropic(json!({"maxTokens": 64})), &env(&[])).unwrap();
    let context = Context {
        turns: vec![turn(Role::User, "first")],
        ..Default::default()
    };

    model.complete(&ModelRequest::new(context, "second")).await.unwrap();

    let body = &server.requests()[0].body;
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "first\n\nsecond"}])
    );
    assert_eq!(body["max_tokens"], json!(64));
    assert!(body.get("system").is_none());
}

#[tokio::test]
async fn streamed_text_deltas_arrive_in_order() {
    let server = FakeServer::start(vec![Reply::Sse(events(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        text_delta("Stay "),
        text_delta("in Gion."),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
        json!({"type": "message_stop"}),
    ]))])
    .await;
    let model = build(&server.anthropic(json!({})), &env(&[])).unwrap();

    let stream = model
        .stream(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap();
    let deltas: Vec<String> = stream
        .filter_map(|p| async move { p.unwrap().into_text() })
        .collect()
        .await;

    assert_eq!(deltas, vec!["Stay ", "in Gion."]);
    assert_eq!(server.requests()[0].body["stream"], json!(true));
}

#[tokio::test]
async fn a_stream_that_ends_before_message_stop_is_an_error() {
    let server = FakeServer::start(vec![Reply::Sse(events(&[
        json!({"type": "message_start", "message": {"id": "msg_1"}}),
        text_delta("Stay "),
    ]))])
    .await;
    let model = build(&server.anthropic(json!({})), &env(&[])).unwrap();

    let items: Vec<_> = model
        .stream(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap()
        .collect()
        .await;

    assert_eq!(items[0].as_ref().unwrap(), &StreamPart::Text("Stay ".into()));
    assert!(
        matches!(items.last(), Some(Err(ModelError::Protocol { .. }))),
        "{items:?}"
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_it_with_a_typed_error() {
    let server = FakeServer::start(vec![Reply::Sse(events(&[
        text_delta("Stay "),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]))])
    .await;
    let model = build(&server.anthropic(json!({})), &env(&[])).unwrap();

    let items: Vec<_> = model
        .stream(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap()
        .collect()
        .await;

    assert_eq!(items.len(), 2, "{items:?}");
    assert!(matches!(items[1], Err(ModelError::Unavailable { .. })), "{items:?}");
}

struct Recorder;

#[async_trait::async_trait]
impl mnemo::model::ToolExecutor for Recorder {
    fn specs(&self) -> Vec<mnemo::model::ToolSpec> {
        vec![mnemo::model::ToolSpec {
            name: "memory_forget",
            description: "forget",
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}}),
        }]
    }
    async fn call(&self, call: &mnemo::model::ToolCall) -> mnemo::model::ToolResult {
        mnemo::model::ToolResult {
            call_id: call.id.clone(),
            content: format!("forgot {}", call.arguments["key"]),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn tool_use_blocks_come_back_as_calls_and_results_go_out_as_tool_result_blocks() {
    let tool_use = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
        "content": [{"type": "text", "text": "Let me do that."},
                    {"type": "tool_use", "id": "toolu_1", "name": "memory_forget", "input": {"key": "tea"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 30, "output_tokens": 5}
    });
    let server = FakeServer::start(vec![Reply::Json(200, tool_use), Reply::Json(200, message("Done."))]).await;
    let model = build(
        &server.anthropic(json!({})),
        &env(&[("ANTHROPIC_API_KEY", "sk-ant-test")]),
    )
    .unwrap();
    let limits = mnemo::model::ToolLimits {
        max_rounds: 1,
        budget_chars: 10_000,
    };
    let request = ModelRequest::new(Context::default(), "forget my tea");
    let reply = mnemo::model::tools::answer(&*model, request, Some(&Recorder), limits)
        .await
        .unwrap();

    assert_eq!(reply.text, "Done.");
    let sent = server.requests();
    assert_eq!(sent[0].body["tools"][0]["name"], "memory_forget");
    assert!(sent[0].body["tools"][0]["input_schema"].is_object());
    assert_eq!(sent[0].body["tool_choice"], json!({"type": "auto"}));
    assert_eq!(
        sent[1].body["tool_choice"],
        json!({"type": "none"}),
        "the last round must answer"
    );
    assert_eq!(
        sent[1].body["messages"],
        json!([
            {"role": "user", "content": "forget my tea"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me do that."},
                {"type": "tool_use", "id": "toolu_1", "name": "memory_forget", "input": {"key": "tea"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "forgot \"tea\"", "is_error": false}
            ]}
        ])
    );
}
