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
use mnemo_sessions::maintenance::digests::Period;
use mnemo_sessions::recall::{Item, Recalled};
use mnemo_sessions::session::ContextView;
use mnemo_sessions::{Record, Role, SafeName};
use std::borrow::Cow;
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

/// The question's stemmed terms, the user's message count (ever stored),
/// and how many of the user's messages each
/// matches, counted up to `$4` (`to_tsvector` stems and drops stop words;
/// each term is then matched as the lexeme it is). A user with fewer
/// messages than `$4` in all cannot have a common term: every term counts
/// as 1 (rare) without a look at the index.
const TERM_COUNTS: &str = "
SELECT t.lexeme, u.next_seq - 1,
       CASE WHEN u.next_seq <= $4 THEN 1 ELSE (SELECT count(*) FROM (
           SELECT 1 FROM mnemo_messages m
           WHERE m.channel = $1 AND m.user_key = $2 AND m.tsv @@ to_tsquery('simple', t.lexeme) LIMIT $4) AS s) END
FROM unnest(to_tsvector('english', $3)) AS t
JOIN mnemo_users u ON u.channel = $1 AND u.user_key = $2";

/// Full-text recall over the user's whole history, the recent window `$5`
/// left out (it is in the context already), in one statement:
/// - the first round: the newest `$6` messages matching the search terms
///   `$3`, ranked by `ts_rank` over all the question's terms `$4`, newest
///   first among equals, at most `$7`;
/// - the second round, for the other half of a fact told in two places
///   ("my sister is Ana" … "Ana moved to Lisbon"): the words of the first
///   round's best `$8` hits that are not in the question `$9` (lexemes) —
///   plain words only, so nothing reaches the query parser but letters and
///   digits — each counted in the user's messages; the `$11` rarest that
///   match more than the hit itself and at most `$10` (the files' IDF floor
///   as a count, `recall::widening_df_limit`; below 2 no round) find the
///   messages they match, ranked by them, the first round's left out, at
///   most `$7`.
///
/// The last column says which round a row is from.
const RECALL: &str = "
WITH first AS (
    SELECT c.ts, c.role, c.text, ts_rank(c.tsv, q) AS r, c.seq, c.tsv FROM (
        SELECT ts, role, text, seq, tsv FROM mnemo_messages
        WHERE channel = $1 AND user_key = $2 AND tsv @@ to_tsquery('simple', $3) AND msg_id <> ALL($5)
        ORDER BY seq DESC LIMIT $6) AS c,
        to_tsquery('simple', $4) AS q
    ORDER BY r DESC, c.seq DESC LIMIT $7),
best AS (SELECT tsv FROM first ORDER BY r DESC, seq DESC LIMIT $8),
terms AS (
    SELECT DISTINCT t.lexeme FROM best, unnest(best.tsv) AS t
    WHERE $10::bigint >= 2 AND t.lexeme <> ALL($9) AND length(t.lexeme) >= 3 AND t.lexeme ~ '^[[:alnum:]]+$'),
counted AS (
    SELECT w.lexeme, (SELECT count(*) FROM (
        SELECT 1 FROM mnemo_messages x
        WHERE x.channel = $1 AND x.user_key = $2 AND x.tsv @@ to_tsquery('simple', w.lexeme)
        LIMIT $10::bigint + 1) AS s) AS n
    FROM terms w),
wider AS (
    SELECT to_tsquery('simple', string_agg(lexeme, ' | ')) AS q FROM (
        SELECT lexeme FROM counted WHERE n > 1 AND n <= $10::bigint ORDER BY n, lexeme LIMIT $11) AS r),
widened AS (
    SELECT m.ts, m.role, m.text, ts_rank(m.tsv, wider.q) AS r, m.seq FROM mnemo_messages m, wider
    WHERE wider.q IS NOT NULL AND m.channel = $1 AND m.user_key = $2 AND m.tsv @@ wider.q
      AND m.msg_id <> ALL($5) AND m.seq NOT IN (SELECT seq FROM first)
    ORDER BY r DESC, m.seq DESC LIMIT $7)
