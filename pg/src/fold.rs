//! Compaction on Postgres: the file store's rules ([`plan::decide`]: past
//! `compacting.threshold` fold all but the window, older than
//! `stm.maxAgeMinutes` fold, never past `stm.maxMessages`; compaction off
//! slides), committed as **one transaction**: the batch is marked archived
//! (`fold`), the summary replaced, the facts merged into the profile (the
//! previous profile kept as a version, the fact log's entries appended,
//! dated at their source messages as the files' compaction dates them),
//! ongoing topics merged into topic notes, and the fold recorded
//! together, or nothing is. A crash or a lost
//! connection anywhere leaves the user as before the run.
//!
//! A run reads a snapshot, calls the summarizer with no transaction open,
//! then commits only onto what it read: the user's fold count unchanged
//! and every message of the batch still unfolded (a `/session clear` in
//! between makes it [`PgFold::Superseded`], writing nothing). One run per
//! user at a time across all brokers (a try-lock: a second run says
//! [`PgFold::AlreadyRunning`]).

use crate::channel::PgChannel;
use crate::memory::{Profile, merge_topic};
use crate::turn::record_at;
use crate::{PgError, lock_key};
use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use mnemo_sessions::SafeName;
use mnemo_sessions::compaction::plan::{self, Decision};
use mnemo_sessions::facts::{FactBy, FactEdit};
use mnemo_sessions::profile::{MergeReport, merge_into_body};
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, SummaryKind, SummaryRequest, rolling_summary};
use mnemo_sessions::versions::Author;
use tokio_postgres::types::ToSql;

/// What one compaction run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgFold {
    NotNeeded,
    AlreadyRunning,
    /// `folded` messages went into the summary.
    Compacted {
        folded: usize,
        facts: MergeReport,
    },
    /// Compaction is off: the oldest left short-term memory unsummarized
    /// (archived, still found by recall).
    Slid {
        archived: usize,
    },
    /// The summarizer failed with short-term memory past `stm.maxMessages`:
    /// the oldest past the bound were archived unsummarized.
    Fallback {
        archived: usize,
        failures: i32,
    },
    /// The summarizer failed; nothing changed but the failure count.
    SummarizerFailed {
        failures: i32,
        error: String,
    },
    /// The user's memory changed while the summarizer ran; nothing written.
    Superseded,
}

impl PgFold {
    /// The `outcome` label of the compaction metric (`None`: nothing done).
    pub fn label(&self) -> Option<&'static str> {
        Some(match self {
            PgFold::NotNeeded | PgFold::AlreadyRunning => return None,
            PgFold::Compacted { .. } => "compacted",
            PgFold::Slid { .. } => "sliding_window",
            PgFold::Fallback { .. } => "fallback",
            PgFold::SummarizerFailed { .. } => "summarizer_failed",
            PgFold::Superseded => "superseded",
        })
    }
}

impl PgChannel {
    /// Folds `user`'s older messages if the rules say so ([`crate::fold`]).
    pub async fn compact(&self, user: &SafeName, now: DateTime<Utc>) -> Result<PgFold, PgError> {
        compact(self, user, now).await
    }
}

/// Folds `user`'s older messages if the rules say so.
pub async fn compact(channel: &PgChannel, user: &SafeName, now: DateTime<Utc>) -> Result<PgFold, PgError> {
    let mut conn = channel.store().conn().await?;
    let key = lock_key("fold", channel.name(), user.as_str());
    let locked: bool = conn.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await?.get(0);
    if !locked {
        return Ok(PgFold::AlreadyRunning);
    }
    let result = run(channel, &mut conn, user, now).await;
    if conn.execute("SELECT pg_advisory_unlock($1)", &[&key]).await.is_err() {
        // Closing the connection releases the lock.
        let _ = Object::take(conn);
    }
    result
}

/// What the run read, and commits onto.
struct Snapshot {
    folds: i64,
    summary: Option<String>,
    profile: Option<String>,
    seqs: Vec<i64>,
    records: Vec<mnemo_sessions::Record>,
}

async fn run(channel: &PgChannel, conn: &mut Object, user: &SafeName, now: DateTime<Utc>) -> Result<PgFold, PgError> {
    let config = channel.config();
    let snapshot = read(channel, conn, user).await?;
    let Some(snapshot) = snapshot else {
        return Ok(PgFold::NotNeeded);
    };
    match plan::decide(&snapshot.records, config, now) {
        Decision::Nothing => Ok(PgFold::NotNeeded),
        Decision::Slide(k) => Ok(match commit(channel, conn, user, &snapshot, k, None, now).await? {
            Some(_) => PgFold::Slid { archived: k },
            None => PgFold::Superseded,
        }),
        Decision::Fold(k) => {
            let request = SummaryRequest {
                kind: SummaryKind::Rolling,
                previous_summary: snapshot.summary.as_deref().map(str::trim).filter(|s| !s.is_empty()),
                messages: &snapshot.records[..k],
                notes: &[],
                profile: snapshot.profile.as_deref(),
            };
            let timeout = config.compacting.summarizer_timeout();
            let result = rolling_summary(channel.summarizer().as_ref(), request, timeout).await;
            match result {
                Ok(out) => {
                    let summary = Some((out.summary.trim().to_string(), out.facts));
                    Ok(match commit(channel, conn, user, &snapshot, k, summary, now).await? {
                        Some(facts) => PgFold::Compacted { folded: k, facts },
                        None => PgFold::Superseded,
                    })
                }
                Err(e) => failed(channel, conn, user, &snapshot, e, now).await,
            }
        }
    }
}

