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
        content: UserContent<'a>,
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

/// A user turn's content: its text, or (the message being answered, with
/// photos) a text part and an `image_url` part per photo.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
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
            Role::User => WireMessage::User {
                content: UserContent::Text(&turn.content),
            },
            Role::Assistant => WireMessage::Assistant {
                content: Some(&turn.content),
                tool_calls: Vec::new(),
            },
        });
    }
    let content = if request.images.is_empty() {
        UserContent::Text(&request.message)
    } else {
        let mut parts = vec![Part::Text { text: &request.message }];
        parts.extend(request.images.iter().map(|image| Part::ImageUrl {
            image_url: ImageUrl { url: image.data_url() },
        }));
        UserContent::Parts(parts)
    };
    out.push(WireMessage::User { content });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::image::Image;
    use serde_json::json;

    #[test]
    fn a_photo_goes_with_the_message_as_an_image_url_part_and_nowhere_else() {
        let mut request = ModelRequest::new(Default::default(), "[photo] what is this?");
        request.images = vec![Image::from_bytes(b"\x89PNG\r\n\x1a\nabc").unwrap()];
        let body = serde_json::to_value(Body::new("m", None, None, &request, false)).unwrap();
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": [
                { "type": "text", "text": "[photo] what is this?" },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgphYmM=" } },
            ] }])
        );
        request.images.clear();
        let body = serde_json::to_value(Body::new("m", None, None, &request, false)).unwrap();
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": "[photo] what is this?" }])
        );
    }
}