SELECT ts, role, text, r, seq, false FROM first
UNION ALL
SELECT ts, role, text, r, seq, true FROM widened";

/// The pieces of the user's daily and weekly summaries that match the
/// search terms `$3`, ranked by all the question's terms `$4` as the
/// messages are: a digest is cut into paragraphs and list items (the
/// file store's recall pieces), and only matching pieces are returned,
/// at most `$5`.
const RECALL_DIGESTS: &str = "
SELECT d.kind, d.period, p.piece, ts_rank(to_tsvector('english', p.piece), q) AS r
FROM mnemo_digests d,
     LATERAL regexp_split_to_table(d.body, '\\n\\s*\\n|\\n(?=[-*#] )') AS p(piece),
     to_tsquery('simple', $4) AS q
WHERE d.channel = $1 AND d.user_key = $2 AND d.tsv @@ to_tsquery('simple', $3)
  AND to_tsvector('english', p.piece) @@ to_tsquery('simple', $3)
ORDER BY r DESC, d.period DESC LIMIT $5";

/// First hits whose words widen the second round, words added, and the
/// weight of its hits against the first round's (the file store's 0.6).
const WIDEN_FROM: i64 = 3;
const WIDEN_TERMS: i64 = 6;
const WIDER_WEIGHT: f32 = 0.6;

/// The user's messages nearest to the question's vector `$4` (pgvector's
/// text form) among the vectors of model `$3`, the recent window `$5`
/// left out: cosine distance, at most `$6`, over the user's own vectors
/// only (see `crate::vectors`).
const NEAREST: &str = "
SELECT m.ts, m.role, m.text, v.embedding <=> $4::text::vector AS d
FROM mnemo_vectors v
JOIN mnemo_messages m ON m.channel = v.channel AND m.user_key = v.user_key AND m.seq = v.seq
WHERE v.channel = $1 AND v.user_key = $2 AND v.model = $3 AND m.msg_id <> ALL($5)
ORDER BY d LIMIT $6";

/// Digest pieces a recall looks at beside the messages.
const RECALL_DIGEST_PIECES: i64 = 8;

const HAS_MESSAGE: &str =
    "SELECT EXISTS (SELECT 1 FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND msg_id = $3)";

const LOCK: &str = "SELECT pg_advisory_lock($1)";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";

/// Candidates a recall looks at before packing them under the budget.
const RECALL_CANDIDATES: i64 = 32;
/// Topic notes a turn's recall offers at most (matching any word of the
/// message, best first), ahead of the messages.
const RECALLED_NOTES: usize = 3;
/// Fact-log entries a turn's recall offers at most (earlier or dropped
/// values, newest first), after the notes.
const RECALLED_FACTS: usize = 3;

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

