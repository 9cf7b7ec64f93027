//! The commands that edit long-term memory: `/session remember <text>`,
//! `/session forget <fact or topic>` (by key or topic name at once, by
//! words after a confirmation listing what would go), `/session history
//! [topic]` and `/session undo`, on the caller's [`UserMemory`] (the store
//! keeps versions, so each change is undoable). The replies are written
//! here once, for every store.

use super::Caller;
use crate::edits::{FactLine, Forgotten};
use crate::profile::clipped_line;
use crate::store::{EditBy, StoreError, UserMemory};
use crate::summarizer::FactSection;
use crate::versions::{Author, Version};
use chrono::{DateTime, Utc};

/// Versions listed by `/session history` at most.
const HISTORY_LINES: usize = 15;
/// Characters of a fact shown in a forget preview.
const PREVIEW_CHARS: usize = 120;

fn by_command(caller: Caller<'_>, now: DateTime<Utc>) -> EditBy {
    EditBy {
        by: Author::Command,
        max_chars: caller.max_profile_chars,
        now,
    }
}

/// The reply to an edit: its own, or the words for an argument refused; a
/// storage failure is the caller's error.
fn replied(result: Result<String, StoreError>) -> Result<String, StoreError> {
    match result {
        Ok(reply) => Ok(reply),
        Err(StoreError::Invalid(reason)) => Ok(invalid(reason)),
        Err(StoreError::NotFound) => Ok(NOT_FOUND.to_string()),
        Err(e) => Err(e),
    }
}

/// The reply to an edit refused for its argument (sizes, key shape).
/// The replies here are shared by every store.
pub fn invalid(reason: &str) -> String {
    format!("I can't use that: {reason}. Nothing was changed.")
}

/// The reply to an edit of a fact or note that is not there.
pub const NOT_FOUND: &str = "I have no fact or topic note by that name.";

/// The reply to `/session remember` that stored the fact `key`.
pub fn remembered(key: &str) -> String {
    format!(
        "Noted in your long-term memory as `{key}`. `/session forget {key}` removes it; `/session undo` takes it back."
    )
}

/// The reply to a `/session forget` by exact key or topic name.
pub fn forgot(forgotten: &Forgotten) -> String {
    let name = match forgotten {
        Forgotten::Fact { key } => format!("the fact `{key}`"),
        Forgotten::Topic { slug } => format!("your topic note “{slug}”"),
    };
    format!("Forgot {name}. `/session undo` brings it back.")
}

/// The reply to a `/session forget <words>`: nothing matches (naming the
/// user's topic notes), or what would go and how to confirm.
pub fn forget_preview(matches: &[FactLine], what: &str, topics: &[String]) -> String {
    if matches.is_empty() {
        let mut reply = "I have no fact or topic note that matches. Nothing was deleted.".to_string();
        if !topics.is_empty() {
            reply.push_str(&format!(" Your topic notes are: {}", topics.join(", ")));
        }
        return reply;
    }
    let mut reply = format!(
        "This would forget {} fact{}:",
        matches.len(),
        if matches.len() == 1 { "" } else { "s" }
    );
    for fact in matches {
        reply.push_str(&format!(
            "\n- `{}`: {}",
            fact.key,
            clipped_line(&fact.value, PREVIEW_CHARS)
        ));
    }
    reply.push_str(&format!(
        "\nTo go ahead, send `/session forget confirm {}` (`/session undo` can take it back).",
        what.trim()
    ));
    reply
}

/// The reply to `/session forget confirm <words>` that removed `n` facts.
pub fn forgot_confirmed(n: usize) -> String {
    if n == 0 {
        return "Nothing in your long-term memory matches that, so nothing was deleted.".to_string();
    }
    format!(
        "Forgot {n} fact{}. `/session undo` brings {} back.",
        if n == 1 { "" } else { "s" },
        if n == 1 { "it" } else { "them" }
    )
}

/// The reply to `/session history [topic]` from the kept versions, newest
/// first.
pub fn history_text(kept: Vec<Version>, topic: Option<&str>) -> String {
    let wanted = topic.map(|t| format!("topic {}", t.trim().to_ascii_lowercase()));
    let kept: Vec<_> = kept
        .into_iter()
        .filter(|v| wanted.as_ref().is_none_or(|w| v.file_label() == *w))
        .collect();
    if kept.is_empty() {
        return "There are no earlier versions of your long-term memory to show.".to_string();
    }
    let mut out = format!(
        "Changes to your long-term memory, newest first ({} kept; `/session undo` reverts the newest not yet undone):",
        kept.len()
    );
    for v in kept.iter().take(HISTORY_LINES) {
        let undone = v
            .undone
            .map(|at| format!(" (undone {})", at.format("%Y-%m-%d %H:%M UTC")))
            .unwrap_or_default();
        out.push_str(&format!(
            "\n{} — {} — {} by {}{undone}",
            v.ts.format("%Y-%m-%d %H:%M UTC"),
            v.file_label(),
            v.what,
            v.by.label()
        ));
    }
    if kept.len() > HISTORY_LINES {
        out.push_str(&format!("\n… and {} older.", kept.len() - HISTORY_LINES));
    }
    out
}

/// The reply to `/session undo`.
pub fn undone(undone: Option<&Version>) -> String {
    match undone {
        None => "There is no change to your long-term memory to undo.".to_string(),
        Some(v) => format!(
            "Undid the last change to your {} ({}, {} by {}).",
            v.file_label(),
            v.ts.format("%Y-%m-%d %H:%M UTC"),
            v.what,
            v.by.label()
        ),
    }
}

pub(super) async fn remember(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    text: &str,
    now: DateTime<Utc>,
) -> Result<String, StoreError> {
    let done = memory.remember(by_command(caller, now), FactSection::Notes, text).await;
    replied(done.map(|key| remembered(&key)))
}

/// By exact key or topic name: forgotten at once (undoable). Otherwise the
/// facts holding all the words are listed, and nothing goes until
/// `/session forget confirm <words>`.
pub(super) async fn forget(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    what: &str,
    now: DateTime<Utc>,
) -> Result<String, StoreError> {
    if let Some(reply) = super::documents::forget(memory, what).await? {
        return Ok(reply);
    }
    match memory.forget(by_command(caller, now), what).await {
        Ok(forgotten) => return Ok(forgot(&forgotten)),
        Err(StoreError::NotFound | StoreError::Invalid(_)) => {}
        Err(e) => return Err(e),
    }
    let matches = match memory.matching(what).await {
        Ok(matches) => matches,
        Err(e) => return replied(Err(e)),
    };
    let topics = if matches.is_empty() {
        memory.topic_slugs().await?
    } else {
        Vec::new()
    };
    Ok(forget_preview(&matches, what, &topics))
}

/// Forgets every fact holding all the words, in one undoable change.
pub(super) async fn forget_confirmed(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    what: &str,
    now: DateTime<Utc>,
) -> Result<String, StoreError> {
    let matches = match memory.matching(what).await {
        Ok(matches) => matches,
        Err(e) => return replied(Err(e)),
    };
    let keys: Vec<&str> = matches.iter().map(|f| f.key.as_str()).collect();
    let done = memory.forget_facts(by_command(caller, now), &keys).await;
    replied(done.map(forgot_confirmed))
}
