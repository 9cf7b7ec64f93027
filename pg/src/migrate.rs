//! Versioned schema migrations: each one runs once, in its own transaction,
//! recorded in `mnemo_schema`. `mnemo store migrate` applies what is
//! missing; a broker only checks ([`check`]) and refuses to start on a
//! schema that is behind (run the migration first) or ahead (a newer mnemo
//! migrated it: running older code on it could lose data).
//!
//! Two brokers migrating at once queue on one advisory lock, so each
//! migration runs exactly once; running `migrate` again changes nothing.

use crate::{PgError, PgStore};

/// One schema change. Never edit a released one: add the next.
struct Migration {
    version: i32,
    name: &'static str,
    sql: &'static str,
}

/// The advisory lock key every migrating broker queues on ("mnemo" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d6e_656d_6f00_0001;

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "short-term messages, folds, summaries, profiles",
        sql: include_str!("migrations/0001_base.sql"),
    },
    Migration {
        version: 2,
        name: "maintenance leases, expiry",
        sql: include_str!("migrations/0002_leases.sql"),
    },
    Migration {
        version: 3,
        name: "recall's full-text index per user (btree_gin)",
        sql: include_str!("migrations/0003_recall_index.sql"),
    },
    Migration {
        version: 4,
        name: "access rules and pairing state per channel",
        sql: include_str!("migrations/0004_access.sql"),
    },
    Migration {
        version: 5,
        name: "long-term memory: fact log, versions, topic notes, shared notes",
        sql: include_str!("migrations/0005_long_term.sql"),
    },
    Migration {
        version: 6,
        name: "daily and weekly summaries, maintenance watermarks",
        sql: include_str!("migrations/0006_digests.sql"),
    },
    Migration {
        version: 7,
        name: "reminders, a user's timezone, undone versions kept",
        sql: include_str!("migrations/0007_reminders.sql"),
    },
    Migration {
        version: 8,
        name: "model tokens spent per user, day and purpose",
        sql: include_str!("migrations/0008_usage.sql"),
    },
    Migration {
        version: 9,
        name: "documents a user sent, their pieces for recall, and kept files",
        sql: include_str!("migrations/0009_documents.sql"),
    },
    Migration {
        version: 10,
        name: "linked identities: links, one-time codes (hashed), wrong codes",
        sql: include_str!("migrations/0010_links.sql"),
    },
];

/// The schema version this build reads and writes.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// How many migrations this build knows (versions may skip a number
/// while branches are merged).
pub fn count() -> usize {
    MIGRATIONS.len()
}

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The version before, 0 for an empty database.
    pub from: i32,
    pub to: i32,
    /// `version name` of each migration applied now, in order.
    pub applied: Vec<String>,
    /// Whether recall's embeddings can use pgvector now
    /// ([`crate::vectors::ensure`]).
    pub vectors: crate::Vectors,
}

/// Applies every migration the database lacks, one transaction each, while
/// holding the migration lock.
pub async fn migrate(store: &PgStore) -> Result<Migrated, PgError> {
    let mut conn = store.conn().await?;
    conn.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
    let result = match apply(&mut conn).await {
        // pgvector under the same lock: two brokers never race its setup.
        Ok(applied) => crate::vectors::ensure(&mut conn)
            .await
            .map(|vectors| (applied, vectors)),
        Err(e) => Err(e),
    };
    // Released on every path; a dropped connection releases it too.
    let unlocked = conn.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
    let ((from, applied), vectors) = result?;
    unlocked?;
    Ok(Migrated {
        from,
        to: latest(),
        applied,
        vectors,
    })
}

async fn apply(conn: &mut deadpool_postgres::Object) -> Result<(i32, Vec<String>), PgError> {
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS mnemo_schema (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let from = current(conn).await?;
    if from > latest() {
        return Err(PgError::SchemaAhead {
            have: from,
            know: latest(),
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        let tx = conn.transaction().await?;
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO mnemo_schema (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "schema migration applied");
        applied.push(format!("{} {}", m.version, m.name));
    }
    Ok((from, applied))
}

/// The schema version of the database, 0 when it has none.
async fn current(conn: &deadpool_postgres::Object) -> Result<i32, PgError> {
    let exists: bool = conn
        .query_one("SELECT to_regclass('mnemo_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = conn
        .query_one("SELECT coalesce(max(version), 0) FROM mnemo_schema", &[])
        .await?;
    Ok(row.get(0))
}

/// Whether the database is at this build's version: the broker's start
/// check.
pub async fn check(store: &PgStore) -> Result<(), PgError> {
    let conn = store.conn().await?;
    let have = current(&conn).await?;
    match have.cmp(&latest()) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(PgError::SchemaBehind { have, want: latest() }),
        std::cmp::Ordering::Greater => Err(PgError::SchemaAhead { have, know: latest() }),
    }
}

/// The schema version of the database (0: none), for `mnemo store status`.
pub async fn version(store: &PgStore) -> Result<i32, PgError> {
    current(&store.conn().await?).await
}
