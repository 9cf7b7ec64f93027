//! The `openai` backend speaks OpenAI-compatible chat completions: the exact
//! request it sends, the reply and usage it reads, and its SSE stream.

use super::fake::{FakeServer, Reply, env, sse_data};
use futures_util::StreamExt;
use mnemo::model::{ModelError, ModelRequest, StreamPart, Usage, build};
use mnemo_sessions::context::{Context, Turn};
use mnemo_sessions::record::Role;
use serde_json::json;

fn completion(text: &str) -> serde_json::Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
    })
}

fn request_with_history() -> ModelRequest {
    let context = super::context_of(
        "You are mnemo.\n\nSummary so far: the user plans a trip to Kyoto.",
        vec![
            Turn {
                role: Role::User,
                content: "Which month is best?".into(),
            },
            Turn {
                role: Role::Assistant,
                content: "November, for the leaves.".into(),
            },
        ],
    );
    ModelRequest::new(context, "And where should I stay?")
}

#[tokio::test]
async fn sends_system_then_turns_then_the_message_with_a_bearer_key() {
    let server = FakeServer::start(vec![Reply::Json(200, completion("Gion."))]).await;
    let cfg = server.openai(json!({"temperature": 0.5, "maxTokens": 200, "extraHeaders": {"X-Title": "mnemo"}}));
    let model = build(&cfg, &env(&[("OPENAI_API_KEY", "sk-test-1")])).unwrap();

    let reply = model.complete(&request_with_history()).await.unwrap();

    assert_eq!(reply.text, "Gion.");
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 42,
            output_tokens: 7
        })
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.uri, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test-1");
    assert_eq!(sent.headers["x-title"], "mnemo");
    assert_eq!(
        sent.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are mnemo.\n\nSummary so far: the user plans a trip to Kyoto."},
                {"role": "user", "content": "Which month is best?"},
                {"role": "assistant", "content": "November, for the leaves."},
                {"role": "user", "content": "And where should I stay?"}
            ],
            "temperature": 0.5,
            "max_tokens": 200
        })
    );
}

#[tokio::test]
async fn a_local_server_gets_no_authorization_header_when_no_key_is_set() {
    let server = FakeServer::start(vec![Reply::Json(200, completion("hi"))]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    model
        .complete(&ModelRequest::new(Context::default(), "hello"))
        .await
        .unwrap();

    let sent = &server.requests()[0];
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(sent.body["messages"], json!([{"role": "user", "content": "hello"}]));
}

#[tokio::test]
async fn describe_names_provider_model_and_base_url() {
    let server = FakeServer::start(vec![Reply::Json(200, completion("hi"))]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();
    assert!(
        model
            .describe()
            .starts_with(&format!("openai test-model @ {}", server.url("/v1"))),
        "{}",
        model.describe()
    );
}

#[tokio::test]
async fn streamed_deltas_arrive_in_order() {
    let mut chunks = sse_data(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Stay "},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"in "},"finish_reason":null}]}"#,
    ]);
    // An event split across two network chunks.
    chunks.push("data: {\"choices\":[{\"index\":0,\"delta\":{\"con".into());
    chunks.push("tent\":\"Gion.\"},\"finish_reason\":\"stop\"}]}\n\n".into());
    chunks.extend(sse_data(&["[DONE]"]));
    let server = FakeServer::start(vec![Reply::Sse(chunks)]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let stream = model.stream(&request_with_history()).await.unwrap();
    let deltas: Vec<String> = stream
        .filter_map(|p| async move { p.unwrap().into_text() })
        .collect()
        .await;

    assert_eq!(deltas, vec!["Stay ", "in ", "Gion."]);
    assert_eq!(server.requests()[0].body["stream"], json!(true));
}

#[tokio::test]
async fn a_stream_that_ends_before_done_is_an_error_not_a_short_reply() {
    let server = FakeServer::start(vec![Reply::Sse(sse_data(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Stay "},"finish_reason":null}]}"#,
    ]))])
    .await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let items: Vec<_> = model.stream(&request_with_history()).await.unwrap().collect().await;

    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap(), &StreamPart::Text("Stay ".into()));
    assert!(matches!(items[1], Err(ModelError::Protocol { .. })), "{items:?}");
}

