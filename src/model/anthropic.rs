//! The `anthropic` backend: `POST {baseUrl}/v1/messages` (Messages API,
//! `anthropic-version: 2023-06-01`), whole or streamed (`content_block_delta`
//! … `message_stop`, or `error`).
//!
//! Memory tools go out as `tools` (+ `tool_choice`), come back as
//! `tool_use` blocks, and their results return as `tool_result` blocks in
//! the user message after the assistant's.
//!
//! It owns that API's request and reply JSON, including its two rules a
//! chat log does not follow by itself: roles must alternate starting with
//! the user, and `max_tokens` is required. Status mapping, timeouts and
//! redaction are [`super::http`]'s; retries are [`super::retry`]'s.

mod request;

use super::build_error::BuildError;
use super::config::{ANTHROPIC_DEFAULT_MAX_TOKENS, ModelConfig};
use super::http::{HttpEndpoint, Opened, clip, endpoint_url, secret_header};
use super::redact::Secret;
use super::sse::{SseEvent, StreamProtocol, open_stream, whole_reply};
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, ToolCall, Usage, redact};
use async_trait::async_trait;
use request::Body;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::Value;
use serde_json::error::Category;

const API_VERSION: &str = "2023-06-01";

/// Anthropic's Messages API.
#[derive(Debug)]
pub(crate) struct AnthropicBackend {
    endpoint: HttpEndpoint,
    model: String,
    temperature: Option<f64>,
    max_tokens: u32,
    shown_base: String,
}

impl AnthropicBackend {
    /// `key` is `(variable name, value)`; `None` for keyless local proxies.
    pub fn new(cfg: &ModelConfig, key: Option<(&str, Secret)>, section: &str) -> Result<Self, BuildError> {
        let base = cfg.base_url().unwrap_or_default();
        let url = endpoint_url(base, &["v1", "messages"], section)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        let secret = match key {
            Some((var, secret)) => {
                let value = secret_header(secret.expose(), section, var)?;
                headers.insert(HeaderName::from_static("x-api-key"), value);
                Some(secret)
            }
            None => None,
        };
        let timeout = std::time::Duration::from_secs(cfg.timeout_secs);
        let endpoint = HttpEndpoint::new(url, headers, &cfg.extra_headers, timeout, secret, section)?;
        Ok(AnthropicBackend {
            shown_base: endpoint.redact(base),
            endpoint,
            model: cfg.model.clone(),
            temperature: cfg.temperature,
            max_tokens: cfg.max_tokens().unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
        })
    }

    /// A whole Messages API reply (asked for, or sent by a proxy that
    /// ignored `stream: true`): its text, `tool_use` blocks and usage.
    fn read_reply(&self, reply: Value) -> Result<ModelReply, ModelError> {
        let raw = || self.endpoint.redact(&reply.to_string());
        let message: Message =
            serde_json::from_value(reply.clone()).map_err(|_| unreadable("not a Messages API reply", &raw()))?;
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in message.content {
            match block.kind.as_str() {
                "text" => text.push_str(block.text.as_deref().unwrap_or_default()),
                "tool_use" => tool_calls.push(ToolCall {
                    id: block.id.unwrap_or_default(),
                    name: block.name.unwrap_or_default(),
                    arguments: block.input.unwrap_or(Value::Null),
                }),
                _ => {}
            }
        }
        if text.is_empty() && tool_calls.is_empty() {
            return Err(unreadable("the reply has no text", &raw()));
        }
        Ok(ModelReply {
            text,
            tool_calls,
            usage: message.usage.map(|u| Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            }),
        })
    }

    /// The request body, exactly as sent (see [`Body`]).
    fn body<'a>(&'a self, request: &'a ModelRequest, stream: bool) -> Body<'a> {
        Body::new(&self.model, self.temperature, self.max_tokens, request, stream)
    }
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Vec<Block>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// `tool_use` blocks: the call's id, tool name and arguments.
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

fn unreadable(what: &str, raw: &str) -> ModelError {
    ModelError::Protocol {
        detail: format!("{what}: {}", clip(&redact(raw, &[]))),
    }
}

