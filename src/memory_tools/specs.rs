//! The memory tools as the model sees them: names, descriptions and JSON
//! Schemas of their arguments. No behaviour; `super` runs them. The caller's
//! identity is deliberately not an argument of any tool.

use crate::model::ToolSpec;
use mnemo_sessions::edits::{MAX_KEY_CHARS, MAX_TEXT_CHARS};
use serde_json::json;

pub const SEARCH: &str = "memory_search";
pub const REMEMBER: &str = "memory_remember";
pub const UPDATE: &str = "memory_update";
pub const FORGET: &str = "memory_forget";

/// Longest search query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 200;

pub fn all() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: SEARCH,
            description: "Search this user's long-term memory and older conversations (only this user's). \
                Returns dated matches; profile facts show as `key: text`.",
            parameters: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "maxLength": MAX_QUERY_CHARS, "description": "words to look for"}},
                "required": ["query"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: REMEMBER,
            description: "Add a durable fact to this user's long-term profile, when they ask you to remember \
                something or tell you something lasting about themselves. Returns the fact's key.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": MAX_TEXT_CHARS, "description": "the fact, one line"},
                    "section": {"type": "string", "enum": ["preferences", "facts", "topics", "notes"]}
                },
                "required": ["text"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: UPDATE,
            description: "Replace the text of one fact in this user's profile, by its key.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "key": {"type": "string", "maxLength": MAX_KEY_CHARS},
                    "text": {"type": "string", "maxLength": MAX_TEXT_CHARS}
                },
                "required": ["key", "text"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: FORGET,
            description: "Delete one fact (by key) or topic note (by name) from this user's memory, when they \
                ask you to forget it. A few per turn at most; the user can undo it.",
            parameters: json!({
                "type": "object",
                "properties": {"key": {"type": "string", "maxLength": MAX_KEY_CHARS}},
                "required": ["key"],
                "additionalProperties": false
            }),
        },
    ]
}