#[tokio::test]
async fn a_stream_whose_connection_breaks_is_an_error() {
    let server = FakeServer::start(vec![Reply::SseThenBreak(sse_data(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Stay "},"finish_reason":null}]}"#,
    ]))])
    .await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let items: Vec<_> = model.stream(&request_with_history()).await.unwrap().collect().await;

    assert!(
        matches!(items.last(), Some(Err(ModelError::Protocol { .. }))),
        "{items:?}"
    );
    assert!(items.iter().filter(|i| i.is_err()).count() == 1, "{items:?}");
}

#[tokio::test]
async fn a_reply_that_is_not_a_completion_is_a_protocol_error() {
    let server = FakeServer::start(vec![Reply::Json(200, json!({"unexpected": true}))]).await;
    let model = build(&server.openai(json!({})), &env(&[])).unwrap();

    let err = model.complete(&request_with_history()).await.unwrap_err();

    assert!(matches!(err, ModelError::Protocol { .. }), "{err:?}");
}

/// Drives the real tool loop against the scripted server: one round of
/// `tool_calls` (arguments as a JSON string, content null), then text.
struct Recorder(std::sync::Mutex<Vec<mnemo::model::ToolCall>>);

#[async_trait::async_trait]
impl mnemo::model::ToolExecutor for Recorder {
    fn specs(&self) -> Vec<mnemo::model::ToolSpec> {
        vec![mnemo::model::ToolSpec {
            name: "memory_search",
            description: "search",
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        }]
    }
    async fn call(&self, call: &mnemo::model::ToolCall) -> mnemo::model::ToolResult {
        self.0.lock().unwrap().push(call.clone());
        mnemo::model::ToolResult {
            call_id: call.id.clone(),
            content: "[2026-03-01, you] I like tea".into(),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn tool_calls_come_back_parsed_and_their_results_go_out_as_tool_messages() {
    let calls = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "memory_search", "arguments": "{\"query\":\"tea\"}"}}]}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
    });
    let server = FakeServer::start(vec![Reply::Json(200, calls), Reply::Json(200, completion("Tea."))]).await;
    let model = build(&server.openai(json!({})), &env(&[("OPENAI_API_KEY", "sk-test-1")])).unwrap();
    assert!(model.supports_tools());
    let tools = Recorder(Default::default());
    let limits = mnemo::model::ToolLimits {
        max_rounds: 3,
        budget_chars: 10_000,
    };
    let reply = mnemo::model::tools::answer(&*model, request_with_history(), Some(&tools), limits)
        .await
        .unwrap();

    assert_eq!(reply.text, "Tea.");
    // The first call's tokens are the answer's, the call that carried the
    // tool's result back the tools' (42 in: `completion` reports 42).
    assert_eq!(reply.usage.map(|u| u.input_tokens), Some(40), "the first call's usage");
    assert_eq!(
        reply.tool_usage.map(|u| u.input_tokens),
        Some(42),
        "the tool round's usage"
    );
    assert_eq!(tools.0.lock().unwrap()[0].arguments, json!({"query": "tea"}));
    let sent = server.requests();
    assert_eq!(sent[0].body["tools"][0]["type"], "function");
    assert_eq!(sent[0].body["tools"][0]["function"]["name"], "memory_search");
    assert_eq!(sent[0].body["tool_choice"], "auto");
    let messages = sent[1].body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["function"]["arguments"],
        "{\"query\":\"tea\"}"
    );
    assert_eq!(
        messages[n - 1],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "[2026-03-01, you] I like tea"})
    );
}
