//! One user's turn on the Postgres store: a pooled connection holding the
//! user's advisory lock (channel + user) from the first append to the
//! reply, so the turns of one user never interleave, whichever broker
//! takes them. The lock is released when the turn is dropped (the
//! connection goes back to the pool after), or by the server when the
//! connection or the broker dies.

use crate::channel::PgChannel;
use crate::{PgError, lock_key, pg_text};
use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use mnemo_sessions::compaction::plan;
use mnemo_sessions::recall::{Item, Recalled};
use mnemo_sessions::session::ContextView;
use mnemo_sessions::{Record, Role, SafeName};
use std::sync::Arc;
use tokio_postgres::types::ToSql;

/// What an append tells the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgAppended {
    /// Compaction has work for this user (the same rule as the files).
    pub fold_due: bool,
    /// The platform message id was stored before: nothing was added (a
    /// redelivery), and the turn should not be answered twice.
    pub duplicate: bool,
}

/// A turn in progress: the user's lock and the connection it lives on.
pub struct PgTurn {
    conn: Option<Object>,
    key: i64,
    channel: PgChannel,
    user: SafeName,
}

const APPEND: &str = "
WITH u AS (
    INSERT INTO mnemo_users AS u (channel, user_key, next_seq) VALUES ($1, $2, 2)
    ON CONFLICT (channel, user_key) DO UPDATE SET next_seq = u.next_seq + 1
    RETURNING u.next_seq - 1 AS seq)
INSERT INTO mnemo_messages (channel, user_key, seq, ts, role, text, msg_id, thread_id, chat_id, user_name)
SELECT $1, $2, u.seq, $3, $4, $5, $6, $7, $8, $9 FROM u
ON CONFLICT (channel, user_key, msg_id) DO NOTHING
RETURNING seq";

/// Unfolded count and the first unfolded message's time: what "is a fold
/// due?" needs.
const COUNTERS: &str = "
SELECT count(*),
       (SELECT ts FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND fold IS NULL ORDER BY seq LIMIT 1)
FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND fold IS NULL";

const DOCUMENTS: &str = "SELECT summary, profile FROM mnemo_users WHERE channel = $1 AND user_key = $2";

pub(crate) const RECENT: &str = "
SELECT ts, role, text, msg_id, thread_id, chat_id, user_name FROM mnemo_messages
WHERE channel = $1 AND user_key = $2 AND fold IS NULL ORDER BY seq DESC LIMIT $3";

/// Full-text recall over the user's whole history, the recent window left
/// out (it is in the context already). Ranked by `ts_rank`, newest first
/// among equals.
const RECALL: &str = "
SELECT ts, role, text FROM mnemo_messages, to_tsquery('english', $3) AS q
WHERE channel = $1 AND user_key = $2 AND tsv @@ q AND msg_id <> ALL($4)
ORDER BY ts_rank(tsv, q) DESC, seq DESC LIMIT $5";

/// Candidates a recall looks at before packing them under the budget.
const RECALL_CANDIDATES: i64 = 32;

impl PgTurn {
    pub(crate) async fn begin(channel: &PgChannel, user: &SafeName) -> Result<PgTurn, PgError> {
        let conn = channel.store().conn().await?;
        let key = lock_key("turn", channel.name(), user.as_str());
        conn.execute("SELECT pg_advisory_lock($1)", &[&key]).await?;
        Ok(PgTurn {
            conn: Some(conn),
            key,
            channel: channel.clone(),
            user: user.clone(),
        })
    }

    /// The user this turn holds.
    pub fn user(&self) -> &SafeName {
        &self.user
    }

    pub(crate) fn conn(&mut self) -> &mut Object {
        self.conn
            .as_mut()
            .expect("the connection stays until the turn is dropped")
    }

    /// Stores `record` (committed when this returns: acknowledged means
    /// durable as the server's `synchronous_commit` has it).
    pub async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<PgAppended, PgError> {
        let (channel, user) = (self.channel.name().to_string(), self.user.as_str().to_string());
        let conn = self.conn();
        let role = role_name(record.role);
        let (text, msg_id) = (pg_text(&record.text), pg_text(&record.msg_id));
        let thread = record.thread_id.as_deref().map(pg_text);
        let chat = record.chat_id.as_deref().map(pg_text);
        let name = record.user_name.as_deref().map(pg_text);
        let (thread, chat, name) = (thread.as_deref(), chat.as_deref(), name.as_deref());
        let inserted = conn
            .query_opt(
                APPEND,
                &[
                    &channel, &user, &record.ts, &role, &&*text, &&*msg_id, &thread, &chat, &name,
                ],
            )
            .await?;
        let counters = conn.query_one(COUNTERS, &[&channel, &user]).await?;
        let (unfolded, first): (i64, Option<DateTime<Utc>>) = (counters.get(0), counters.get(1));
        let unfolded = usize::try_from(unfolded).unwrap_or(0);
        Ok(PgAppended {
            fold_due: plan::due(unfolded, first, false, self.channel.config(), now),
            duplicate: inserted.is_none(),
        })
    }

