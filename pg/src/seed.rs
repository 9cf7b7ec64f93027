//! History for `mnemo bench --store postgres`: a user's earlier messages
//! stored the way the store keeps them after folds — the oldest archived
//! in fold-sized batches, the newest still short-term, a rolling summary —
//! through the same verified one-transaction writer as `mnemo store copy`
//! ([`crate::copy::write_user`]). For a user nobody is talking to.

use crate::channel::PgChannel;
use crate::copy::{CopyError, Fold, UserMemory, write_user};
use chrono::{DateTime, Utc};
use mnemo_sessions::{Record, SafeName};

/// Stores `records` (oldest first) for `user`: the first `folded` archived
/// in batches of `batch_len`, the rest short-term, and `summary` as the
/// rolling summary. The user must have nothing stored.
pub async fn seed_history(
    channel: &PgChannel,
    user: &SafeName,
    records: Vec<Record>,
    folded: usize,
    batch_len: usize,
    summary: &str,
    now: DateTime<Utc>,
) -> Result<(), CopyError> {
    let batch_len = batch_len.max(1);
    let folds = (0..folded)
        .step_by(batch_len)
        .map(|start| Fold {
            messages: batch_len.min(folded - start),
            kind: "summarized".into(),
            at: now,
        })
        .collect();
    let memory = UserMemory {
        messages: records,
        folds,
        summary: (!summary.trim().is_empty()).then(|| summary.trim().to_string()),
        summary_at: Some(now),
        ..UserMemory::default()
    }
    .as_stored();
    write_user(channel.store(), channel.name(), user.as_str(), &memory, false).await?;
    Ok(())
}
