//! The Messages API request body of the `anthropic` backend, serialized
//! from the request's own strings.

use crate::model::ModelRequest;
use mnemo_sessions::record::Role;
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;

/// Stands in for the user when the recent turns open with an assistant
/// reply, because the API refuses a conversation that does not start with
/// the user; dropping the reply instead would lose context.
const LEADING_USER_TURN: &str = "(earlier conversation)";

/// A Messages API request, exactly as sent, written straight from the
/// request's strings (no JSON tree built per turn). JSON replies are asked
/// for by the prompt alone: this API has no `response_format`.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<WireTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

impl<'a> Body<'a> {
    pub(super) fn new(
        model: &'a str,
        temperature: Option<f64>,
        max_tokens: u32,
        request: &'a ModelRequest,
        stream: bool,
    ) -> Self {
        let tools = request.tools.as_ref();
        let system = request.context.system.as_str();
        Body {
            model,
            max_tokens,
            messages: messages(request),
            system: (!system.trim().is_empty()).then_some(system),
            temperature,
            tools: tools.map(|offer| {
                offer
                    .specs
                    .iter()
                    .map(|t| WireTool {
                        name: t.name,
                        description: t.description,
                        input_schema: &t.parameters,
                    })
                    .collect()
            }),
            tool_choice: tools.map(|offer| ToolChoice {
                kind: if offer.may_call { "auto" } else { "none" },
            }),
            stream,
        }
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

#[derive(Serialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Content<'a>,
}

/// A message's content: one text, or blocks (a tool round).
#[derive(Debug, PartialEq, Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<BlockOut<'a>>),
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    /// A text block whose text may be merged from several turns.
    #[serde(rename = "text")]
    Caption {
        text: Cow<'a, str>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

/// An image block's `source`: the bytes inline, as base64.
#[derive(Debug, PartialEq, Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'static str,
    data: &'a str,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// The turns then the message, with consecutive same-role turns merged
/// (blank line between) and empty ones dropped, starting with the user.
fn messages(request: &ModelRequest) -> Vec<WireMessage<'_>> {
    let mut merged: Vec<(Role, Cow<'_, str>)> = Vec::new();
    let turns = request.context.turns.iter().map(|t| (t.role, t.content.as_str()));
    for (role, text) in turns.chain([(Role::User, request.message.as_str())]) {
        if text.trim().is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((last, content)) if *last == role => {
                let content = content.to_mut();
                content.push_str("\n\n");
                content.push_str(text);
            }
            _ => merged.push((role, Cow::Borrowed(text))),
        }
    }
    if merged.first().is_some_and(|(role, _)| *role == Role::Assistant) {
        merged.insert(0, (Role::User, Cow::Borrowed(LEADING_USER_TURN)));
    }
    let mut out: Vec<WireMessage<'_>> = merged
        .into_iter()
        .map(|(role, content)| WireMessage {
            role: role_name(role),
            content: Content::Text(content),
        })
        .collect();
    // Photos sent with the message: image blocks, then its text, in the
    // last user message (the message being answered is always in it).
    if !request.images.is_empty()
        && let Some(last) = out.last_mut().filter(|m| m.role == "user")
    {
        let text = match std::mem::replace(&mut last.content, Content::Blocks(Vec::new())) {
            Content::Text(text) => text,
            Content::Blocks(_) => Cow::Borrowed(""),
        };
        let mut blocks: Vec<BlockOut<'_>> = request
            .images
            .iter()
            .map(|image| BlockOut::Image {
                source: ImageSource {
                    kind: "base64",
                    media_type: image.mime(),
                    data: image.base64(),
                },
            })
            .collect();
        blocks.push(BlockOut::Caption { text });
        last.content = Content::Blocks(blocks);
    }
    // Each tool round: the assistant's `tool_use` blocks, then one user
    // message with a `tool_result` block per call (the API's alternation).
    for round in &request.rounds {
        let mut blocks = Vec::new();
        if !round.text.trim().is_empty() {
            blocks.push(BlockOut::Text { text: &round.text });
        }
        blocks.extend(round.calls.iter().map(|c| BlockOut::ToolUse {
            id: &c.id,
            name: &c.name,
            input: if c.arguments.is_object() {
                c.arguments.clone()
            } else {
                Value::Object(serde_json::Map::new())
            },
        }));
        out.push(WireMessage {
            role: "assistant",
            content: Content::Blocks(blocks),
        });
        let results = round
            .results
            .iter()
            .map(|r| BlockOut::ToolResult {
                tool_use_id: &r.call_id,
                content: &r.content,
                is_error: r.is_error,
            })
            .collect();
        out.push(WireMessage {
            role: "user",
            content: Content::Blocks(results),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemo_sessions::context::{Context, Turn};
    use serde_json::json;

    #[test]
    fn a_photo_goes_with_the_message_as_a_base64_image_block() {
        let context = Context {
            turns: vec![Turn {
                role: Role::Assistant,
                content: "earlier answer".into(),
            }],
            ..Default::default()
        };
        let mut request = ModelRequest::new(context, "[photo] what is this?");
        request.images = vec![crate::model::image::Image::from_bytes(&[0xFF, 0xD8, 0xFF, 1]).unwrap()];
        let sent = serde_json::to_value(messages(&request)).unwrap();
        assert_eq!(
            sent,
            json!([
                {"role": "user", "content": LEADING_USER_TURN},
                {"role": "assistant", "content": "earlier answer"},
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AQ=="}},
                    {"type": "text", "text": "[photo] what is this?"},
                ]},
            ])
        );
    }

    #[test]
    fn a_context_opening_with_the_assistant_gets_a_user_turn_first() {
        let context = Context {
            turns: vec![
                Turn {
                    role: Role::Assistant,
                    content: "earlier answer".into(),
                },
                Turn {
                    role: Role::User,
                    content: String::new(),
                },
            ],
            ..Default::default()
        };
        let sent = serde_json::to_value(messages(&ModelRequest::new(context, "next"))).unwrap();
        assert_eq!(
            sent,
            json!([
                {"role": "user", "content": LEADING_USER_TURN},
                {"role": "assistant", "content": "earlier answer"},
                {"role": "user", "content": "next"},
            ])
        );
    }
}
