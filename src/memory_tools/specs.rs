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
pub use super::reminders::{CANCEL as REMINDER_CANCEL, LIST as REMINDER_LIST, SET as REMINDER_SET};

/// Longest search query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 200;

/// The memory tools, and the reminder tools where reminders can be set.
pub fn all(reminders: bool) -> Vec<ToolSpec> {
    let mut specs = memory();
    if reminders {
        specs.extend(reminder());
    }
    specs
}

fn reminder() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: REMINDER_SET,
            description: "Set a reminder: at `when` the bot sends this user `text` in this chat. `when` is an RFC 3339 \
                time with its offset (e.g. 2026-12-06T09:00:00+01:00; the current time and the user's timezone are in \
                your instructions) or relative: +90s, +10m, +2h, +3d. `repeat`, only when they ask for a recurring \
                reminder: a 5-field cron rule (minute hour day month weekday) on the user's clock, at most every 10 \
                minutes; `when` is then its first time.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "when": {"type": "string", "maxLength": 64},
                    "text": {"type": "string", "maxLength": mnemo_sessions::reminders::MAX_TEXT_CHARS},
                    "repeat": {"type": "string", "maxLength": 100}
                },
                "required": ["when", "text"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: REMINDER_LIST,
            description: "List this user's waiting reminders: id, time (UTC), repeat rule, text.",
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        },
        ToolSpec {
            name: REMINDER_CANCEL,
            description: "Cancel one of this user's reminders by its id (from reminder_list).",
            parameters: json!({
                "type": "object",
                "properties": {"id": {"type": "string", "maxLength": 16}},
                "required": ["id"],
                "additionalProperties": false
            }),
        },
    ]
}

fn memory() -> Vec<ToolSpec> {
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
