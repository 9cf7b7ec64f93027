//! `/session search <words>`: the caller's own memory, searched as the
//! store searches it for recall, answered by mnemo itself (no model call).
//! Only the caller's memory and the operator's `_shared` notes are read;
//! the reply quotes the caller's own words back, so it is memory-revealing
//! (see [`super::SessionCommand::reveals_memory`]).

use crate::profile::clipped_line;
use crate::store::{StoreError, UserMemory};

/// Hits shown at most.
const LIMIT: usize = 10;
/// Characters of a hit shown at most.
const HIT_CHARS: usize = 280;

/// The reply to `/session search` without a word to look for.
pub const NO_WORDS: &str = "Give me a word to look for: `/session search <words>`, e.g. `/session search dentist`.";

pub(super) async fn search(memory: &mut dyn UserMemory, words: &str) -> Result<String, StoreError> {
    if !words.chars().any(char::is_alphanumeric) {
        return Ok(NO_WORDS.to_string());
    }
    let hits = memory.search(words, LIMIT).await?;
    if hits.is_empty() {
        return Ok(
            "I found nothing in your memory for that. Try other words — names, places or things you mentioned."
                .to_string(),
        );
    }
    let mut out = format!(
        "Found {} match{} in your memory (best first):",
        hits.len(),
        if hits.len() == 1 { "" } else { "es" }
    );
    for hit in hits {
        out.push_str(&format!("\n{} {}", hit.label, clipped_line(&hit.text, HIT_CHARS)));
    }
    Ok(out)
}