/// The user's unfolded messages, summary, profile and fold count, in one
/// snapshot; `None` for a user with no row.
async fn read(channel: &PgChannel, conn: &mut Object, user: &SafeName) -> Result<Option<Snapshot>, PgError> {
    let (name, key) = (channel.name(), user.as_str());
    let tx = crate::snapshot(conn).await?;
    let params: &[&(dyn ToSql + Sync)] = &[&name, &key];
    let (head, rows) = futures_util::try_join!(
        tx.query_opt(
            "SELECT folds, summary, profile FROM mnemo_users WHERE channel = $1 AND user_key = $2",
            params,
        ),
        tx.query(
            "SELECT ts, role, text, msg_id, thread_id, chat_id, user_name, seq FROM mnemo_messages
             WHERE channel = $1 AND user_key = $2 AND fold IS NULL ORDER BY seq",
            params,
        ),
    )?;
    tx.commit().await?;
    Ok(head.map(|head| Snapshot {
        folds: head.get(0),
        summary: head.get(1),
        profile: head.get(2),
        seqs: rows.iter().map(|r| r.get(7)).collect(),
        records: rows.iter().map(|r| record_at(r, name, 0)).collect(),
    }))
}

/// Archives the first `k` messages of the snapshot as fold `folds + 1`,
/// with the new summary and facts when given (else unsummarized), in one
/// transaction. `None`: superseded, nothing written.
async fn commit(
    channel: &PgChannel,
    conn: &mut Object,
    user: &SafeName,
    snapshot: &Snapshot,
    k: usize,
    summary: Option<(String, Vec<Fact>)>,
    now: DateTime<Utc>,
) -> Result<Option<MergeReport>, PgError> {
    let (name, key) = (channel.name(), user.as_str());
    let batch = &snapshot.seqs[..k];
    let fold = snapshot.folds + 1;
    let tx = conn.transaction().await?;
    let head = tx
        .query_one(
            "SELECT folds FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
            &[&name, &key],
        )
        .await?;
    if head.get::<_, i64>(0) != snapshot.folds {
        return Ok(None);
    }
    let archived = tx
        .execute(
            "UPDATE mnemo_messages SET fold = $3
             WHERE channel = $1 AND user_key = $2 AND seq = ANY($4) AND fold IS NULL",
            &[&name, &key, &fold, &batch],
        )
        .await?;
    if usize::try_from(archived).ok() != Some(k) {
        // Some of the batch went meanwhile (a clear): dropping the
        // transaction rolls the marks back.
        return Ok(None);
    }
    let kind = if summary.is_some() { "summarized" } else { "slid" };
    let mut report = MergeReport::default();
    match summary {
        Some((text, facts)) => {
            let mut profile = Profile::lock(&tx, name, key, FactBy::Operator, now).await?;
            let max_chars = channel.config().ltm.max_profile_chars;
            let (merged, merge, dropped) = merge_into_body(profile.body.as_deref(), &facts, max_chars);
            report = merge;
            tx.execute(
                "UPDATE mnemo_users SET folds = $3, failures = 0, summary = $4, summary_at = $5
                 WHERE channel = $1 AND user_key = $2",
                &[&name, &key, &fold, &&*crate::pg_text(&text), &now],
            )
            .await?;
            if let Some(merged) = merged {
                // Dated as the files' compaction dates them: at the newest
                // user message among each fact's sources in the batch.
                let edit = FactEdit {
                    by: FactBy::Compaction,
                    batch: &snapshot.records[..k],
                    now,
                };
                let what = "facts from older messages";
                profile
                    .replace(&tx, name, user, &merged, what, &dropped, edit, Author::Compaction)
                    .await?;
            }
            for fact in facts.iter().filter(|f| f.section == FactSection::Topics) {
                merge_topic(&tx, name, user, &fact.key, &fact.value, max_chars, now).await?;
            }
        }
        None => {
            tx.execute(
                "UPDATE mnemo_users SET folds = $3 WHERE channel = $1 AND user_key = $2",
                &[&name, &key, &fold],
            )
            .await?;
        }
    }
    let count = i32::try_from(k).unwrap_or(i32::MAX);
    tx.execute(
        "INSERT INTO mnemo_folds (channel, user_key, fold, first_seq, last_seq, messages, kind, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[&name, &key, &fold, &batch[0], &batch[k - 1], &count, &kind, &now],
    )
    .await?;
    tx.commit().await?;
    Ok(Some(report))
}

/// The summarizer failed: count it; past `stm.maxMessages` archive the
/// excess unsummarized so short-term memory stays bounded.
async fn failed(
    channel: &PgChannel,
    conn: &mut Object,
    user: &SafeName,
    snapshot: &Snapshot,
    error: SummarizeError,
    now: DateTime<Utc>,
) -> Result<PgFold, PgError> {
    let failures: i32 = conn
        .query_one(
            "UPDATE mnemo_users SET failures = failures + 1 WHERE channel = $1 AND user_key = $2 RETURNING failures",
            &[&channel.name(), &user.as_str()],
        )
        .await?
        .get(0);
    let over = snapshot.records.len().saturating_sub(channel.config().stm.max_messages);
    if over == 0 {
        return Ok(PgFold::SummarizerFailed {
            failures,
            error: error.to_string(),
        });
    }
    Ok(match commit(channel, conn, user, snapshot, over, None, now).await? {
        Some(_) => PgFold::Fallback {
            archived: over,
            failures,
        },
        None => PgFold::Superseded,
    })
}
