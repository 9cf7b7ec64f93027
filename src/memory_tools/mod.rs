//! The memory tools' executor: runs `memory_search`, `memory_remember`,
//! `memory_update` and `memory_forget` for the one caller it was built for
//! ([`MemoryTools::for_caller`]: the caller's `SafeName` in one channel's
//! memory). No tool takes a user, channel or path as an argument, so
//! nothing a model is talked into — by the user's message or by a recalled
//! note — can reach another user's memory.
//!
//! Arguments are checked strictly (an object with exactly the documented
//! fields, sizes and key shape from `mnemo_sessions::edits`), here, once,
//! whatever the store; the caller's memory is the turn's own
//! [`UserMemory`] (lent to the tools while the model answers), whose
//! writes keep versions (undoable); at most [`MAX_DELETIONS_PER_TURN`]
//! deletions per turn. Each call is logged with tool, sizes and outcome —
//! never the text — and counted in metrics.

mod reminders;
mod specs;

pub use reminders::Reminding;
pub use specs::MAX_QUERY_CHARS;

use crate::model::{ToolCall, ToolExecutor, ToolResult, ToolSpec};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mnemo_sessions::SafeName;
use mnemo_sessions::edits::Forgotten;
use mnemo_sessions::profile::clipped_line;
use mnemo_sessions::recall::Item;
use mnemo_sessions::store::{EditBy, StoreError, UserMemory};
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::versions::Author;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Mutex;

/// Facts or notes the model may delete in one turn.
pub const MAX_DELETIONS_PER_TURN: usize = 3;
/// Matches `memory_search` returns at most.
const SEARCH_HITS: usize = 8;
/// Characters of one search match at most.
const HIT_CHARS: usize = 300;

/// The tools of one turn of one caller.
pub struct MemoryTools {
    /// The caller's memory, lent by the turn (given back by
    /// [`MemoryTools::into_memory`]); on Postgres it holds the user's lock
    /// throughout.
    memory: Mutex<Box<dyn UserMemory>>,
    channel: String,
    user: SafeName,
    max_profile_chars: usize,
    now: DateTime<Utc>,
    deletions: AtomicUsize,
    /// Set where reminders can be made (a chat): the reminder tools.
    reminding: Option<Reminding>,
}

/// Why a call did not do what it asked: a fixed code for logs and metrics,
/// and a sentence for the model.
struct Refusal {
    code: &'static str,
    message: String,
}

impl Refusal {
    fn invalid(message: impl Into<String>) -> Refusal {
        Refusal {
            code: "invalid",
            message: message.into(),
        }
    }
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Refusal {
        match e {
            StoreError::Invalid(reason) => Refusal::invalid(reason),
            StoreError::NotFound => Refusal {
                code: "not_found",
                message: "no fact or topic note with that key; use memory_search to find keys".into(),
            },
            StoreError::Storage(e) => {
                tracing::warn!(error = %e, "memory tool could not change the memory");
                Refusal {
                    code: "failed",
                    message: "the memory could not be changed (a storage problem)".into(),
                }
            }
        }
    }
}

impl MemoryTools {
    /// The tools for the owner of `memory` (the turn's), in `channel`, for
    /// one turn at `now`; facts are kept under `max_profile_chars`.
    pub fn for_caller(
        memory: Box<dyn UserMemory>,
        channel: &str,
        max_profile_chars: usize,
        now: DateTime<Utc>,
    ) -> MemoryTools {
        MemoryTools {
            user: memory.user().clone(),
            memory: Mutex::new(memory),
            channel: channel.to_string(),
            max_profile_chars,
            now,
            deletions: AtomicUsize::new(0),
            reminding: None,
        }
    }

    /// These tools with the reminder tools, for reminders posted as
    /// `reminding` says.
    pub fn with_reminders(mut self, reminding: Reminding) -> MemoryTools {
        self.reminding = Some(reminding);
        self
    }

    /// The turn's memory, back.
    pub fn into_memory(self) -> Box<dyn UserMemory> {
        self.memory.into_inner()
    }

    fn edit_by(&self) -> EditBy {
        EditBy {
            by: Author::Tool,
            max_chars: self.max_profile_chars,
            now: self.now,
        }
    }

