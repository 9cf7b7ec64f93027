//! `/session search <words>`: the caller's own memory, searched with the
//! same index recall uses, answered by mnemo itself (no model call). Only
//! the caller's index and the operator's `_shared` notes are read; the
//! reply quotes the caller's own words back, so it is memory-revealing
//! (see [`super::SessionCommand::reveals_memory`]).

use crate::names::SafeName;
use crate::profile::clipped_line;
use crate::recall::Recall;
use crate::stm::Stm;

/// Hits shown at most.
const LIMIT: usize = 10;
/// Characters of a hit shown at most.
const HIT_CHARS: usize = 280;

pub(super) async fn search(stm: &Stm, user: &SafeName, words: &str) -> String {
    // On the blocking pool: a user's first search may load their index.
    let (recall, user, words) = (Recall::of(stm), user.clone(), words.to_string());
    let hits = crate::blocking::off_workers(move || recall.search(&user, &words, LIMIT))
        .await
        .unwrap_or_default();
    if hits.is_empty() {
        return "I found nothing in your memory for that. Try other words — names, places or things you mentioned."
            .to_string();
    }
    let mut out = format!(
        "Found {} match{} in your memory (best first):",
        hits.len(),
        if hits.len() == 1 { "" } else { "es" }
    );
    for hit in hits {
        out.push_str(&format!("\n{} {}", hit.label, clipped_line(&hit.text, HIT_CHARS)));
    }
    out
}
