//! Each channel's access rules and pairing state in the database
//! (`mnemo_access`, migration 4): one row per channel holding the same
//! JSON document the file store's `access.json` holds, a `revision` that
//! a trigger sets from a sequence on every write (mnemo's or an
//! operator's by hand), and `updated_at`. No row means the
//! default rules, as a missing file does.
//!
//! The document is opaque here: it goes in and out as JSON text, and the
//! app parses it with `access::file`'s own types (one parser for both
//! stores). This module only reads a row, tells a cache whether its
//! revision is still current ([`poll`]: one indexed lookup, the document
//! sent only when it changed), and runs a read-modify-write in one
//! transaction ([`update`]) with the row locked (`SELECT … FOR UPDATE`),
//! so two brokers and `mnemo access …` never lose each other's changes:
//! two brokers answering the same stranger at once issue one code.

use crate::{PgError, PgStore};

/// One channel's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessRow {
    /// The rules as JSON text (`access.json`'s shape; not checked here).
    pub doc: String,
    pub revision: i64,
}

/// What [`poll`] found, compared with the revision the caller holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// The channel has no row: the default rules.
    Missing,
    /// The row is at the revision the caller holds.
    Same,
    /// The row is at another revision: here it is.
    Changed(AccessRow),
}

/// What an [`update`]'s change decided.
pub struct Edit<T> {
    /// Handed back to the caller.
    pub out: T,
    /// The document to store; `None`: leave the row as it is.
    pub write: Option<String>,
}

/// The channel's row, `None` when it has none.
pub async fn read(store: &PgStore, channel: &str) -> Result<Option<AccessRow>, PgError> {
    let row = store
        .conn()
        .await?
        .query_opt(
            "SELECT doc::text, revision FROM mnemo_access WHERE channel = $1",
            &[&channel],
        )
        .await?;
    Ok(row.map(|r| AccessRow {
        doc: r.get(0),
        revision: r.get(1),
    }))
}

/// Whether the row is still at `known` (the revision the caller last read;
/// `None`: it saw no row). One round trip; the document travels only when
/// the revision differs.
pub async fn poll(store: &PgStore, channel: &str, known: Option<i64>) -> Result<Poll, PgError> {
    let row = store
        .conn()
        .await?
        .query_opt(
            "SELECT revision, CASE WHEN revision IS DISTINCT FROM $2 THEN doc::text END
             FROM mnemo_access WHERE channel = $1",
            &[&channel, &known],
        )
        .await?;
    Ok(match row {
        None => Poll::Missing,
        Some(r) => match r.get::<_, Option<String>>(1) {
            None => Poll::Same,
            Some(doc) => Poll::Changed(AccessRow {
                doc,
                revision: r.get(0),
            }),
        },
    })
}

/// A read-modify-write of the channel's rules in one transaction: the row
/// is locked (created empty, `{}`, if missing, so two first writers queue
/// on it too), `change` sees the document as committed now (`None`: no
/// row before), and what it asks to write is stored under a new
/// revision. Returns `change`'s value and the row's revision afterwards
/// (`None` when there is still no row). An `Err` from `change` rolls
/// everything back, so nothing is written.
pub async fn update<T, E>(
    store: &PgStore,
    channel: &str,
    change: impl FnOnce(Option<&str>) -> Result<Edit<T>, E>,
) -> Result<(T, Option<i64>), E>
where
    E: From<PgError>,
{
    let mut conn = store.conn().await?;
    let tx = conn.transaction().await.map_err(PgError::from)?;
    let created = tx
        .execute(
            "INSERT INTO mnemo_access (channel, doc) VALUES ($1, '{}') ON CONFLICT (channel) DO NOTHING",
            &[&channel],
        )
        .await
        .map_err(PgError::from)?
        == 1;
    let row = tx
        .query_one(
            "SELECT doc::text, revision FROM mnemo_access WHERE channel = $1 FOR UPDATE",
            &[&channel],
        )
        .await
        .map_err(PgError::from)?;
    let (doc, revision): (String, i64) = (row.get(0), row.get(1));
    let edit = change((!created).then_some(doc.as_str()))?;
    let Some(new) = edit.write else {
        // Dropping the transaction rolls back the empty row made above.
        let revision = (!created).then_some(revision);
        return Ok((edit.out, revision));
    };
    let row = tx
        .query_one(
            // The trigger sets the next revision and `updated_at`.
            "UPDATE mnemo_access SET doc = $2::text::jsonb WHERE channel = $1 RETURNING revision",
            &[&channel, &new],
        )
        .await
        .map_err(PgError::from)?;
    let revision: i64 = row.get(0);
    tx.commit().await.map_err(PgError::from)?;
    Ok((edit.out, Some(revision)))
}

/// The channels that have a row, sorted (for `mnemo store copy`).
pub async fn channels(store: &PgStore) -> Result<Vec<String>, PgError> {
    let rows = store
        .conn()
        .await?
        .query("SELECT channel FROM mnemo_access ORDER BY channel", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Deletes the channel's row (its rules are the defaults again); whether
/// there was one. For `mnemo bench`'s own channel.
pub async fn remove(store: &PgStore, channel: &str) -> Result<bool, PgError> {
    let n = store
        .conn()
        .await?
        .execute("DELETE FROM mnemo_access WHERE channel = $1", &[&channel])
        .await?;
    Ok(n > 0)
}