    async fn run(&self, tool: &'static str, args: &Value) -> Result<String, Refusal> {
        match tool {
            specs::SEARCH => {
                let [query] = fields(args, [("query", true)])?;
                let query = query.unwrap_or_default();
                if query.trim().is_empty() || query.chars().count() > MAX_QUERY_CHARS {
                    return Err(Refusal::invalid(format!(
                        "the query must be 1 to {MAX_QUERY_CHARS} characters"
                    )));
                }
                let hits = self.search(query).await?;
                if hits.is_empty() {
                    return Ok("no matches".into());
                }
                Ok(hits
                    .iter()
                    .map(|h| format!("{} {}", h.label, clipped_line(&h.text, HIT_CHARS)))
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            specs::REMEMBER => {
                let [text, section] = fields(args, [("text", true), ("section", false)])?;
                let section = match section {
                    None | Some("notes") => FactSection::Notes,
                    Some("preferences") => FactSection::Preferences,
                    Some("facts") => FactSection::Facts,
                    Some("topics") => FactSection::Topics,
                    Some(_) => return Err(Refusal::invalid("section must be preferences, facts, topics or notes")),
                };
                let text = text.unwrap_or_default();
                let key = self.memory.lock().await.remember(self.edit_by(), section, text).await?;
                Ok(format!("remembered as `{key}`"))
            }
            specs::UPDATE => {
                let [key, text] = fields(args, [("key", true), ("text", true)])?;
                let (key, text) = (key.unwrap_or_default(), text.unwrap_or_default());
                self.memory.lock().await.update(self.edit_by(), key, text).await?;
                Ok("updated".into())
            }
            specs::FORGET => {
                let [key] = fields(args, [("key", true)])?;
                if self.deletions.load(Ordering::SeqCst) >= MAX_DELETIONS_PER_TURN {
                    return Err(Refusal {
                        code: "limit",
                        message: format!(
                            "refused: at most {MAX_DELETIONS_PER_TURN} deletions per turn; the user can use /session forget"
                        ),
                    });
                }
                let key = key.unwrap_or_default();
                let forgotten = self.memory.lock().await.forget(self.edit_by(), key).await?;
                self.deletions.fetch_add(1, Ordering::SeqCst);
                Ok(match forgotten {
                    Forgotten::Fact { key } => format!("forgot fact `{key}` (the user can undo it)"),
                    Forgotten::Topic { slug } => format!("forgot topic note `{slug}` (the user can undo it)"),
                })
            }
            specs::REMINDER_SET | specs::REMINDER_LIST | specs::REMINDER_CANCEL => self.reminder_tool(tool, args).await,
            _ => Err(Refusal::invalid("no such tool")),
        }
    }

    async fn search(&self, query: &str) -> Result<Vec<Item>, Refusal> {
        Ok(self.memory.lock().await.search(query, SEARCH_HITS).await?)
    }
}

/// The string fields of an argument object, in the order asked; refuses a
/// non-object, a missing required field, a non-string, and any field not
/// asked for (a `user` or `channel` argument is refused, not ignored).
fn fields<'a, const N: usize>(args: &'a Value, wanted: [(&str, bool); N]) -> Result<[Option<&'a str>; N], Refusal> {
    let Value::Object(object) = args else {
        return Err(Refusal::invalid("the arguments must be a JSON object"));
    };
    if let Some(extra) = object.keys().find(|k| !wanted.iter().any(|(name, _)| name == k)) {
        return Err(Refusal::invalid(format!(
            "unknown argument `{}`; this tool acts only on the current user's memory",
            clipped_line(extra, 40)
        )));
    }
    let mut out = [None; N];
    for (slot, (name, required)) in out.iter_mut().zip(wanted) {
        match object.get(name) {
            Some(Value::String(s)) => *slot = Some(s.as_str()),
            None | Some(Value::Null) if !required => {}
            None | Some(Value::Null) => return Err(Refusal::invalid(format!("`{name}` is required"))),
            Some(_) => return Err(Refusal::invalid(format!("`{name}` must be a string"))),
        }
    }
    Ok(out)
}

/// The tool's own name (a `'static` label), or `unknown`.
fn tool_name(name: &str) -> &'static str {
    [
        specs::SEARCH,
        specs::REMEMBER,
        specs::UPDATE,
        specs::FORGET,
        specs::REMINDER_SET,
        specs::REMINDER_LIST,
        specs::REMINDER_CANCEL,
    ]
    .into_iter()
    .find(|t| *t == name)
    .unwrap_or("unknown")
}

#[async_trait]
impl ToolExecutor for MemoryTools {
    fn specs(&self) -> Vec<ToolSpec> {
        specs::all(self.reminding.as_ref().is_some_and(|r| r.max_per_user > 0))
    }

    async fn call(&self, call: &ToolCall) -> ToolResult {
        let tool = tool_name(&call.name);
        let args_bytes = call.arguments.to_string().len();
        let (outcome, content, is_error) = match self.run(tool, &call.arguments).await {
            Ok(content) => ("ok", content, false),
            Err(refusal) => (refusal.code, format!("error: {}", refusal.message), true),
        };
        let channel = &self.channel;
        tracing::info!(%channel, user = %self.user.log_id(), tool, args_bytes, result_bytes = content.len(), outcome, "memory tool call");
        crate::ops::metrics::metrics().tool_call(channel, tool, outcome);
        ToolResult {
            call_id: call.id.clone(),
            content,
            is_error,
        }
    }
}
