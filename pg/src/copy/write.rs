//! A user's memory written into the database in one transaction per user:
//! the user's turn and fold locks taken, the memory already there compared
//! (the same: nothing written; different: refused unless replacing), the
//! rows inserted, read back and compared with the source before the commit;
//! and a channel's shared notes, likewise verified.
//!
//! It writes nothing outside that transaction: a failure anywhere rolls the
//! user back whole (the module doc of [`super`]).

use super::read::read_in;
use super::{CopyError, UserMemory, Written};
use crate::memory::name_of;
use crate::turn::role_name;
use crate::usage::signed;
use crate::{PgError, PgStore, lock_key, pg_text};
use chrono::{DateTime, Utc};
use tokio_postgres::Transaction;

/// Rows inserted per statement.
const CHUNK: usize = 2_000;

const INSERT_MESSAGES: &str = "
INSERT INTO mnemo_messages (channel, user_key, seq, ts, role, text, msg_id, thread_id, chat_id, user_name, fold)
SELECT $1, $2, m.* FROM unnest($3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],
                               $8::text[], $9::text[], $10::text[], $11::bigint[]) AS m";

/// Writes `memory` (as [`UserMemory::as_stored`] made it) as `user` of
/// `channel`, in one transaction, verified before it commits (see the
/// module doc). `replace`: a user already there with different memory is
/// deleted first instead of refused.
pub async fn write_user(
    store: &PgStore,
    channel: &str,
    user: &str,
    memory: &UserMemory,
    replace: bool,
) -> Result<Written, CopyError> {
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    let written = write_in(&tx, channel, user, memory, replace).await?;
    if !matches!(written, Written::AlreadyThere(_)) {
        tx.commit().await?;
    }
    Ok(written)
}

/// [`write_user`] inside `tx`, which the caller commits (nothing to commit
/// when the memory was there already). On a connection that holds the
/// user's turn lock already (a turn's own), the same lock is granted again.
pub(crate) async fn write_in(
    tx: &Transaction<'_>,
    channel: &str,
    user: &str,
    memory: &UserMemory,
    replace: bool,
) -> Result<Written, CopyError> {
    let want = memory.tally();
    // The user's turn and fold locks, released with the transaction.
    for purpose in ["turn", "fold"] {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(purpose, channel, user)])
            .await?;
    }
    let mut replaced = false;
    if let Some(have) = read_in(tx, channel, user).await? {
        if have.same_as(memory) {
            return Ok(Written::AlreadyThere(want));
        }
        if !replace {
            return Err(CopyError::Differs {
                channel: channel.to_string(),
                user: user.to_string(),
                have: have.tally(),
                want,
            });
        }
        for table in ["mnemo_users", "mnemo_usage"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE channel = $1 AND user_key = $2"),
                &[&channel, &user],
            )
            .await?;
        }
        replaced = true;
    }
    insert(tx, channel, user, memory).await?;
    let back = read_in(tx, channel, user).await?.unwrap_or_default();
    let got = back.tally();
    if got != want || !back.same_as(memory) {
        return Err(CopyError::Mismatch {
            channel: channel.to_string(),
            user: user.to_string(),
            source_tally: want,
            target: got,
        });
    }
    if back.usage != memory.usage {
        return Err(CopyError::UsageMismatch {
            channel: channel.to_string(),
            user: user.to_string(),
        });
    }
    Ok(if replaced {
        Written::Replaced(want)
    } else {
        Written::Copied(want)
    })
}

/// The user row, the messages (in chunks) and the fold rows.
async fn insert(tx: &Transaction<'_>, channel: &str, user: &str, memory: &UserMemory) -> Result<(), PgError> {
    let n = i64::try_from(memory.messages.len()).unwrap_or(i64::MAX);
    let folds = i64::try_from(memory.folds.len()).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO mnemo_users (channel, user_key, next_seq, summary, summary_at, profile, profile_at, folds, failures)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &channel,
            &user,
            &(n + 1),
            &memory.summary,
            &memory.summary_at,
            &memory.profile,
            &memory.profile_at,
            &folds,
            &memory.failures,
        ],
    )
    .await?;
    // fold[i]: the fold number of message i (None: short-term).
    let mut fold_of: Vec<Option<i64>> = Vec::with_capacity(memory.messages.len());
    for (k, f) in memory.folds.iter().enumerate() {
        fold_of.extend(std::iter::repeat_n(Some(k as i64 + 1), f.messages));
    }
    fold_of.resize(memory.messages.len(), None);
    for (c, chunk) in memory.messages.chunks(CHUNK).enumerate() {
        let start = (c * CHUNK) as i64;
        let seqs: Vec<i64> = (0..chunk.len() as i64).map(|i| start + i + 1).collect();
        let ts: Vec<DateTime<Utc>> = chunk.iter().map(|r| r.ts).collect();
        let roles: Vec<&str> = chunk.iter().map(|r| role_name(r.role)).collect();
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let ids: Vec<&str> = chunk.iter().map(|r| r.msg_id.as_str()).collect();
        let threads: Vec<Option<&str>> = chunk.iter().map(|r| r.thread_id.as_deref()).collect();
        let chats: Vec<Option<&str>> = chunk.iter().map(|r| r.chat_id.as_deref()).collect();
        let names: Vec<Option<&str>> = chunk.iter().map(|r| r.user_name.as_deref()).collect();
        let folds_here = &fold_of[c * CHUNK..c * CHUNK + chunk.len()];
        tx.execute(
            INSERT_MESSAGES,
            &[
                &channel,
                &user,
                &seqs,
                &ts,
                &roles,
                &texts,
                &ids,
                &threads,
                &chats,
                &names,
                &folds_here,
            ],
        )
        .await?;
    }
    let mut first = 1i64;
    for (k, f) in memory.folds.iter().enumerate() {
        let count = i64::try_from(f.messages).unwrap_or(i64::MAX);
        let messages = i32::try_from(f.messages).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO mnemo_folds (channel, user_key, fold, first_seq, last_seq, messages, kind, at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &channel,
                &user,
                &(k as i64 + 1),
                &first,
                &(first + count - 1),
                &messages,
                &f.kind,
                &f.at,
            ],
        )
        .await?;
        first += count;
    }
    insert_long_term(tx, channel, user, memory).await
}

