//! Bulk history for `mnemo bench --store postgres`: a user's earlier
//! messages written the way the store keeps them after folds — the oldest
//! archived in fold-sized batches (each with its `mnemo_folds` row), the
//! newest still short-term, a rolling summary — in one transaction, in
//! chunks of [`CHUNK`] rows per statement. Not a turn path: nothing here
//! takes the user's lock, so it is for a user nobody is talking to.

use crate::channel::PgChannel;
use crate::turn::role_name;
use crate::{PgError, pg_text};
use chrono::{DateTime, Utc};
use mnemo_sessions::{Record, SafeName};

/// Rows per insert statement.
const CHUNK: usize = 5_000;

/// Stores `records` (oldest first) for `user`: the first `folded` archived
/// in batches of `batch_len` (fold 1, 2, …), the rest short-term, and
/// `summary` as the rolling summary. The user must have nothing stored.
pub async fn seed_history(
    channel: &PgChannel,
    user: &SafeName,
    records: &[Record],
    folded: usize,
    batch_len: usize,
    summary: &str,
    now: DateTime<Utc>,
) -> Result<(), PgError> {
    let (name, key) = (channel.name(), user.as_str());
    let batch_len = batch_len.max(1);
    let folds = i64::try_from(folded.div_ceil(batch_len)).unwrap_or(i64::MAX);
    let next_seq = i64::try_from(records.len()).unwrap_or(i64::MAX) + 1;
    let mut conn = channel.store().conn().await?;
    let tx = conn.transaction().await?;
    tx.execute(
        "INSERT INTO mnemo_users (channel, user_key, next_seq, summary, summary_at, folds)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&name, &key, &next_seq, &summary, &now, &folds],
    )
    .await?;
    for (chunk_no, chunk) in records.chunks(CHUNK).enumerate() {
        let base = chunk_no * CHUNK;
        let seq: Vec<i64> = (base..base + chunk.len()).map(|i| i as i64 + 1).collect();
        let fold: Vec<Option<i64>> = (base..base + chunk.len())
            .map(|i| (i < folded).then(|| (i / batch_len) as i64 + 1))
            .collect();
        let ts: Vec<DateTime<Utc>> = chunk.iter().map(|r| r.ts).collect();
        let role: Vec<&str> = chunk.iter().map(|r| role_name(r.role)).collect();
        let text: Vec<String> = chunk.iter().map(|r| pg_text(&r.text).into_owned()).collect();
        let msg_id: Vec<String> = chunk.iter().map(|r| pg_text(&r.msg_id).into_owned()).collect();
        let chat: Vec<Option<&str>> = chunk.iter().map(|r| r.chat_id.as_deref()).collect();
        let user_name: Vec<Option<&str>> = chunk.iter().map(|r| r.user_name.as_deref()).collect();
        tx.execute(
            "INSERT INTO mnemo_messages (channel, user_key, seq, ts, role, text, msg_id, chat_id, user_name, fold)
             SELECT $1, $2, * FROM unnest($3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],
                                          $8::text[], $9::text[], $10::bigint[])",
            &[&name, &key, &seq, &ts, &role, &text, &msg_id, &chat, &user_name, &fold],
        )
        .await?;
    }
    tx.execute(
        "INSERT INTO mnemo_folds (channel, user_key, fold, first_seq, last_seq, messages, kind, at)
         SELECT $1, $2, f, (f - 1) * $3 + 1, least(f * $3, $4), least(f * $3, $4) - (f - 1) * $3, 'summarized', $5
         FROM generate_series(1::bigint, $6::bigint) AS f",
        &[&name, &key, &(batch_len as i64), &(folded as i64), &now, &folds],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
