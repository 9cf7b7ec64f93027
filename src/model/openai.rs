//! The `openai` backend: any OpenAI-compatible `POST {baseUrl}/chat/completions`
//! (OpenAI, Mistral, Ollama, vLLM, llama.cpp server, OpenRouter), whole or
//! streamed as SSE (`data: {…}` … `data: [DONE]`).
//!
//! Memory tools go out as `tools` (+ `tool_choice`), come back as
//! `tool_calls` (arguments a JSON string), and their results return as
//! `role: tool` messages after the assistant message that called them.
//!
//! It owns only the request and reply JSON of that API; status mapping,
//! timeouts and redaction are [`super::http`]'s, retries are
//! [`super::retry`]'s. It must not send anything but the context and the
//! message it was given.

mod request;

use super::build_error::BuildError;
use super::config::ModelConfig;
use super::http::{HttpEndpoint, Opened, clip, endpoint_url, secret_header};
use super::redact::Secret;
use super::sse::{SseEvent, StreamProtocol, open_stream, whole_reply};
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, ToolCall, Usage, redact};
use async_trait::async_trait;
use request::Body;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;
use serde_json::Value;
use serde_json::error::Category;

/// An OpenAI-compatible chat-completions endpoint.
#[derive(Debug)]
pub(crate) struct OpenAiBackend {
    endpoint: HttpEndpoint,
    model: String,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    /// The base URL as shown in `describe`, redacted.
    shown_base: String,
}

impl OpenAiBackend {
    /// `key` is `(variable name, value)`; `None` for keyless local servers.
    pub fn new(cfg: &ModelConfig, key: Option<(&str, Secret)>, section: &str) -> Result<Self, BuildError> {
        let url = endpoint_url(cfg.base_url().unwrap_or_default(), &["chat", "completions"], section)?;
        let mut auth = HeaderMap::new();
        let secret = match key {
            Some((var, secret)) => {
                let value = format!("Bearer {}", secret.expose());
                auth.insert(AUTHORIZATION, secret_header(&value, section, var)?);
                Some(secret)
            }
            None => None,
        };
        let timeout = std::time::Duration::from_secs(cfg.timeout_secs);
        let endpoint = HttpEndpoint::new(url, auth, &cfg.extra_headers, timeout, secret, section)?;
        Ok(OpenAiBackend {
            shown_base: endpoint.redact(cfg.base_url().unwrap_or_default()),
            endpoint,
            model: cfg.model.clone(),
            temperature: cfg.temperature,
            max_tokens: cfg.max_tokens(),
        })
    }

    /// A whole chat completion (asked for, or sent by a server that
    /// ignored `stream: true`): its text or tool calls and usage.
    fn read_reply(&self, reply: Value) -> Result<ModelReply, ModelError> {
        let raw = || self.endpoint.redact(&reply.to_string());
        let completion: Completion =
            serde_json::from_value(reply.clone()).map_err(|_| unreadable("not a chat completion", &raw()))?;
        let message = completion.choices.into_iter().next().and_then(|c| c.message);
        let (text, tool_calls) = match message {
            Some(m) if !m.tool_calls.is_empty() => (
                m.content.unwrap_or_default(),
                m.tool_calls.into_iter().map(WireToolCall::into_call).collect(),
            ),
            Some(ChoiceMessage {
                content: Some(text), ..
            }) => (text, Vec::new()),
            _ => return Err(unreadable("the completion has no text", &raw())),
        };
        Ok(ModelReply {
            text,
            tool_calls,
            usage: completion.usage.map(|u| Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
            }),
        })
    }

    /// The request body, exactly as sent (see [`Body`]).
    fn body<'a>(&'a self, request: &'a ModelRequest, stream: bool) -> Body<'a> {
        Body::new(&self.model, self.temperature, self.max_tokens, request, stream)
    }
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<ChoiceMessage>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunction,
}

/// `arguments` is a JSON object *encoded as a string*, as the API sends it.
#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

impl WireToolCall {
    fn into_call(self) -> ToolCall {
        ToolCall {
            id: self.id,
            name: self.function.name,
            arguments: serde_json::from_str(&self.function.arguments).unwrap_or(Value::Null),
        }
    }
}

