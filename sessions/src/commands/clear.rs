//! The destructive commands: `/session clear` and `/session clear all`
//! (`forget` is in `memory.rs`, as it is undoable). Each runs under the caller's lock and removes
//! only paths computed for the caller's own name; a refused topic name
//! touches nothing.

use super::CommandError;
use crate::fsutil::remove_if_exists;
use crate::names::SafeName;
use crate::recall::Recall;
use crate::report;
use crate::stm::Stm;

/// Removes the caller's STM folder: the log, the rolling summary and any
/// quarantined lines. Long-term memory stays.
pub(super) async fn clear(stm: &Stm, user: &SafeName) -> Result<String, CommandError> {
    let guard = stm.lock(user).await;
    let count = stm.count(user)?;
    let had_summary = stm.layout().summary_path(user).exists();
    stm.remove_locked(&guard, user)?;
    remove_if_exists(stm.layout().state_root(), &stm.layout().stm_dir(user))?;
    // At once: the cleared messages must not come back through recall.
    Recall::of(stm).forget(user)?;
    drop(guard);
    Ok(match (count, had_summary) {
        (0, false) => "There was nothing in your short-term memory. Your long-term notes are kept.".to_string(),
        (n, _) => format!(
            "Cleared our recent conversation ({n} message{}) and its summary. Your long-term profile and notes are kept.",
            if n == 1 { "" } else { "s" }
        ),
    })
}

/// What `clear all` would delete, and how to go ahead. Deletes nothing, so
/// a stray `/session clear all` costs nobody their memory.
pub(super) fn clear_all_preview(stm: &Stm, user: &SafeName) -> Result<String, CommandError> {
    let mut files = 0usize;
    for root in report::user_roots(stm.layout(), user)? {
        files += report::files_under(&root)?.len();
    }
    Ok(if files == 0 {
        "I have nothing stored about you, so there is nothing to clear.".to_string()
    } else {
        format!(
            "This would delete everything I store about you here: short-term memory, profile, topic notes, \
             summaries and archive ({files} file{}). It cannot be undone. To go ahead, send \
             `/session clear all confirm`.",
            if files == 1 { "" } else { "s" }
        )
    })
}

/// Removes everything stored about the caller (see
/// [`report::user_roots`]) and their recall index.
pub(super) async fn clear_all(stm: &Stm, user: &SafeName) -> Result<String, CommandError> {
    let layout = stm.layout();
    let guard = stm.lock(user).await;
    let roots = report::user_roots(layout, user)?;
    let mut files = 0u64;
    for root in &roots {
        files += report::files_under(root)?.len() as u64;
    }
    stm.remove_locked(&guard, user)?;
    for root in &roots {
        remove_if_exists(layout.state_root(), root)?;
    }
    // After the files: an index rebuilt in between would bring them back.
    Recall::of(stm).forget(user)?;
    drop(guard);
    Ok(if files == 0 {
        "I had nothing stored about you.".to_string()
    } else {
        format!(
            "Deleted everything I stored about you here: short-term memory, profile, topic notes, summaries and archive ({files} file{}). This cannot be undone.",
            if files == 1 { "" } else { "s" }
        )
    })
}