#[async_trait]
impl Model for AnthropicBackend {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let reply = self.endpoint.post_json(&self.body(request, false)).await?;
        self.read_reply(reply)
    }

    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let deadline = self.endpoint.deadline();
        match self
            .endpoint
            .post_for_stream(&self.body(request, true), deadline)
            .await?
        {
            Opened::Stream(response) => {
                open_stream(response, self.endpoint.timeout(), deadline, EventReader::default()).await
            }
            Opened::Whole(reply) => Ok(whole_reply(self.read_reply(reply)?)),
        }
    }

    fn describe(&self) -> String {
        format!("anthropic {} @ {}", self.model, self.shown_base)
    }

    fn supports_tools(&self) -> bool {
        true
    }

    fn streams(&self) -> bool {
        true
    }
}

/// Reads Messages API stream events by their JSON `type`.
#[derive(Default)]
struct EventReader {
    /// From `message_start`, reported with the output count at `message_delta`.
    input_tokens: Option<u64>,
    /// The `tool_use` block being streamed: id, name, input JSON so far.
    call: Option<(String, String, String)>,
}

impl StreamProtocol for EventReader {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamPart>) -> Result<bool, ModelError> {
        // Read straight into the few fields used: the rest is skipped, not
        // built into a JSON tree per event.
        let event: Event = serde_json::from_str(&event.data).map_err(|e| match e.classify() {
            Category::Data => unreadable("not a stream event", &event.data),
            _ => unreadable("a stream event is not JSON", &event.data),
        })?;
        match event.kind.as_deref() {
            Some("message_start") => {
                self.input_tokens = event.message.and_then(|m| m.usage).and_then(|u| u.input_tokens);
            }
            Some("content_block_start") => {
                if let Some(block) = event.content_block.filter(|b| b.kind.as_deref() == Some("tool_use")) {
                    self.call = Some((
                        block.id.unwrap_or_default(),
                        block.name.unwrap_or_default(),
                        String::new(),
                    ));
                }
            }
            Some("content_block_delta") => {
                let delta = event.delta.unwrap_or_default();
                match delta.kind.as_deref() {
                    Some("text_delta") => out.push(StreamPart::Text(delta.text.unwrap_or_default())),
                    Some("input_json_delta") => {
                        if let Some((_, _, input)) = &mut self.call {
                            input.push_str(delta.partial_json.as_deref().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let Some((id, name, input)) = self.call.take() {
                    // A call without arguments streams no input at all.
                    let arguments = if input.trim().is_empty() {
                        Value::Object(serde_json::Map::new())
                    } else {
                        serde_json::from_str(&input).unwrap_or(Value::Null)
                    };
                    out.push(StreamPart::Call(ToolCall { id, name, arguments }));
                }
            }
            Some("message_delta") => {
                if let Some(output) = event.usage.and_then(|u| u.output_tokens) {
                    out.push(StreamPart::Usage(Usage {
                        input_tokens: self.input_tokens.take().unwrap_or_default(),
                        output_tokens: output,
                    }));
                }
            }
            Some("message_stop") => return Ok(true),
            Some("error") => return Err(stream_error(event.error.as_ref())),
            _ => {} // ping, a text block's start
        }
        Ok(false)
    }

    fn on_eof(&mut self) -> Result<(), ModelError> {
        Err(ModelError::Protocol {
            detail: "the reply stream ended before message_stop; the reply is incomplete".into(),
        })
    }
}

/// One stream event: its `type` and, by type, the fields read.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: Option<String>,
    /// `message_start`.
    message: Option<EventMessage>,
    /// `content_block_start`.
    content_block: Option<EventBlock>,
    /// `content_block_delta` (and `message_delta`, whose delta is not read).
    delta: Option<EventDelta>,
    /// `message_delta`.
    usage: Option<EventUsage>,
    /// `error`: kept whole, whatever its shape.
    error: Option<Value>,
}

#[derive(Deserialize)]
struct EventMessage {
    usage: Option<EventUsage>,
}

#[derive(Deserialize)]
struct EventUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct EventBlock {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
}

#[derive(Default, Deserialize)]
struct EventDelta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    partial_json: Option<String>,
}

/// An `error` event's `error` object, typed like the equivalent HTTP
/// status would be.
fn stream_error(error: Option<&Value>) -> ModelError {
    let field = |name: &str| error.and_then(|e| e.get(name)).and_then(Value::as_str);
    let kind = field("type").unwrap_or("error");
    let message = field("message").unwrap_or("no details");
    let detail = format!("{kind} mid-reply: {}", clip(&redact(message, &[])));
    match kind {
        "rate_limit_error" => ModelError::RateLimited {
            retry_after: None,
            detail,
        },
        "overloaded_error" | "api_error" => ModelError::Unavailable {
            detail,
            retry_after: None,
            cause: super::Unreached::InStream,
        },
        _ => ModelError::Protocol { detail },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_sessions::context::{Context, Turn};
    use mnemo_sessions::record::Role;
    use serde_json::json;

    fn turn(role: Role, content: &str) -> Turn {
        Turn {
            role,
            content: content.into(),
        }
    }

    #[test]
    fn the_body_merges_same_role_turns_and_sends_tool_rounds_as_blocks() {
        let cfg: ModelConfig = serde_json::from_value(json!({
            "provider": "anthropic", "model": "m", "baseUrl": "http://127.0.0.1:9",
            "temperature": 0.5, "maxTokens": 100
        }))
        .unwrap();
        let backend = AnthropicBackend::new(&cfg, None, "model").unwrap();
        let context = Context {
            system: "be brief".into(),
            turns: vec![turn(Role::User, "hi"), turn(Role::User, "again \"you\"")],
        };
        let mut request = ModelRequest::new(context, "what tea?");
        request.tools = Some(crate::model::ToolOffer {
            specs: vec![crate::model::ToolSpec {
                name: "memory_search",
                description: "search",
                parameters: json!({"type": "object"}),
            }],
            may_call: false,
        });
        request.rounds = vec![crate::model::ToolRound {
            text: "Let me look.".into(),
            calls: vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "memory_search".into(),
                    arguments: json!({"query": "tea"}),
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "memory_search".into(),
                    arguments: Value::Null,
                },
            ],
            results: vec![crate::model::ToolResult {
                call_id: "toolu_1".into(),
                content: "green".into(),
                is_error: true,
            }],
        }];
        let sent = serde_json::to_value(backend.body(&request, true)).unwrap();
        assert_eq!(
            sent,
            json!({
                "model": "m",
                "max_tokens": 100,
                "system": "be brief",
                "temperature": 0.5,
                "messages": [
                    {"role": "user", "content": "hi\n\nagain \"you\"\n\nwhat tea?"},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "toolu_1", "name": "memory_search", "input": {"query": "tea"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "memory_search", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "green", "is_error": true}
                    ]}
                ],
                "tools": [{"name": "memory_search", "description": "search", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "none"},
                "stream": true
            })
        );
        let plain = serde_json::to_value(backend.body(&ModelRequest::new(Context::default(), "hi"), false)).unwrap();
        assert_eq!(
            plain,
            json!({"model": "m", "max_tokens": 100, "temperature": 0.5, "messages": [{"role": "user", "content": "hi"}]})
        );
    }

    #[test]
    fn a_streamed_tool_use_block_becomes_one_whole_call_and_usage_is_reported() {
        let mut reader = EventReader::default();
        let mut out = Vec::new();
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 20}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "memory_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"tea\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ];
        for event in events {
            let event = SseEvent {
                event: None,
                data: event.to_string(),
            };
            assert!(!reader.on_event(event, &mut out).unwrap());
        }
        assert_eq!(
            out,
            vec![
                StreamPart::Text("Let me look.".into()),
                StreamPart::Call(ToolCall {
                    id: "toolu_1".into(),
                    name: "memory_search".into(),
                    arguments: json!({"query": "tea"}),
                }),
                StreamPart::Usage(Usage {
                    input_tokens: 20,
                    output_tokens: 9
                }),
            ]
        );
    }

    #[test]
    fn an_overloaded_error_event_is_unavailable_and_an_event_of_another_shape_is_refused() {
        let read = |data: &str| {
            let event = SseEvent {
                event: None,
                data: data.into(),
            };
            EventReader::default().on_event(event, &mut Vec::new())
        };
        let overloaded = read(r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#);
        assert!(
            matches!(overloaded, Err(ModelError::Unavailable { .. })),
            "{overloaded:?}"
        );
        let shapeless = read(r#"{"type": "error", "error": "boom"}"#);
        assert!(matches!(shapeless, Err(ModelError::Protocol { .. })), "{shapeless:?}");
        let odd = read(r#"{"type": "content_block_delta", "delta": "text"}"#).unwrap_err();
        assert!(odd.to_string().contains("not a stream event"), "{odd}");
        let broken = read("{\"type\": ").unwrap_err();
        assert!(broken.to_string().contains("not JSON"), "{broken}");
    }
}
