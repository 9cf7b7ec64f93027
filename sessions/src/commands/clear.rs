//! The destructive commands: `/session clear` and `/session clear all`
//! (`forget` is in `memory.rs`, as it is undoable). The store removes only
//! the caller's own memory; `clear all` asks for a confirmation first.

use crate::store::{StoreError, UserMemory};

/// Forgets the caller's short-term memory and rolling summary. Long-term
/// memory stays.
pub(super) async fn clear(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let cleared = memory.clear().await?;
    Ok(match (cleared.messages, cleared.had_summary) {
        (0, false) => "There was nothing in your short-term memory. Your long-term notes are kept.".to_string(),
        (n, _) => format!(
            "Cleared our recent conversation ({n} message{}) and its summary. Your long-term profile and notes are kept.",
            if n == 1 { "" } else { "s" }
        ),
    })
}

/// What `clear all` would delete, and how to go ahead. Deletes nothing, so
/// a stray `/session clear all` costs nobody their memory.
pub(super) async fn clear_all_preview(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let held = memory.held().await?;
    Ok(if held.count == 0 {
        "I have nothing stored about you, so there is nothing to clear.".to_string()
    } else {
        format!(
            "This would delete everything I store about you here: short-term memory, profile, topic notes, \
             summaries and archive ({} {}{}). It cannot be undone. To go ahead, send \
             `/session clear all confirm`.",
            held.count,
            held.unit,
            if held.count == 1 { "" } else { "s" }
        )
    })
}

/// Deletes a shared group's own memory: `memory` must be the group's
/// (whoever reaches here was found to be one of its admins); anywhere
/// else it deletes nothing.
pub(super) async fn clear_group(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    if !memory.user().is_group() {
        return Ok(NO_GROUP_MEMORY.to_string());
    }
    let held = memory.clear_all().await?;
    Ok(if held.count == 0 {
        "This group's memory was already empty.".to_string()
    } else {
        format!(
            "Deleted this group's shared memory: its conversation, summaries, notes and archive ({} {}{}). Members' own memories are untouched.",
            held.count,
            held.unit,
            if held.count == 1 { "" } else { "s" }
        )
    })
}

/// `/session clear group` where there is no group memory.
pub const NO_GROUP_MEMORY: &str =
    "There is no group memory here: only a group whose operator turned on shared memory has one.";

/// Deletes everything stored about the caller.
pub(super) async fn clear_all(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let held = memory.clear_all().await?;
    Ok(if held.count == 0 {
        "I had nothing stored about you.".to_string()
    } else {
        format!(
            "Deleted everything I stored about you here: short-term memory, profile, topic notes, summaries and archive ({} {}{}). This cannot be undone.",
            held.count,
            held.unit,
            if held.count == 1 { "" } else { "s" }
        )
    })
}