/// Statements are prepared once per connection (deadpool's statement
/// cache), and the statements of one step are issued together:
/// tokio-postgres pipelines queries issued at once on one connection and
/// the server runs them in order, so an append is one round trip and an
/// append with its view is one too.
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

    /// The channel's name, as the rows are keyed.
    pub(crate) fn channel_name(&self) -> &str {
        self.channel.name()
    }

    pub(crate) fn conn(&mut self) -> &mut Object {
        self.conn
            .as_mut()
            .expect("the connection stays until the turn is dropped")
    }

    fn client(&self) -> &Object {
        self.conn
            .as_ref()
            .expect("the connection stays until the turn is dropped")
    }

    /// Stores `record` (committed when this returns: acknowledged means
    /// durable as the server's `synchronous_commit` has it).
    pub async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<PgAppended, PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let (append, counters) = futures_util::try_join!(conn.prepare_cached(APPEND), conn.prepare_cached(COUNTERS))?;
        let v = Values::of(record);
        let (params, keys): ([&(dyn ToSql + Sync); 9], [&(dyn ToSql + Sync); 2]) =
            (v.params(&channel, &user), [&channel, &user]);
        let (inserted, counts) =
            futures_util::try_join!(conn.query_opt(&append, &params), conn.query_one(&counters, &keys),)?;
        Ok(self.appended(inserted.is_none(), &counts, now))
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

    /// [`PgTurn::append`], then [`PgTurn::view`] with the record in it, in
    /// one round trip.
    pub async fn append_then_view(
        &mut self,
        record: &Record,
        now: DateTime<Utc>,
        n: usize,
    ) -> Result<(PgAppended, ContextView), PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let (append, counters, view) = futures_util::try_join!(
            conn.prepare_cached(APPEND),
            conn.prepare_cached(COUNTERS),
            conn.prepare_cached(VIEW)
        )?;
        let v = Values::of(record);
        let params = v.params(&channel, &user);
        let keys: [&(dyn ToSql + Sync); 2] = [&channel, &user];
        let window: [&(dyn ToSql + Sync); 3] = [&channel, &user, &limit];
        let (inserted, counts, rows) = futures_util::try_join!(
            conn.query_opt(&append, &params),
            conn.query_one(&counters, &keys),
            conn.query(&view, &window),
        )?;
        let appended = self.appended(inserted.is_none(), &counts, now);
        Ok((appended, view_of(&rows, channel)))
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

    fn appended(&self, duplicate: bool, counts: &tokio_postgres::Row, now: DateTime<Utc>) -> PgAppended {
        let (unfolded, first): (i64, Option<DateTime<Utc>>) = (counts.get(0), counts.get(1));
        let unfolded = usize::try_from(unfolded).unwrap_or(0);
        PgAppended {
            fold_due: plan::due(unfolded, first, false, self.channel.config(), now),
            duplicate,
        }
    }

    /// What the user said before that matches `message`, outside `recent`,
    /// the user's topic notes that match (at most `RECALLED_NOTES` (3)) and
    /// the fact log's earlier values that do (at most `RECALLED_FACTS` (3)),
    /// packed under `max_tokens` (the file store's budget rule and labels):
    /// the full-text ranking, fused by reciprocal rank with the user's
    /// nearest vectors when `vector` (the embedding model's name and the
    /// question's vector) is given and pgvector is in use. A failed vector
    /// search is logged and recall goes on with full text alone.
    pub async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
        vector: Option<(&str, &[f32])>,
    ) -> Result<Recalled, PgError> {
        let skip: Vec<String> = recent.iter().map(|r| pg_text(&r.msg_id).into_owned()).collect();
        let lexical = self.full_text(message, &skip).await?;
        let dense = match vector {
            Some((model, vector)) if self.channel.vectors_in_use().await => {
                match self.nearest(model, vector, &skip).await {
                    Ok(hits) => hits,
                    Err(e) => {
                        tracing::warn!(user = %self.user, error = %e, "vector recall failed; full text alone this turn");
                        Vec::new()
                    }
                }
            }
            _ => Vec::new(),
        };
        let items = if dense.is_empty() {
            lexical
        } else {
            mnemo_sessions::recall::fuse_by_rank(&lexical, &dense)
                .into_iter()
                .map(|(item, _)| item)
                .collect()
        };
        Ok(mnemo_sessions::recall::pack(items, max_tokens))
    }

    /// The full-text ranking (best first): the user's matching topic notes
    /// and fact-log entries (a few each, ahead), then the messages matching
    /// the question, the second round's, and the matching pieces of their
    /// daily and weekly summaries.
    async fn full_text(&mut self, message: &str, skip: &[String]) -> Result<Vec<Item>, PgError> {
        let words = crate::recall::words(message);
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let (counting, recall, digests, notes, facts) = futures_util::try_join!(
            conn.prepare_cached(TERM_COUNTS),
            conn.prepare_cached(RECALL),
            conn.prepare_cached(RECALL_DIGESTS),
            conn.prepare_cached(crate::memory::NOTES_MATCHING),
            conn.prepare_cached(crate::memory::FACTS_MATCHING)
        )?;
        // The term counts, and the user's topic notes and fact-log entries
        // that match (a few of each go ahead of the messages), in one
        // round trip.
        // The same words as `recall::tsquery` makes of the message.
        let query = words.join(" | ");
        let joined = words.join(" ");
        let note_limit = RECALLED_NOTES as i64;
        let count_params: [&(dyn ToSql + Sync); 4] = [&channel, &user, &joined, &crate::recall::RARE];
        let note_params: [&(dyn ToSql + Sync); 4] = [&channel, &user, &query, &note_limit];
        let fact_params: [&(dyn ToSql + Sync); 3] = [&channel, &user, &query];
        let (rows, note_rows, fact_rows) = futures_util::try_join!(
            conn.query(&counting, &count_params),
            conn.query(&notes, &note_params),
            conn.query(&facts, &fact_params),
        )?;
        let matched: Vec<i64> = fact_rows.iter().map(|row| row.get(0)).collect();
        let mut notes = crate::memory::note_items(&note_rows);
        notes.extend(crate::memory::fact_hits(&***conn, channel, user, &matched, RECALLED_FACTS).await?);
        let counts: Vec<(String, i64)> = rows.iter().map(|row| (row.get(0), row.get(2))).collect();
        let history = rows.first().map_or(0, |row| row.get::<_, i64>(1));
        let Some((search, rank)) = crate::recall::plan(&counts) else {
            return Ok(notes);
        };
        let widening = mnemo_sessions::recall::widening_df_limit(usize::try_from(history).unwrap_or(0)) as i64;
        let question: Vec<&str> = counts.iter().map(|(t, _)| t.as_str()).collect();
        let message_params: [&(dyn ToSql + Sync); 11] = [
            &channel,
            &user,
            &search,
            &rank,
            &skip,
            &crate::recall::RANKED,
            &RECALL_CANDIDATES,
            &WIDEN_FROM,
            &question,
            &widening,
            &WIDEN_TERMS,
        ];
        let digest_params: [&(dyn ToSql + Sync); 5] = [&channel, &user, &search, &rank, &RECALL_DIGEST_PIECES];
        let (messages, pieces) = futures_util::try_join!(
            conn.query(&recall, &message_params),
            conn.query(&digests, &digest_params),
        )?;
        // Messages and summary pieces by one rank (the same ts_rank of the
        // same terms), best first; the second round's hits at a lower
        // weight.
        let mut ranked: Vec<(f32, Item)> = messages
            .iter()
            .map(|row| {
                let role = role_of(row.get(1));
                let weight = if row.get::<_, bool>(5) { WIDER_WEIGHT } else { 1.0 };
                (
                    weight * row.get::<_, f32>(3),
                    Item::message(row.get(0), role, row.get(2)),
                )
            })
            .collect();
        ranked.extend(pieces.iter().filter_map(|row| {
            let (kind, period): (&str, &str) = (row.get(0), row.get(1));
            let at = Period::parse(kind, period)?.noon()?;
            Some((row.get(3), Item::summary(at, period, row.get::<_, &str>(2).trim())))
        }));
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        // Notes first: a few distilled lines, before the messages' ranks.
        notes.extend(ranked.into_iter().map(|(_, item)| item));
        Ok(notes)
    }

    /// The user's messages nearest to `vector` among those embedded by
    /// `model` (cosine), cut as the file store cuts its dense hits.
    async fn nearest(&mut self, model: &str, vector: &[f32], skip: &[String]) -> Result<Vec<Item>, PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel.name(), self.user.as_str());
        let literal = crate::vectors::literal(vector);
        let limit = mnemo_sessions::recall::DENSE_HITS as i64;
        let rows = conn
            .query(NEAREST, &[&channel, &user, &model, &literal, &skip, &limit])
            .await?;
        let hits = rows
            .iter()
            .map(|row| {
                let distance: f64 = row.get(3);
                let role = role_of(row.get(1));
                ((1.0 - distance) as f32, Item::message(row.get(0), role, row.get(2)))
            })
            .collect();
        Ok(mnemo_sessions::recall::strong_dense(hits))
    }
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
