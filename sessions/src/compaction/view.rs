//! Reading short-term memory as compaction leaves it: the summary and the
//! records not yet folded into it, consistently, without the user's lock.
//! Read-only; the turn path reads through [`crate::session::Sessions`]
//! instead, and these serve the CLI, export, expiry and tests.

use super::{CompactionError, plan};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::Stm;
use crate::summary::{self, FoldMarker};

/// What the context builder needs from short-term memory, read consistently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecentMemory {
    /// The rolling summary's body, if any.
    pub summary: Option<String>,
    /// The last records not yet folded into `summary`, oldest first.
    pub recent: Vec<Record>,
}

/// The summary and the last `n` records not folded into it, as one
/// consistent view without taking the user's lock: the summary is read
/// before and after the log, and the read is repeated if a compaction
/// committed in between (its summary write comes before its log rewrite, so
/// an unchanged summary means the log read matches it).
pub fn read_for_context(stm: &Stm, user: &SafeName, n: usize) -> Result<RecentMemory, CompactionError> {
    let layout = stm.layout();
    let mut attempts = 0;
    loop {
        let before = summary::read_or_salvage(layout, user)?;
        let records = stm.read_all(user)?.records;
        let after = summary::read_or_salvage(layout, user)?;
        attempts += 1;
        if before == after || attempts >= 5 {
            let marker = after.as_ref().and_then(|s| s.meta.last_folded.as_ref());
            let unfolded = &records[plan::already_folded(&records, marker, &plan::no_lines)..];
            let recent = unfolded[unfolded.len().saturating_sub(n)..].to_vec();
            let summary = after.map(|s| s.body.trim().to_string()).filter(|b| !b.is_empty());
            return Ok(RecentMemory { summary, recent });
        }
    }
}

/// The last `n` records not yet folded into the rolling summary, oldest
/// first. Prefer [`read_for_context`], which also returns the matching
/// summary.
pub fn unfolded_recent(stm: &Stm, user: &SafeName, n: usize) -> Result<Vec<Record>, CompactionError> {
    Ok(read_for_context(stm, user, n)?.recent)
}

/// How many records at the head of `records` (a snapshot of the user's log)
/// are already folded into the summary and only wait to be archived and
/// dropped. Without the log's bytes at hand, a batch is recognised by its
/// records encoded again: lines mnemo appended always are (see
/// `plan::already_folded`).
pub fn already_folded(layout: &Layout, user: &SafeName, records: &[Record]) -> Result<usize, CompactionError> {
    let current = summary::read_or_salvage(layout, user)?;
    let marker: Option<&FoldMarker> = current.as_ref().and_then(|s| s.meta.last_folded.as_ref());
    Ok(plan::already_folded(records, marker, &plan::no_lines))
}
