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

use mnemo_sessions::session::ContextView;
use mnemo_sessions::{Record, Role, SafeName, pending};
use std::borrow::Cow;
use std::sync::Arc;
use tokio_postgres::types::ToSql;

/// What an append tells the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgAppended {
    /// Compaction has work for this user (the same rule as the files).
    pub fold_due: bool,
    /// Past `stm.maxMessages` (the hard bound), as on the files.
    pub over_bound: bool,
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

/// The context's memory in one statement, so in one snapshot: the
/// summary and profile (repeated on each row) beside the last `$3`
/// unfolded messages, newest first; one row of NULL messages when there
/// are none.
const VIEW: &str = "
SELECT d.summary, d.profile, m.ts, m.role, m.text, m.msg_id, m.thread_id, m.chat_id, m.user_name
FROM (SELECT 1) AS one
LEFT JOIN mnemo_users d ON d.channel = $1 AND d.user_key = $2
LEFT JOIN LATERAL (
    SELECT ts, role, text, msg_id, thread_id, chat_id, user_name, seq FROM mnemo_messages
    WHERE channel = $1 AND user_key = $2 AND fold IS NULL ORDER BY seq DESC LIMIT $3) AS m ON true
ORDER BY m.seq DESC";

const HAS_MESSAGE: &str =
    "SELECT EXISTS (SELECT 1 FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND msg_id = $3)";

const LOCK: &str = "SELECT pg_advisory_lock($1)";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";

/// A record's columns as the append binds them (NUL made storable).
struct Values<'a> {
    ts: DateTime<Utc>,
    role: &'static str,
    text: Cow<'a, str>,
    msg_id: Cow<'a, str>,
    thread: Option<Cow<'a, str>>,
    chat: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
}

impl<'a> Values<'a> {
    fn of(record: &'a Record) -> Values<'a> {
        Values {
            ts: record.ts,
            role: role_name(record.role),
            text: pg_text(&record.text),
            msg_id: pg_text(&record.msg_id),
            thread: record.thread_id.as_deref().map(pg_text),
            chat: record.chat_id.as_deref().map(pg_text),
            name: record.user_name.as_deref().map(pg_text),
        }
    }

    fn params<'b>(&'b self, channel: &'b &'b str, user: &'b &'b str) -> [&'b (dyn ToSql + Sync); 9] {
        [
            channel,
            user,
            &self.ts,
            &self.role,
            &self.text,
            &self.msg_id,
            &self.thread,
            &self.chat,
            &self.name,
        ]
    }
}

impl PgChannel {
    /// Starts `user`'s turn: waits for the user's lock (held by another
    /// turn of theirs, on any broker) and keeps it until the turn is dropped.
    pub async fn begin_turn(&self, user: &SafeName) -> Result<PgTurn, PgError> {
        PgTurn::begin(self, user).await
    }

    /// Stores a message as it arrives (intake), without the user's turn
    /// lock (see [`append_on`]), on the intake pool's
    /// connections. A repeat (`duplicate`) adds nothing.
    pub async fn intake(&self, user: &SafeName, record: &Record, now: DateTime<Utc>) -> Result<PgAppended, PgError> {
        let conn = self.store().intake_conn().await?;
        append_on(&conn, self, user, record, now).await
    }
}

/// Statements are prepared once per connection (deadpool's statement
/// cache), and the statements of one step are issued together:
/// tokio-postgres pipelines queries issued at once on one connection and
/// the server runs them in order, so an append with its counters is one
/// round trip.
impl PgTurn {
    pub(crate) async fn begin(channel: &PgChannel, user: &SafeName) -> Result<PgTurn, PgError> {
        let conn = channel.store().conn().await?;
        let key = lock_key("turn", channel.name(), user.as_str());
        let lock = conn.prepare_cached(LOCK).await?;
        conn.execute(&lock, &[&key]).await?;
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

    /// The channel the turn is in.
    pub(crate) fn channel(&self) -> &PgChannel {
        &self.channel
    }

    /// The channel's name, as the rows are keyed.
    pub(crate) fn channel_name(&self) -> &str {
        self.channel.name()
    }

    /// The channel's name and the user's key, as the rows are keyed.
    pub(crate) fn keys(&self) -> (String, String) {
        (self.channel_name().to_string(), self.user.as_str().to_string())
    }

    /// A transaction on the turn's connection in which the user's row
    /// exists (made if it did not), for a write that references it.
    pub(crate) async fn with_user_row(&mut self) -> Result<deadpool_postgres::Transaction<'_>, PgError> {
        let (channel, key) = self.keys();
        let tx = self.conn().transaction().await?;
        tx.execute(
            "INSERT INTO mnemo_users (channel, user_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&channel, &key],
        )
        .await?;
        Ok(tx)
    }

