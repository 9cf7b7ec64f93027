//! The database side of `mnemo store copy`: one user's memory as the
//! Postgres store keeps it ([`UserMemory`]: messages in order, the
//! archived ones grouped into folds, the summary and profile bodies, the
//! fact log, the versions, the topic notes and the daily and weekly
//! summaries),
//! written in **one transaction per user** ([`write_user`]) and read back
//! in one snapshot ([`read_user`]), with the [`Tally`] (counts and a
//! SHA-256 over ts, role, text and msg id of every message, in order) that
//! both sides of a copy are compared by.
//!
//! Invariants:
//! - A user is written whole or not at all: the messages, the fold rows,
//!   the user row (summary, profile, counters) commit together, after the
//!   rows were read back inside the same transaction and their tally found
//!   equal to the source's (a mismatch rolls everything back). A copy
//!   interrupted anywhere (Ctrl-C, a crash, the database going away)
//!   leaves each user either fully copied or absent, so running it again
//!   finishes the job without duplicating anything.
//! - A user already in the database is never merged into: the same memory
//!   is [`Written::AlreadyThere`] (a re-run), different memory is
//!   [`CopyError::Differs`] unless the caller asked to replace it (then it
//!   is deleted and written again, in the same transaction).
//! - The write holds the user's turn and fold locks (transaction-scoped
//!   advisory locks on the keys a broker uses), so a broker serving the
//!   same database sees the user before or after the copy, never half.
//! - Text is stored as the store always does ([`crate::pg_text`]: NUL as
//!   U+2400), and timestamps to the microsecond (the database's
//!   precision); the tally is computed over those forms on both sides.

use crate::memory::name_of;
use crate::turn::{role_name, role_of};
use crate::{PgError, PgStore, lock_key, pg_text};
use chrono::{DateTime, Timelike, Utc};
use mnemo_sessions::Record;
use mnemo_sessions::facts::FactEntry;
use mnemo_sessions::versions::{Author, Version};
use sha2::{Digest, Sha256};
use tokio_postgres::Transaction;

/// One user's memory as the Postgres store holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserMemory {
    /// Every message, oldest first: first the archived ones, fold by fold
    /// (as [`UserMemory::folds`] cuts them), then the short-term ones.
    pub messages: Vec<Record>,
    /// The archived batches, oldest first.
    pub folds: Vec<Fold>,
    /// The rolling summary's body (trimmed; `None` when blank).
    pub summary: Option<String>,
    pub summary_at: Option<DateTime<Utc>>,
    /// The profile's body (trimmed; `None` when blank).
    pub profile: Option<String>,
    pub profile_at: Option<DateTime<Utc>>,
    /// Summarizer failures in a row.
    pub failures: i32,
    /// The dated fact log, in order.
    pub facts: Vec<FactEntry>,
    /// The kept versions, oldest first; a profile's `before` is its body
    /// (the files' records hold the whole file: the file side converts).
    pub versions: Vec<Version>,
    /// Topic notes as `(slug, whole document)`, by slug.
    pub topics: Vec<(String, String)>,
    /// Daily and weekly summaries, dailies then weeklies, oldest first.
    pub digests: Vec<crate::digests::StoredDigest>,
}

/// One archived batch: the next `messages` messages of the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    pub messages: usize,
    /// `summarized` or `slid` (see the schema).
    pub kind: String,
    pub at: DateTime<Utc>,
}

/// What two copies of a user are compared by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    pub messages: u64,
    pub archived: u64,
    /// SHA-256 (hex) over every message's ts, role, text and msg id, in
    /// order, each field length-prefixed.
    pub sha256: String,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages ({} archived), sha256 {}",
            self.messages,
            self.archived,
            &self.sha256[..16]
        )
    }
}

impl UserMemory {
    /// How many of the messages are archived (the folds' total).
    pub fn archived(&self) -> usize {
        self.folds.iter().map(|f| f.messages).sum()
    }

    pub fn tally(&self) -> Tally {
        let mut h = Sha256::new();
        for r in &self.messages {
            let ts = r.ts.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            for field in [ts.as_str(), role_name(r.role), &pg_text(&r.text), &pg_text(&r.msg_id)] {
                h.update((field.len() as u64).to_le_bytes());
                h.update(field.as_bytes());
            }
        }
        Tally {
            messages: self.messages.len() as u64,
            archived: self.archived() as u64,
            sha256: hex::encode(h.finalize()),
        }
    }

    /// The same memory: messages (by tally), summary and profile bodies,
    /// fact log, versions and topic notes.
    pub fn same_as(&self, other: &UserMemory) -> bool {
        self.tally() == other.tally()
            && blank_none(&self.summary) == blank_none(&other.summary)
            && blank_none(&self.profile) == blank_none(&other.profile)
            && self.facts == other.facts
            && same_versions(&self.versions, &other.versions)
            && self.topics == other.topics
            && same_digests(&self.digests, &other.digests)
    }

