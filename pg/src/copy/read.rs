//! A user's memory read back from the database in one snapshot, as
//! [`UserMemory`] (archived messages grouped by fold, then the short-term
//! ones), and a channel's shared notes.
//!
//! Reads only. [`read_in`] also serves [`super::write`], which reads the
//! target inside its own transaction to compare and to verify.

use super::{Fold, UserMemory};
use crate::turn::role_of;
use crate::{PgError, PgStore};
use chrono::{DateTime, Utc};
use mnemo_sessions::usage::{Purpose, UsageRow};
use mnemo_sessions::{Record, SafeName};
use tokio_postgres::Transaction;

/// `user`'s memory in one consistent snapshot; `None` when the database
/// has no such user.
pub async fn read_user(store: &PgStore, channel: &str, user: &str) -> Result<Option<UserMemory>, PgError> {
    let mut conn = store.conn().await?;
    let tx = crate::snapshot(&mut conn).await?;
    let memory = read_in(&tx, channel, user).await?;
    tx.commit().await?;
    Ok(memory)
}

const READ_USER: &str = "SELECT summary, summary_at, profile, profile_at, failures FROM mnemo_users
                         WHERE channel = $1 AND user_key = $2";
const READ_MESSAGES: &str = "SELECT ts, role, text, msg_id, thread_id, chat_id, user_name, fold FROM mnemo_messages
                             WHERE channel = $1 AND user_key = $2 ORDER BY seq";
const READ_FOLDS: &str = "SELECT fold, kind, at FROM mnemo_folds WHERE channel = $1 AND user_key = $2";

/// [`read_user`] inside `tx`. The archived messages come first, grouped by
/// fold in fold order (as the files keep them: archive, then log); within
/// each group, and among the short-term ones, in `seq` order.
pub(crate) async fn read_in(tx: &Transaction<'_>, channel: &str, user: &str) -> Result<Option<UserMemory>, PgError> {
    let Some(head) = tx.query_opt(READ_USER, &[&channel, &user]).await? else {
        return Ok(None);
    };
    let rows = tx.query(READ_MESSAGES, &[&channel, &user]).await?;
    let fold_rows = tx.query(READ_FOLDS, &[&channel, &user]).await?;
    let kinds: std::collections::HashMap<i64, (String, DateTime<Utc>)> = fold_rows
        .iter()
        .map(|r| (r.get::<_, i64>(0), (r.get(1), r.get(2))))
        .collect();
    let mut archived: std::collections::BTreeMap<i64, Vec<Record>> = Default::default();
    let mut short = Vec::new();
    for row in &rows {
        let record = Record {
            ts: row.get(0),
            role: role_of(row.get(1)),
            text: row.get(2),
            msg_id: row.get(3),
            channel: channel.to_string(),
            thread_id: row.get(4),
            chat_id: row.get(5),
            user_name: row.get(6),
        };
        match row.get::<_, Option<i64>>(7) {
            Some(fold) => archived.entry(fold).or_default().push(record),
            None => short.push(record),
        }
    }
    let mut memory = UserMemory {
        summary: head.get(0),
        summary_at: head.get(1),
        profile: head.get(2),
        profile_at: head.get(3),
        failures: head.get(4),
        ..UserMemory::default()
    };
    for (fold, records) in archived {
        let (kind, at) = kinds.get(&fold).cloned().unwrap_or_else(|| {
            // A message marked with a fold that has no row: the batch is
            // still one; its time is its last message's.
            let last = records.last().map(|r| r.ts).unwrap_or_default();
            ("summarized".to_string(), last)
        });
        memory.folds.push(Fold {
            messages: records.len(),
            kind,
            at,
        });
        memory.messages.extend(records);
    }
    memory.messages.extend(short);
    memory.facts = crate::memory::Log::read(tx, channel, user).await?.entries();
    let versions = tx
        .query(
            "SELECT seq, ts, by, what, file, before, undone_at FROM mnemo_versions
             WHERE channel = $1 AND user_key = $2 ORDER BY seq",
            &[&channel, &user],
        )
        .await?;
    memory.versions = versions
        .iter()
        .filter_map(|row| crate::memory::version_of(row, user))
        .collect();
    let topics = tx
        .query(
            "SELECT slug, document FROM mnemo_topics WHERE channel = $1 AND user_key = $2 ORDER BY slug",
            &[&channel, &user],
        )
        .await?;
    memory.topics = topics.iter().map(|row| (row.get(0), row.get(1))).collect();
    let key =
        mnemo_sessions::SafeName::from_encoded(user).ok_or_else(|| PgError::Invalid(format!("user key {user:?}")))?;
    memory.digests = crate::digests::read_rows(tx, channel, &key).await?;
    memory.reminders = crate::reminders::read_book(tx, channel, user).await?;
    memory.documents = crate::documents::read_all(tx, channel, user).await?;
    memory.kept = crate::documents::read_kept(tx, channel, user).await?;
    memory.usage = read_usage(tx, channel, Some(&key)).await?;
    Ok(Some(memory))
}

/// `user`'s usage rows (`None`: the channel's totals), as
/// [`super::sort_usage`] orders them. A purpose this build does not know
/// (a newer one wrote it) is an error: a copy would lose it.
async fn read_usage(
    client: &impl tokio_postgres::GenericClient,
    channel: &str,
    user: Option<&SafeName>,
) -> Result<Vec<UsageRow>, PgError> {
    let rows =
        match user {
            Some(user) => client
                .query(
                    "SELECT day, purpose, tokens_in, tokens_out FROM mnemo_usage WHERE channel = $1 AND user_key = $2",
                    &[&channel, &user.as_str()],
                )
                .await?,
            None => {
                client
                    .query(
                        "SELECT day, purpose, tokens_in, tokens_out FROM mnemo_channel_usage WHERE channel = $1",
                        &[&channel],
                    )
                    .await?
            }
        };
    let mut usage = Vec::with_capacity(rows.len());
    for row in rows {
        let purpose: String = row.get(1);
        let purpose = Purpose::parse(&purpose)
            .ok_or_else(|| PgError::Invalid(format!("usage purpose {purpose:?} of channel {channel}")))?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        usage.push(UsageRow {
            user: user.cloned(),
            day: row.get(0),
            purpose,
            tokens_in: count(2),
            tokens_out: count(3),
        });
    }
    super::sort_usage(&mut usage);
    Ok(usage)
}

/// The channel's token totals (by its day and purpose).
pub async fn read_channel_usage(store: &PgStore, channel: &str) -> Result<Vec<UsageRow>, PgError> {
    let conn = store.conn().await?;
    let client: &tokio_postgres::Client = &conn;
    read_usage(client, channel, None).await
}

/// The operator's shared notes of `channel` as `(slug, whole document)`,
/// by slug.
pub async fn read_shared(store: &PgStore, channel: &str) -> Result<Vec<(String, String)>, PgError> {
    let rows = store
        .conn()
        .await?
        .query(
            "SELECT slug, document FROM mnemo_shared_topics WHERE channel = $1 ORDER BY slug",
            &[&channel],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
