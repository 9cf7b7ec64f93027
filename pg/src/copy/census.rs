//! What the database holds, by name: its users and the channels that have
//! shared notes or token totals — the lists a copy walks, and the users daily and weekly
//! summaries are made for ([`crate::digests`]).
//!
//! Reads only, and nothing but names: it must not depend on what a user's
//! memory is, so that everything that lists users can sit above it.

use crate::{PgError, PgStore};

/// The users of the database, `(channel, user_key)` sorted, optionally only
/// of one channel and/or one user key.
pub async fn users(
    store: &PgStore,
    channel: Option<&str>,
    user_key: Option<&str>,
) -> Result<Vec<(String, String)>, PgError> {
    let rows = store
        .conn()
        .await?
        .query(
            "SELECT channel, user_key FROM mnemo_users
             WHERE ($1::text IS NULL OR channel = $1) AND ($2::text IS NULL OR user_key = $2)
             ORDER BY channel, user_key",
            &[&channel, &user_key],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The channels that have shared notes, sorted.
pub async fn shared_channels(store: &PgStore) -> Result<Vec<String>, PgError> {
    let rows = store
        .conn()
        .await?
        .query("SELECT DISTINCT channel FROM mnemo_shared_topics ORDER BY channel", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The channels that have token totals, sorted.
pub async fn usage_channels(store: &PgStore) -> Result<Vec<String>, PgError> {
    let rows = store
        .conn()
        .await?
        .query("SELECT DISTINCT channel FROM mnemo_channel_usage ORDER BY channel", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