/// The fact log (in order), the versions (their `seq` kept), the topic
/// notes and the daily and weekly summaries.
async fn insert_long_term(tx: &Transaction<'_>, channel: &str, user: &str, memory: &UserMemory) -> Result<(), PgError> {
    for e in &memory.facts {
        tx.execute(
            "INSERT INTO mnemo_facts (channel, user_key, ts, op, section, key, value, sources, supersedes, by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &channel,
                &user,
                &e.ts,
                &name_of(&e.op),
                &name_of(&e.section),
                &e.key,
                &e.value,
                &e.sources,
                &e.supersedes,
                &name_of(&e.by),
            ],
        )
        .await?;
    }
    for v in &memory.versions {
        let seq = i64::try_from(v.seq).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO mnemo_versions (channel, user_key, seq, ts, by, what, file, before, undone_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &channel,
                &user,
                &seq,
                &v.ts,
                &name_of(&v.by),
                &v.what,
                &v.file,
                &v.before,
                &v.undone,
            ],
        )
        .await?;
    }
    let now = Utc::now();
    for (slug, document) in &memory.topics {
        tx.execute(
            "INSERT INTO mnemo_topics (channel, user_key, slug, document, updated_at) VALUES ($1, $2, $3, $4, $5)",
            &[&channel, &user, slug, document, &now],
        )
        .await?;
    }
    crate::digests::insert_rows(tx, channel, user, &memory.digests).await?;
    for doc in &memory.documents {
        crate::documents::insert(tx, channel, user, doc).await?;
    }
    for file in &memory.kept {
        crate::documents::insert_kept(tx, channel, user, file).await?;
    }
    // The source's count, not added to one already there (rows the user
    // left when their memory was cleared): a copy run again counts once.
    for r in &memory.usage {
        tx.execute(
            "INSERT INTO mnemo_usage (channel, user_key, day, purpose, tokens_in, tokens_out)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (channel, user_key, day, purpose) DO UPDATE
             SET tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out",
            &[
                &channel,
                &user,
                &r.day,
                &r.purpose.as_str(),
                &signed(r.tokens_in),
                &signed(r.tokens_out),
            ],
        )
        .await?;
    }
    crate::reminders::write_book(tx, channel, user, &memory.reminders).await
}

/// Adds the channel's token totals `rows` to `channel`'s, each day and
/// purpose set to the larger of the two counts (a count only grows: the
/// larger has seen every spend the other has, so a copy run again, or
/// one into a database that served turns since, counts nothing twice).
/// Returns how many rows it wrote.
pub async fn write_channel_usage(
    store: &PgStore,
    channel: &str,
    rows: &[mnemo_sessions::usage::UsageRow],
) -> Result<usize, PgError> {
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    for r in rows {
        tx.execute(
            "INSERT INTO mnemo_channel_usage (channel, day, purpose, tokens_in, tokens_out)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (channel, day, purpose) DO UPDATE
             SET tokens_in = GREATEST(mnemo_channel_usage.tokens_in, EXCLUDED.tokens_in),
                 tokens_out = GREATEST(mnemo_channel_usage.tokens_out, EXCLUDED.tokens_out)",
            &[
                &channel,
                &r.day,
                &r.purpose.as_str(),
                &signed(r.tokens_in),
                &signed(r.tokens_out),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(rows.len())
}

/// Writes `notes` (`(slug, document)`, NUL kept as U+2400) as `channel`'s
/// shared notes, replacing any of the same slug, in one transaction read
/// back before it commits; notes of other slugs stay. Returns how many.
pub async fn write_shared(store: &PgStore, channel: &str, notes: &[(String, String)]) -> Result<usize, CopyError> {
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    let now = Utc::now();
    for (slug, document) in notes {
        tx.execute(
            "INSERT INTO mnemo_shared_topics (channel, slug, document, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (channel, slug) DO UPDATE SET document = $3, updated_at = $4",
            &[&channel, &&*pg_text(slug), &&*pg_text(document), &now],
        )
        .await?;
    }
    for (slug, document) in notes {
        let back: Option<String> = tx
            .query_opt(
                "SELECT document FROM mnemo_shared_topics WHERE channel = $1 AND slug = $2",
                &[&channel, &&*pg_text(slug)],
            )
            .await?
            .map(|r| r.get(0));
        if back.as_deref() != Some(&*pg_text(document)) {
            return Err(CopyError::SharedMismatch {
                channel: channel.to_string(),
                slug: slug.clone(),
            });
        }
    }
    tx.commit().await?;
    Ok(notes.len())
}