/// A piece of a streamed tool call: the first names it (`id`, `name`),
/// later ones add to its `arguments` string; `index` says which call.
#[derive(Deserialize)]
struct WireCallDelta {
    #[serde(default)]
    index: usize,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

/// A streamed chunk's `delta`.
#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireCallDelta>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<WireUsage>,
    /// An error reported in the stream: kept whole, whatever its shape.
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

fn unreadable(what: &str, raw: &str) -> ModelError {
    ModelError::Protocol {
        detail: format!("{what}: {}", clip(&redact(raw, &[]))),
    }
}

#[async_trait]
impl Model for OpenAiBackend {
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
                open_stream(response, self.endpoint.timeout(), deadline, ChunkReader::default()).await
            }
            Opened::Whole(reply) => Ok(whole_reply(self.read_reply(reply)?)),
        }
    }

    fn describe(&self) -> String {
        format!("openai {} @ {}", self.model, self.shown_base)
    }

    fn supports_tools(&self) -> bool {
        true
    }

    fn streams(&self) -> bool {
        true
    }
}

/// Reads `chat.completion.chunk` events.
#[derive(Default)]
struct ChunkReader {
    /// A chunk carried a `finish_reason`: the reply is whole even if the
    /// server closes without `[DONE]` (some compatible servers do).
    finished: bool,
    /// Tool calls being streamed, by their `index`: id, name, arguments.
    calls: Vec<(String, String, String)>,
}

impl ChunkReader {
    fn add_call_delta(&mut self, delta: WireCallDelta) {
        // A server that omits `index` (0 for every call) still names each
        // new call with a new id.
        let index = match (&delta.id, self.calls.get(delta.index)) {
            (Some(new), Some((id, _, _))) if !id.is_empty() && id != new => self.calls.len(),
            _ => delta.index,
        };
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, Default::default);
        }
        let (id, name, arguments) = &mut self.calls[index];
        if let Some(new) = delta.id {
            *id = new;
        }
        if let Some(function) = delta.function {
            if let Some(new) = function.name {
                name.push_str(&new);
            }
            if let Some(more) = function.arguments {
                arguments.push_str(&more);
            }
        }
    }

    /// The calls streamed so far, whole (at the chunk that finishes them).
    fn take_calls(&mut self, out: &mut Vec<StreamPart>) {
        for (id, name, arguments) in self.calls.drain(..) {
            let wire = WireToolCall {
                id,
                function: WireFunction { name, arguments },
            };
            out.push(StreamPart::Call(wire.into_call()));
        }
    }
}

