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

use super::build::BuildError;
use super::config::{ANTHROPIC_DEFAULT_MAX_TOKENS, ModelConfig};
use super::http::{HttpEndpoint, clip, endpoint_url, secret_header};
use super::redact::Secret;
use super::sse::{SseEvent, StreamProtocol, delta_stream};
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, ToolCall, Usage, redact};
use async_trait::async_trait;
use mnemo_sessions::record::Role;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};

const API_VERSION: &str = "2023-06-01";

/// Stands in for the user when the recent turns open with an assistant
/// reply, because the API refuses a conversation that does not start with
/// the user; dropping the reply instead would lose context.
const LEADING_USER_TURN: &str = "(earlier conversation)";

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

    /// The request body, exactly as sent. JSON replies are asked for by the
    /// prompt alone: this API has no `response_format`.
    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages(request),
        });
        if !request.context.system.trim().is_empty() {
            body["system"] = json!(request.context.system);
        }
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(offer) = &request.tools {
            body["tools"] = offer
                .specs
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            body["tool_choice"] = json!({"type": if offer.may_call { "auto" } else { "none" }});
        }
        if stream {
            body["stream"] = json!(true);
        }
        body
    }
}

/// The turns then the message, with consecutive same-role turns merged
/// (blank line between) and empty ones dropped, starting with the user.
fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut merged: Vec<(Role, String)> = Vec::new();
    let turns = request.context.turns.iter().map(|t| (t.role, t.content.as_str()));
    for (role, text) in turns.chain([(Role::User, request.message.as_str())]) {
        if text.trim().is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((last, content)) if *last == role => {
                content.push_str("\n\n");
                content.push_str(text);
            }
            _ => merged.push((role, text.to_string())),
        }
    }
    if merged.first().is_some_and(|(role, _)| *role == Role::Assistant) {
        merged.insert(0, (Role::User, LEADING_USER_TURN.to_string()));
    }
    let mut out: Vec<Value> = merged
        .into_iter()
        .map(|(role, content)| {
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": content})
        })
        .collect();
    // Each tool round: the assistant's `tool_use` blocks, then one user
    // message with a `tool_result` block per call (the API's alternation).
    for round in &request.rounds {
        let mut blocks = Vec::new();
        if !round.text.trim().is_empty() {
            blocks.push(json!({"type": "text", "text": round.text}));
        }
        blocks.extend(round.calls.iter().map(|c| {
            let input = if c.arguments.is_object() {
                c.arguments.clone()
            } else {
                json!({})
            };
            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
        }));
        out.push(json!({"role": "assistant", "content": blocks}));
        let results: Vec<Value> = round
            .results
            .iter()
            .map(|r| json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}))
            .collect();
        out.push(json!({"role": "user", "content": results}));
    }
    out
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

    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let response = self.endpoint.post_for_stream(&self.body(request, true)).await?;
        Ok(delta_stream(response, self.endpoint.timeout(), EventReader::default()))
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
        let json: Value =
            serde_json::from_str(&event.data).map_err(|_| unreadable("a stream event is not JSON", &event.data))?;
        let text = |pointer: &str| json.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
        match json.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                self.input_tokens = json.pointer("/message/usage/input_tokens").and_then(Value::as_u64);
            }
            Some("content_block_start") if text("/content_block/type") == "tool_use" => {
                self.call = Some((
                    text("/content_block/id").to_string(),
                    text("/content_block/name").to_string(),
                    String::new(),
                ));
            }
            Some("content_block_delta") => match text("/delta/type") {
                "text_delta" => out.push(StreamPart::Text(text("/delta/text").to_string())),
                "input_json_delta" => {
                    if let Some((_, _, input)) = &mut self.call {
                        input.push_str(text("/delta/partial_json"));
                    }
                }
                _ => {}
            },
            Some("content_block_stop") => {
                if let Some((id, name, input)) = self.call.take() {
                    // A call without arguments streams no input at all.
                    let arguments = if input.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&input).unwrap_or(Value::Null)
                    };
                    out.push(StreamPart::Call(ToolCall { id, name, arguments }));
                }
            }
            Some("message_delta") => {
                if let Some(output) = json.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    out.push(StreamPart::Usage(Usage {
                        input_tokens: self.input_tokens.take().unwrap_or_default(),
                        output_tokens: output,
                    }));
                }
            }
            Some("message_stop") => return Ok(true),
            Some("error") => return Err(stream_error(&json)),
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

/// An `error` event, typed like the equivalent HTTP status would be.
fn stream_error(json: &Value) -> ModelError {
    let kind = json.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
    let message = json
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("no details");
    let detail = format!("{kind} mid-reply: {}", clip(&redact(message, &[])));
    match kind {
        "rate_limit_error" => ModelError::RateLimited {
            retry_after: None,
            detail,
        },
        "overloaded_error" | "api_error" => ModelError::Unavailable {
            detail,
            retry_after: None,
        },
        _ => ModelError::Protocol { detail },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_sessions::context::{Context, Turn};

    fn turn(role: Role, content: &str) -> Turn {
        Turn {
            role,
            content: content.into(),
        }
    }

    #[test]
    fn a_context_opening_with_the_assistant_gets_a_user_turn_first() {
        let context = Context {
            turns: vec![turn(Role::Assistant, "earlier answer"), turn(Role::User, "")],
            ..Default::default()
        };
        let sent = messages(&ModelRequest::new(context, "next"));
        assert_eq!(
            sent,
            vec![
                json!({"role": "user", "content": LEADING_USER_TURN}),
                json!({"role": "assistant", "content": "earlier answer"}),
                json!({"role": "user", "content": "next"}),
            ]
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
    fn an_overloaded_error_event_is_unavailable() {
        let event = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert!(matches!(stream_error(&event), ModelError::Unavailable { .. }));
    }
}