    #[expect(
        clippy::expect_used,
        reason = "`conn` is Some from `begin` until `drop` takes it, and no method runs after drop"
    )]
    pub(crate) fn conn(&mut self) -> &mut Object {
        self.conn
            .as_mut()
            .expect("the connection stays until the turn is dropped")
    }

    #[expect(
        clippy::expect_used,
        reason = "`conn` is Some from `begin` until `drop` takes it, and no method runs after drop"
    )]
    pub(crate) fn client(&self) -> &Object {
        self.conn
            .as_ref()
            .expect("the connection stays until the turn is dropped")
    }

    /// Stores `record` (committed when this returns: acknowledged means
    /// durable as the server's `synchronous_commit` has it).
    pub async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<PgAppended, PgError> {
        append_on(self.client(), &self.channel, &self.user, record, now).await
    }

    /// Whether the question `msg_id` is settled: a record answers it
    /// (`mnemo_sessions::pending`). Read under the user's lock, so a
    /// question is answered once, whichever broker asks.
    pub async fn is_settled(&mut self, msg_id: &str) -> Result<bool, PgError> {
        self.has_message(&pending::reply_id(msg_id)).await
    }

    /// The context's memory: summary, profile and the last `n` unfolded
    /// messages, oldest first, read in one snapshot (a fold committing
    /// meanwhile is seen whole or not at all).
    pub async fn view(&mut self, n: usize) -> Result<ContextView, PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let view = conn.prepare_cached(VIEW).await?;
        let rows = conn.query(&view, &[&channel, &user, &limit]).await?;
        Ok(view_of(&rows, channel))
    }

    /// Whether the user has a stored message with this id (the answer to
    /// a redelivered question, say).
    pub async fn has_message(&mut self, msg_id: &str) -> Result<bool, PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let exists = conn.prepare_cached(HAS_MESSAGE).await?;
        let row = conn.query_one(&exists, &[&channel, &user, &&*pg_text(msg_id)]).await?;
        Ok(row.get(0))
    }
}

fn appended(channel: &PgChannel, duplicate: bool, counts: &tokio_postgres::Row, now: DateTime<Utc>) -> PgAppended {
    let (unfolded, first): (i64, Option<DateTime<Utc>>) = (counts.get(0), counts.get(1));
    let unfolded = usize::try_from(unfolded).unwrap_or(0);
    PgAppended {
        fold_due: plan::due(unfolded, first, false, channel.config(), now),
        over_bound: unfolded > channel.config().stm.max_messages,
        duplicate,
    }
}

/// Stores `record` for `user` on `conn` (one round trip, committed when
/// this returns) and reads the counters "is a fold due?" needs. Needs no
/// turn lock: the append's upsert numbers messages under the user's row
/// lock, so intake stores a message while the user's turn runs.
pub(crate) async fn append_on(
    conn: &Object,
    channel: &PgChannel,
    user: &SafeName,
    record: &Record,
    now: DateTime<Utc>,
) -> Result<PgAppended, PgError> {
    let (name, key) = (channel.name(), user.as_str());
    let (append, counters) = futures_util::try_join!(conn.prepare_cached(APPEND), conn.prepare_cached(COUNTERS))?;
    let v = Values::of(record);
    let (params, keys): ([&(dyn ToSql + Sync); 9], [&(dyn ToSql + Sync); 2]) = (v.params(&name, &key), [&name, &key]);
    let (inserted, counts) =
        futures_util::try_join!(conn.query_opt(&append, &params), conn.query_one(&counters, &keys),)?;
    Ok(appended(channel, inserted.is_none(), &counts, now))
}

/// The rows of [`VIEW`] as a context view (oldest first).
fn view_of(rows: &[tokio_postgres::Row], channel: &str) -> ContextView {
    let (summary, profile) = rows
        .first()
        .map(|row| (row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1)))
        .unwrap_or_default();
    let recent = rows
        .iter()
        .rev()
        .filter(|row| row.get::<_, Option<DateTime<Utc>>>(2).is_some())
        .map(|row| Arc::new(record_at(row, channel, 2)))
        .collect();
    ContextView {
        summary: non_blank(summary),
        profile: non_blank(profile),
        recent,
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
                    let unlocked = match conn.prepare_cached(UNLOCK).await {
                        Ok(unlock) => conn.execute(&unlock, &[&key]).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = unlocked {
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

/// A stored message as a record of `channel`: the columns ts, role,
/// text, msg_id, thread_id, chat_id, user_name from `first` on.
pub(crate) fn record_at(row: &tokio_postgres::Row, channel: &str, first: usize) -> Record {
    Record {
        ts: row.get(first),
        role: role_of(row.get(first + 1)),
        text: row.get(first + 2),
        msg_id: row.get(first + 3),
        channel: channel.to_string(),
        thread_id: row.get(first + 4),
        chat_id: row.get(first + 5),
        user_name: row.get(first + 6),
    }
}

fn non_blank(text: Option<String>) -> Option<Arc<str>> {
    text.map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .map(Arc::from)
}