    /// The context's memory: summary, profile and the last `n` unfolded
    /// messages, oldest first, read in one snapshot (a fold committing
    /// meanwhile is seen whole or not at all).
    pub async fn view(&mut self, n: usize) -> Result<ContextView, PgError> {
        let (channel, user) = (self.channel.name().to_string(), self.user.as_str().to_string());
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let conn = self.conn();
        let tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let (one, two): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
            (&[&channel, &user], &[&channel, &user, &limit]);
        let (documents, rows) = futures_util::try_join!(tx.query_opt(DOCUMENTS, one), tx.query(RECENT, two))?;
        tx.commit().await?;
        let (summary, profile) = documents
            .map(|row| (row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1)))
            .unwrap_or_default();
        let recent = rows
            .iter()
            .rev()
            .map(|row| Arc::new(record_of(row, &channel)))
            .collect();
        Ok(ContextView {
            summary: non_blank(summary),
            profile: non_blank(profile),
            recent,
        })
    }

    /// [`PgTurn::append`], then [`PgTurn::view`] with the record in it.
    pub async fn append_then_view(
        &mut self,
        record: &Record,
        now: DateTime<Utc>,
        n: usize,
    ) -> Result<(PgAppended, ContextView), PgError> {
        let appended = self.append(record, now).await?;
        Ok((appended, self.view(n).await?))
    }

    /// What the user said before that matches `message`, outside `recent`,
    /// packed under `max_tokens` (the file store's budget rule and labels).
    pub async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
    ) -> Result<Recalled, PgError> {
        let Some(query) = crate::recall::tsquery(message) else {
            return Ok(Recalled::default());
        };
        let (channel, user) = (self.channel.name().to_string(), self.user.as_str().to_string());
        let skip: Vec<String> = recent.iter().map(|r| pg_text(&r.msg_id).into_owned()).collect();
        let rows = self
            .conn()
            .query(RECALL, &[&channel, &user, &query, &skip, &RECALL_CANDIDATES])
            .await?;
        let items = rows
            .iter()
            .map(|row| {
                let role = role_of(row.get(1));
                Item::message(row.get(0), role, row.get(2))
            })
            .collect();
        Ok(mnemo_sessions::recall::pack(items, max_tokens))
    }
}

impl PgTurn {
    /// Archives the whole short-term memory as one `expired` fold, in one
    /// transaction; the summary stays. `false` when there was nothing.
    pub async fn expire(&mut self, now: DateTime<Utc>) -> Result<bool, PgError> {
        let (channel, user) = (self.channel.name().to_string(), self.user.as_str().to_string());
        let tx = self.conn().transaction().await?;
        let Some(head) = tx
            .query_opt(
                "SELECT folds FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
                &[&channel, &user],
            )
            .await?
        else {
            return Ok(false);
        };
        let fold = head.get::<_, i64>(0) + 1;
        let seqs: Vec<i64> = tx
            .query(
                "UPDATE mnemo_messages SET fold = $3
                 WHERE channel = $1 AND user_key = $2 AND fold IS NULL RETURNING seq",
                &[&channel, &user, &fold],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let (Some(first), Some(last)) = (seqs.iter().min(), seqs.iter().max()) else {
            return Ok(false);
        };
        let count = i32::try_from(seqs.len()).unwrap_or(i32::MAX);
        tx.execute(
            "UPDATE mnemo_users SET folds = $3 WHERE channel = $1 AND user_key = $2",
            &[&channel, &user, &fold],
        )
        .await?;
        tx.execute(
            "INSERT INTO mnemo_folds (channel, user_key, fold, first_seq, last_seq, messages, kind, at)
             VALUES ($1, $2, $3, $4, $5, $6, 'expired', $7)",
            &[&channel, &user, &fold, first, last, &count, &now],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

impl Drop for PgTurn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let key = self.key;
        match tokio::runtime::Handle::try_current() {
            // The connection returns to the pool only once unlocked.
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = conn.execute("SELECT pg_advisory_unlock($1)", &[&key]).await {
                        tracing::warn!(error = %e, "turn lock not released; the connection is closed instead");
                        let _ = Object::take(conn);
                    }
                });
            }
            // No runtime to unlock on: closing the connection unlocks.
            Err(_) => {
                let _ = Object::take(conn);
            }
        }
    }
}

pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

pub(crate) fn role_of(name: &str) -> Role {
    if name == "assistant" {
        Role::Assistant
    } else {
        Role::User
    }
}

/// A stored message as a record of `channel`.
pub(crate) fn record_of(row: &tokio_postgres::Row, channel: &str) -> Record {
    Record {
        ts: row.get(0),
        role: role_of(row.get(1)),
        text: row.get(2),
        msg_id: row.get(3),
        channel: channel.to_string(),
        thread_id: row.get(4),
        chat_id: row.get(5),
        user_name: row.get(6),
    }
}

fn non_blank(text: Option<String>) -> Option<Arc<str>> {
    text.map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .map(Arc::from)
}
