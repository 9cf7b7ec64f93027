//! The `chat/completions` request body of the `openai` backend, serialized
//! from the request's own strings.

use crate::model::{ModelRequest, ReplyFormat, ToolSpec};
use mnemo_sessions::record::Role;
use serde::Serialize;
use serde_json::Value;

/// A `chat/completions` request, exactly as sent: written straight from
/// the request's strings, with no JSON tree built and dropped per turn.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

impl<'a> Body<'a> {
    pub(super) fn new(
        model: &'a str,
        temperature: Option<f64>,
        max_tokens: Option<u32>,
        request: &'a ModelRequest,
        stream: bool,
    ) -> Self {
        let tools = request.tools.as_ref();
        Body {
            model,
            messages: messages(request),
            temperature,
            max_tokens,
            response_format: (request.format == ReplyFormat::Json).then_some(JsonObject { kind: "json_object" }),
            tools: tools.map(|offer| offer.specs.iter().map(WireTool::of).collect()),
            tool_choice: tools.map(|offer| if offer.may_call { "auto" } else { "none" }),
            stream,
            // The token counts come in a last chunk only when asked for.
            stream_options: stream.then_some(StreamOptions { include_usage: true }),
        }
    }
}

#[derive(Serialize)]
struct JsonObject {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One entry of `messages`, by its `role`.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    /// An earlier answer (`tool_calls` empty), or this turn's round of
    /// calls with any text written beside them (`content` null if none).
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCallOut<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A call the model made, sent back with its round.
#[derive(Serialize)]
struct WireCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionOut<'a>,
}

/// `arguments` goes back as the API sends it: JSON encoded as a string.
#[derive(Serialize)]
struct WireFunctionOut<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> WireTool<'a> {
    fn of(spec: &'a ToolSpec) -> Self {
        WireTool {
            kind: "function",
            function: WireToolFunction {
                name: spec.name,
                description: spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

/// `system`, then each prior turn, then the message being answered.
fn messages(request: &ModelRequest) -> Vec<WireMessage<'_>> {
    let mut out = Vec::with_capacity(request.context.turns.len() + 2);
    if !request.context.system.trim().is_empty() {
        out.push(WireMessage::System {
            content: &request.context.system,
        });
    }
    for turn in &request.context.turns {
        out.push(match turn.role {
            Role::User => WireMessage::User { content: &turn.content },
            Role::Assistant => WireMessage::Assistant {
                content: Some(&turn.content),
                tool_calls: Vec::new(),
            },
        });
    }
    out.push(WireMessage::User {
        content: &request.message,
    });
    for round in &request.rounds {
        let calls = round
            .calls
            .iter()
            .map(|c| WireCallOut {
                id: &c.id,
                kind: "function",
                function: WireFunctionOut {
                    name: &c.name,
                    arguments: c.arguments.to_string(),
                },
            })
            .collect();
        let text = (!round.text.is_empty()).then_some(round.text.as_str());
        out.push(WireMessage::Assistant {
            content: text,
            tool_calls: calls,
        });
        for result in &round.results {
            out.push(WireMessage::Tool {
                tool_call_id: &result.call_id,
                content: &result.content,
            });
        }
    }
    out
}