    /// Timestamps cut to the microsecond, text as the database keeps it
    /// (NUL as U+2400): what a copy into the database stores, so the two
    /// sides compare equal.
    pub fn as_stored(mut self) -> UserMemory {
        self.folds.retain(|f| f.messages > 0);
        for r in &mut self.messages {
            r.ts = micros(r.ts);
            for s in [&mut r.text, &mut r.msg_id] {
                if s.contains('\0') {
                    *s = pg_text(s).into_owned();
                }
            }
            for s in [&mut r.thread_id, &mut r.chat_id, &mut r.user_name]
                .into_iter()
                .flatten()
            {
                if s.contains('\0') {
                    *s = pg_text(s).into_owned();
                }
            }
        }
        for t in [&mut self.summary, &mut self.profile].into_iter().flatten() {
            if t.contains('\0') {
                *t = pg_text(t).into_owned();
            }
        }
        self.summary_at = self.summary_at.map(micros);
        self.profile_at = self.profile_at.map(micros);
        let stored = |s: &mut String| {
            if s.contains('\0') {
                *s = pg_text(s).into_owned();
            }
        };
        for e in &mut self.facts {
            e.ts = micros(e.ts);
            for s in [&mut e.key, &mut e.value]
                .into_iter()
                .chain(&mut e.sources)
                .chain(&mut e.supersedes)
            {
                stored(s);
            }
        }
        for v in &mut self.versions {
            v.ts = micros(v.ts);
            for s in [&mut v.what, &mut v.file].into_iter().chain(&mut v.before) {
                stored(s);
            }
        }
        for (_, document) in &mut self.topics {
            stored(document);
        }
        self.topics.sort();
        for d in &mut self.digests {
            d.meta.generated = micros(d.meta.generated);
            stored(&mut d.body);
        }
        self.digests.sort_by_key(|d| d.period);
        for f in &mut self.folds {
            f.at = micros(f.at);
        }
        self
    }
}

/// The same daily and weekly summaries: period, body and message count
/// (when one was generated, and its zone, are not the memory).
fn same_digests(a: &[crate::digests::StoredDigest], b: &[crate::digests::StoredDigest]) -> bool {
    let key = |d: &crate::digests::StoredDigest| (d.period, d.body.trim().to_string(), d.meta.messages);
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y))
}

/// The same kept versions, but for an operator's own trailing ones (what
/// a `--replace` kept of the memory it replaced): those are the target's
/// backups, not a difference.
fn same_versions(a: &[Version], b: &[Version]) -> bool {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    long.starts_with(short) && long[short.len()..].iter().all(|v| v.by == Author::Operator)
}

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(t.nanosecond() / 1000 * 1000).unwrap_or(t)
}

fn blank_none(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

/// Why a user could not be copied. Names the user, never a message's text.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(
        "user {channel}/{user} is already in the database with different memory ({have}; the copy has {want}): \
         not merged; pass --replace to overwrite it with the copy"
    )]
    Differs {
        channel: String,
        user: String,
        have: Tally,
        want: Tally,
    },
    #[error(
        "verification failed for user {channel}/{user}: the source has {source_tally}, the database read back {target}; nothing of this user was committed"
    )]
    Mismatch {
        channel: String,
        user: String,
        source_tally: Tally,
        target: Tally,
    },
    #[error(
        "verification failed for the shared note {slug:?} of channel {channel}: nothing of the channel's shared notes was committed"
    )]
    SharedMismatch { channel: String, slug: String },
}

impl From<tokio_postgres::Error> for CopyError {
    fn from(e: tokio_postgres::Error) -> Self {
        CopyError::Pg(PgError::Db(e))
    }
}

/// What [`write_user`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Written (the user was absent).
    Copied(Tally),
    /// The user was there with different memory, and was replaced.
    Replaced(Tally),
    /// The user was there with this very memory (a copy run again): nothing
    /// written.
    AlreadyThere(Tally),
}

impl Written {
    pub fn tally(&self) -> &Tally {
        match self {
            Written::Copied(t) | Written::Replaced(t) | Written::AlreadyThere(t) => t,
        }
    }
}

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
async fn read_in(tx: &Transaction<'_>, channel: &str, user: &str) -> Result<Option<UserMemory>, PgError> {
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
            "SELECT seq, ts, by, what, file, before FROM mnemo_versions
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
    Ok(Some(memory))
}

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
    let want = memory.tally();
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await?;
    // The user's turn and fold locks, released with the transaction.
    for purpose in ["turn", "fold"] {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(purpose, channel, user)])
            .await?;
    }
    let mut replaced = false;
    if let Some(have) = read_in(&tx, channel, user).await? {
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
        tx.execute(
            "DELETE FROM mnemo_users WHERE channel = $1 AND user_key = $2",
            &[&channel, &user],
        )
        .await?;
        replaced = true;
    }
    insert(&tx, channel, user, memory).await?;
    let back = read_in(&tx, channel, user).await?.unwrap_or_default();
    let got = back.tally();
    if got != want || !back.same_as(memory) {
        return Err(CopyError::Mismatch {
            channel: channel.to_string(),
            user: user.to_string(),
            source_tally: want,
            target: got,
        });
    }
    tx.commit().await?;
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
            "INSERT INTO mnemo_versions (channel, user_key, seq, ts, by, what, file, before)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &channel,
                &user,
                &seq,
                &v.ts,
                &name_of(&v.by),
                &v.what,
                &v.file,
                &v.before,
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
    crate::digests::insert_rows(tx, channel, user, &memory.digests).await
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

/// The channels that have shared notes, sorted.
pub async fn shared_channels(store: &PgStore) -> Result<Vec<String>, PgError> {
    let rows = store
        .conn()
        .await?
        .query("SELECT DISTINCT channel FROM mnemo_shared_topics ORDER BY channel", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
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