impl StreamProtocol for ChunkReader {
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamPart>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.take_calls(out);
            return Ok(true);
        }
        // Read straight into the chunk's few fields: the rest (`id`,
        // `model`, …) is skipped, not built into a JSON tree per chunk.
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| match e.classify() {
            Category::Data => unreadable("not a completion chunk", data),
            _ => unreadable("a stream chunk is not JSON", data),
        })?;
        if let Some(error) = chunk.error {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("no details");
            return Err(ModelError::Unavailable {
                detail: format!("the server reported an error mid-reply: {}", clip(message)),
                retry_after: None,
                cause: super::Unreached::InStream,
            });
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamPart::Usage(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            }));
        }
        // A usage-only chunk has no choices.
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(false);
        };
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.content {
                out.push(StreamPart::Text(text));
            }
            for call in delta.tool_calls {
                self.add_call_delta(call);
            }
        }
        if choice.finish_reason.is_some() {
            self.finished = true;
            self.take_calls(out);
        }
        Ok(false)
    }

    fn on_eof(&mut self) -> Result<(), ModelError> {
        if self.finished {
            return Ok(());
        }
        Err(ModelError::Protocol {
            detail: "the reply stream ended before [DONE]; the reply is incomplete".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;
    use mnemo_sessions::record::Role;
    use serde_json::json;

    fn read(reader: &mut ChunkReader, data: &str) -> Vec<StreamPart> {
        let mut out = Vec::new();
        let event = SseEvent {
            event: None,
            data: data.into(),
        };
        reader.on_event(event, &mut out).unwrap();
        out
    }

    #[test]
    fn the_body_carries_the_context_the_message_the_rounds_and_the_tools() {
        let cfg: ModelConfig = serde_json::from_value(json!({
            "provider": "openai", "model": "m", "baseUrl": "http://127.0.0.1:9/v1",
            "temperature": 0.5, "maxTokens": 100
        }))
        .unwrap();
        let backend = OpenAiBackend::new(&cfg, None, "model").unwrap();
        let context = mnemo_sessions::context::Context {
            system: "be brief".into(),
            turns: vec![
                mnemo_sessions::context::Turn {
                    role: Role::User,
                    content: "hi \"there\"".into(),
                },
                mnemo_sessions::context::Turn {
                    role: Role::Assistant,
                    content: "hello".into(),
                },
            ],
        };
        let mut request = ModelRequest::new(context, "what tea?").json();
        request.tools = Some(crate::model::ToolOffer {
            specs: vec![ToolSpec {
                name: "memory_search",
                description: "search",
                parameters: json!({"type": "object"}),
            }],
            may_call: true,
        });
        request.rounds = vec![crate::model::ToolRound {
            text: String::new(),
            calls: vec![ToolCall {
                id: "call_1".into(),
                name: "memory_search".into(),
                arguments: json!({"query": "tea"}),
            }],
            results: vec![crate::model::ToolResult {
                call_id: "call_1".into(),
                content: "green".into(),
                is_error: false,
            }],
        }];
        let sent = serde_json::to_value(backend.body(&request, true)).unwrap();
        assert_eq!(
            sent,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi \"there\""},
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "what tea?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "memory_search", "arguments": "{\"query\":\"tea\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "green"}
                ],
                "temperature": 0.5,
                "max_tokens": 100,
                "response_format": {"type": "json_object"},
                "tools": [{"type": "function", "function": {"name": "memory_search", "description": "search", "parameters": {"type": "object"}}}],
                "tool_choice": "auto",
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let plain = serde_json::to_value(backend.body(&ModelRequest::new(Default::default(), "hi"), false)).unwrap();
        assert_eq!(
            plain,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5, "max_tokens": 100})
        );
    }

    #[test]
    fn an_error_in_the_stream_is_reported_and_a_chunk_of_another_shape_is_refused() {
        let mut out = Vec::new();
        let event = |data: &str| SseEvent {
            event: None,
            data: data.into(),
        };
        let error = ChunkReader::default()
            .on_event(
                event(r#"{"error":{"message":"overloaded","type":"server_error"}}"#),
                &mut out,
            )
            .unwrap_err();
        assert!(error.to_string().contains("overloaded"), "{error}");
        let odd = ChunkReader::default()
            .on_event(event(r#"{"choices":"none"}"#), &mut out)
            .unwrap_err();
        assert!(odd.to_string().contains("not a completion chunk"), "{odd}");
        let broken = ChunkReader::default()
            .on_event(event("{\"choices\":["), &mut out)
            .unwrap_err();
        assert!(broken.to_string().contains("not JSON"), "{broken}");
        assert!(out.is_empty());
    }

    #[test]
    fn a_chunk_with_a_finish_reason_makes_a_missing_done_acceptable() {
        let mut reader = ChunkReader::default();
        let parts = read(
            &mut reader,
            r#"{"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]}"#,
        );
        assert_eq!(parts, vec![StreamPart::Text("!".into())]);
        assert!(reader.on_eof().is_ok());
        assert!(ChunkReader::default().on_eof().is_err());
    }

    #[test]
    fn tool_call_deltas_are_assembled_into_whole_calls_at_the_finish() {
        let mut reader = ChunkReader::default();
        let first = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"memory_search","arguments":""}}]}}]}"#;
        assert!(read(&mut reader, first).is_empty());
        let more = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":"}}]}}]}"#;
        assert!(read(&mut reader, more).is_empty());
        let rest = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"tea\"}"}}]},"finish_reason":"tool_calls"}]}"#;
        let parts = read(&mut reader, rest);
        assert_eq!(
            parts,
            vec![StreamPart::Call(ToolCall {
                id: "call_1".into(),
                name: "memory_search".into(),
                arguments: json!({"query": "tea"}),
            })]
        );
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#;
        assert_eq!(
            read(&mut reader, usage),
            vec![StreamPart::Usage(Usage {
                input_tokens: 12,
                output_tokens: 3
            })]
        );
    }
}
