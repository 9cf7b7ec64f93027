//! The fact log and the kept versions as rows, inside an edit's
//! transaction: the user's `mnemo_facts` rows read in order and changed
//! by what an edit did ([`Log`]), the previous state of a file kept as a
//! `mnemo_versions` row ([`keep_version`]), and how a serde enum's name is
//! stored. Every statement is scoped by channel and user.

use crate::{PgError, pg_text};
use chrono::{DateTime, Utc};
use mnemo_sessions::facts::{FactEntry, LogChanges};
use mnemo_sessions::versions::{Author, KEEP_PER_FILE};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::Transaction;

/// A serde enum's name (`set`, `tool`, `notes`, …) as stored.
pub(crate) fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// A stored name back to its serde enum; `None` for a name this build
/// does not know.
pub(crate) fn parse_name<T: DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
}

/// The user's fact log as read inside a transaction: `(id, entry)` in
/// order. Rows whose names this build does not know are skipped, warned.
pub(crate) struct Log {
    pub(super) rows: Vec<(i64, FactEntry)>,
}

impl Log {
    pub(crate) async fn read(
        tx: &impl tokio_postgres::GenericClient,
        channel: &str,
        user: &str,
    ) -> Result<Log, PgError> {
        let rows = tx
            .query(
                "SELECT id, ts, op, section, key, value, sources, supersedes, by FROM mnemo_facts
                 WHERE channel = $1 AND user_key = $2 ORDER BY id",
                &[&channel, &user],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.get(0);
            let (op, section, by): (String, String, String) = (row.get(2), row.get(3), row.get(8));
            let (Some(op), Some(section), Some(by)) = (parse_name(&op), parse_name(&section), parse_name(&by)) else {
                tracing::warn!(user = %crate::logged(user), id, "fact log row with an unknown op, section or author; skipped");
                continue;
            };
            out.push((
                id,
                FactEntry {
                    ts: row.get(1),
                    op,
                    section,
                    key: row.get(4),
                    value: row.get(5),
                    sources: row.get(6),
                    supersedes: row.get(7),
                    by,
                },
            ));
        }
        Ok(Log { rows: out })
    }

    /// Whether mnemo has kept this user's log: it has entries, or mnemo
    /// changed the profile since the log existed (a version row). A
    /// profile with neither is from before the log (or copied in): its
    /// facts are recorded as `import`.
    pub(crate) async fn started(&self, tx: &Transaction<'_>, channel: &str, user: &str) -> Result<bool, PgError> {
        if !self.rows.is_empty() {
            return Ok(true);
        }
        let row = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM mnemo_versions WHERE channel = $1 AND user_key = $2)",
                &[&channel, &user],
            )
            .await?;
        Ok(row.get(0))
    }

    pub(crate) fn entries(&self) -> Vec<FactEntry> {
        self.rows.iter().map(|(_, e)| e.clone()).collect()
    }

    /// Writes `changes`: deletes the forgotten facts' rows, appends the new
    /// entries; this view follows.
    pub(crate) async fn apply(
        &mut self,
        tx: &Transaction<'_>,
        channel: &str,
        user: &str,
        changes: &LogChanges,
    ) -> Result<(), PgError> {
        let gone: Vec<i64> = self
            .rows
            .iter()
            .filter(|(_, e)| changes.removes(e))
            .map(|(id, _)| *id)
            .collect();
        if !gone.is_empty() {
            tx.execute(
                "DELETE FROM mnemo_facts WHERE channel = $1 AND user_key = $2 AND id = ANY($3)",
                &[&channel, &user, &gone],
            )
            .await?;
            self.rows.retain(|(id, _)| !gone.contains(id));
        }
        for entry in &changes.append {
            let sources: Vec<String> = entry.sources.iter().map(|s| pg_text(s).into_owned()).collect();
            let id: i64 = tx
                .query_one(
                    "INSERT INTO mnemo_facts (channel, user_key, ts, op, section, key, value, sources, supersedes, by)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
                    &[
                        &channel,
                        &user,
                        &entry.ts,
                        &name_of(&entry.op),
                        &name_of(&entry.section),
                        &&*pg_text(&entry.key),
                        &&*pg_text(&entry.value),
                        &sources,
                        &entry.supersedes.as_deref().map(pg_text).as_deref(),
                        &name_of(&entry.by),
                    ],
                )
                .await?
                .get(0);
            self.rows.push((id, entry.clone()));
        }
        Ok(())
    }
}

/// Keeps `before` (the document's text, `None`: it did not exist) as the
/// user's next version of `file`, and prunes that file's versions past
/// [`KEEP_PER_FILE`]. The caller holds the user's row lock.
pub(crate) async fn keep_version(
    tx: &Transaction<'_>,
    channel: &str,
    user: &str,
    file: &str,
    before: Option<&str>,
    change: (Author, &str),
    now: DateTime<Utc>,
) -> Result<(), PgError> {
    tx.execute(
        "INSERT INTO mnemo_versions (channel, user_key, seq, ts, by, what, file, before)
         SELECT $1, $2, coalesce(max(seq), 0) + 1, $3, $4, $5, $6, $7
         FROM mnemo_versions WHERE channel = $1 AND user_key = $2",
        &[
            &channel,
            &user,
            &now,
            &name_of(&change.0),
            &&*pg_text(change.1),
            &file,
            &before,
        ],
    )
    .await?;
    let keep = i64::try_from(KEEP_PER_FILE).unwrap_or(i64::MAX);
    tx.execute(
        "DELETE FROM mnemo_versions WHERE channel = $1 AND user_key = $2 AND file = $3 AND seq NOT IN
             (SELECT seq FROM mnemo_versions WHERE channel = $1 AND user_key = $2 AND file = $3
              ORDER BY seq DESC LIMIT $4)",
        &[&channel, &user, &file, &keep],
    )
    .await?;
    Ok(())
}
