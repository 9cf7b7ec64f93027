//! mnemo's Postgres store: what a turn needs — the short-term messages,
//! the rolling summary and its folds, the profile, and full-text recall
//! over a user's whole history — in one database that several brokers
//! share (`store: {"kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL"}` in
//! the app config; the file layout stays the default).
//!
//! - [`PgStore`]: the connection pool (rustls for TLS, the URL's
//!   `sslmode`), [`migrate`] and the start check.
//! - [`channel::PgChannel`]: one channel's users. A turn holds
//!   [`turn::PgTurn`]: one pooled connection with the user's advisory lock
//!   (channel + user), so the turns of one user run one at a time across
//!   every broker, and a broker that dies releases its users' locks with
//!   its connections.
//! - [`fold`]: compaction as one transaction (nothing archived twice or
//!   lost), one fold per user at a time across brokers.
//! - [`recall`]: `tsvector` search scoped to the user inside the query.
//! - [`memory`]: long-term memory edits (remember, forget, history, undo,
//!   the memory tools) with the file store's rules, one transaction each;
//!   the fact log, versions and topic notes beside the profile.
//! - [`maintain`]: the fold sweep and expiry, by one broker at a time
//!   per channel (a lease in the database, taken over when it expires).
//! - [`access`]: each channel's access rules and pairing state (the
//!   `access.json` document), cached by revision, changed in one locked
//!   transaction, shared by every broker.
//! - [`copy`]: one user's memory written in one verified transaction and
//!   read back in one snapshot, for `mnemo store copy`.
//!
//! Crash guarantees match the files: a message is acknowledged once its
//! insert committed (`synchronous_commit` as the server has it); a
//! redelivered platform message id is a no-op; a fold commits all of its
//! changes or none. No message text goes into an error or a log line.
//!
//! Postgres `text` cannot hold NUL: a NUL in any stored string is kept as
//! U+2400 (␀), the visible symbol for it ([`pg_text`]).

pub mod access;
pub mod channel;
pub mod copy;
pub mod digests;
pub mod documents;
pub mod export;
pub mod fold;
pub mod maintain;
pub mod memory;
pub mod migrate;
pub mod pending;
pub mod people;
pub mod recall;
pub mod reminders;
pub mod seed;
mod session;
pub mod store;
pub mod turn;
pub mod usage;
pub mod vectors;
mod words;

pub use channel::PgChannel;
pub use store::{PgMemory, PgUser};
pub use turn::PgTurn;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// Connections a broker opens at most, by default: each turn in flight
/// holds one for its span (its user's lock lives on it).
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;

/// How long a turn waits for a free connection before it is refused (the
/// user is told; nothing was stored).
pub const DEFAULT_POOL_WAIT: Duration = Duration::from_secs(10);

/// Why the store failed. The text names what failed, never a message's
/// text (statements carry it only as a parameter).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("the database URL is not valid: {0}")]
    BadUrl(String),
    #[error("no database connection: {0}")]
    Pool(String),
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("the database schema is at version {have}, this mnemo needs {want}: run `mnemo store migrate`")]
    SchemaBehind { have: i32, want: i32 },
    #[error(
        "the database schema is at version {have}, newer than this mnemo knows ({know}): a newer mnemo migrated it; run that version"
    )]
    SchemaAhead { have: i32, know: i32 },
    /// A stored document mnemo wrote that does not read back (edited by
    /// hand); the text says which and what to do.
    #[error("{0}")]
    Invalid(String),
    /// The embeddings endpoint failed while vectors were filled.
    #[error("the embeddings endpoint failed: {0}")]
    Embeddings(String),
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        PgError::Pool(e.to_string())
    }
}

/// The pool of connections to one database. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// A few connections of their own for intake (storing a message as it
    /// arrives), so turns that hold every connection of `pool` through
    /// their model calls never keep a new message from being stored.
    intake: Pool,
}

/// Connections the intake pool opens at most (beside `store.maxConnections`).
pub const INTAKE_CONNECTIONS: usize = 2;

/// Shows the pool's size only: the URL may hold a password.
impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (size, max) = self.pool_status();
        f.debug_struct("PgStore")
            .field("connections", &size)
            .field("max", &max)
            .finish()
    }
}

impl PgStore {
    /// A pool for `url` (`postgres://user:pass@host:port/db?sslmode=…`, or
    /// the key=value form), opening at most `max_connections`, each turn
    /// waiting at most `wait` for one. Connects lazily: [`PgStore::ping`]
    /// or [`migrate::check`] tells whether the database is there.
    pub fn connect(url: &str, max_connections: usize, wait: Duration) -> Result<PgStore, PgError> {
        let config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
            // The parser's message names the bad part; the URL may hold a
            // password, so it is not repeated.
            PgError::BadUrl(e.to_string())
        })?;
        let pool = |size: usize| {
            let manager = Manager::from_config(
                config.clone(),
                tls()?,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(wait))
                .create_timeout(Some(wait))
                .recycle_timeout(Some(wait))
                .build()
                .map_err(|e| PgError::Pool(e.to_string()))
        };
        Ok(PgStore {
            pool: pool(max_connections)?,
            intake: pool(INTAKE_CONNECTIONS)?,
        })
    }

    /// One round trip: is the database there?
    pub async fn ping(&self) -> Result<(), PgError> {
        self.conn().await?.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// A pooled connection.
    pub(crate) async fn conn(&self) -> Result<deadpool_postgres::Object, PgError> {
        Ok(self.pool.get().await?)
    }

    /// A connection of the intake pool (beside the turns' pool).
    pub(crate) async fn intake_conn(&self) -> Result<deadpool_postgres::Object, PgError> {
        Ok(self.intake.get().await?)
    }

    /// Connections open now and the pool's bound, for status and tests.
    pub fn pool_status(&self) -> (usize, usize) {
        let s = self.pool.status();
        (s.size, s.max_size)
    }

    /// Whether the `vector` extension (pgvector) carries recall's
    /// embeddings here: in use (the extension and `mnemo_vectors` are
    /// there), installed or available but not set up (run `mnemo store
    /// migrate`), or absent from the server.
    pub async fn vectors(&self) -> Result<Vectors, PgError> {
        let conn = self.conn().await?;
        vectors_on(&conn).await
    }
}

/// [`PgStore::vectors`] on a connection already held.
pub(crate) async fn vectors_on(conn: &tokio_postgres::Client) -> Result<Vectors, PgError> {
    let row = conn
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'),
                    EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'),
                    to_regclass('mnemo_vectors') IS NOT NULL",
            &[],
        )
        .await?;
    Ok(match (row.get(0), row.get(1), row.get(2)) {
        (true, _, true) => Vectors::InUse,
        (true, _, false) => Vectors::Installed,
        (false, true, _) => Vectors::Available,
        (false, false, _) => Vectors::Absent,
    })
}

/// What the database holds, for `mnemo store status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub users: i64,
    pub messages: i64,
    pub archived: i64,
}

impl PgStore {
    /// Deletes every user of `channel` (their messages, folds and
    /// documents go with them); the number of users. For `mnemo bench`'s
    /// own channel.
    pub async fn delete_channel(&self, channel: &str) -> Result<u64, PgError> {
        Ok(self
            .conn()
            .await?
            .execute("DELETE FROM mnemo_users WHERE channel = $1", &[&channel])
            .await?)
    }

    /// Refreshes the planner's statistics of mnemo's tables: after a bulk
    /// load (`store copy`, the bench's seeding), before autovacuum does, so
    /// recall's plans use the per-user index instead of scanning.
    pub async fn analyze(&self) -> Result<(), PgError> {
        self.conn()
            .await?
            .batch_execute("ANALYZE mnemo_users, mnemo_messages, mnemo_folds")
            .await?;
        Ok(())
    }

    /// Vacuums mnemo's tables and refreshes their statistics: after a
    /// mass delete (the bench's cleanup), so the next turns do not walk
    /// the deleted rows' index entries until autovacuum comes by.
    pub async fn vacuum(&self) -> Result<(), PgError> {
        self.conn()
            .await?
            .batch_execute("VACUUM (ANALYZE) mnemo_users, mnemo_messages, mnemo_folds")
            .await?;
        Ok(())
    }

    pub async fn counts(&self) -> Result<Counts, PgError> {
        let row = self
            .conn()
            .await?
            .query_one(
                "SELECT (SELECT count(*) FROM mnemo_users), count(*), count(*) FILTER (WHERE fold IS NOT NULL)
                 FROM mnemo_messages",
                &[],
            )
            .await?;
        Ok(Counts {
            users: row.get(0),
            messages: row.get(1),
            archived: row.get(2),
        })
    }
}

impl PgStore {
    /// The channels that have users in the database, by name.
    pub async fn channels(&self) -> Result<Vec<String>, PgError> {
        let rows = self
            .conn()
            .await?
            .query("SELECT DISTINCT channel FROM mnemo_users ORDER BY channel", &[])
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Whether recall's full-text index is per user (migration 3 found
    /// btree_gin) or shared by every user (it did not).
    pub async fn recall_index_per_user(&self) -> Result<bool, PgError> {
        let row = self
            .conn()
            .await?
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'mnemo_messages_user_tsv')",
                &[],
            )
            .await?;
        Ok(row.get(0))
    }
}

/// What the server offers for embeddings (pgvector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vectors {
    /// The extension and the vectors table are there: embeddings are searched.
    InUse,
    Installed,
    Available,
    Absent,
}

impl std::fmt::Display for Vectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Vectors::InUse => "pgvector in use for recall's embeddings",
            Vectors::Installed => "pgvector installed, not set up (run `mnemo store migrate`)",
            Vectors::Available => "pgvector available, not installed (run `mnemo store migrate`)",
            Vectors::Absent => "pgvector absent",
        })
    }
}

/// TLS by rustls with the web's root certificates; the URL's `sslmode`
/// decides whether it is used (`prefer`, the default, falls back to plain
/// on a server without TLS; `require` does not).
fn tls() -> Result<tokio_postgres_rustls::MakeRustlsConnect, PgError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots().to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Pool(format!("TLS could not be set up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

fn webpki_roots() -> &'static [rustls::pki_types::TrustAnchor<'static>] {
    webpki_roots::TLS_SERVER_ROOTS
}

/// A read-only transaction that sees one snapshot for all its statements
/// (repeatable read): a fold or a copy committing meanwhile is seen whole
/// or not at all.
pub(crate) async fn snapshot(
    conn: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, PgError> {
    Ok(conn
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

/// `text` as Postgres can store it: NUL (which `text` cannot hold) becomes
/// U+2400, the visible symbol for it; everything else is kept.
pub fn pg_text(text: &str) -> Cow<'_, str> {
    mnemo_sessions::whole::stored_text(text)
}

/// Advisory lock keys, one namespace per purpose: 64 bits of SHA-256 of
/// `purpose/channel/user`. Two users sharing a key only wait for each other.
pub(crate) fn lock_key(purpose: &str, channel: &str, user: &str) -> i64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [purpose, channel, user] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    i64::from_be_bytes(std::array::from_fn(|i| digest[i]))
}

/// How a user, by their `user_key`, is named in logs:
/// [`mnemo_sessions::SafeName::log_id`], never the key (the id, encoded).
pub(crate) fn logged(key: &str) -> String {
    mnemo_sessions::SafeName::from_encoded(key).map_or_else(|| "?".to_string(), |u| u.log_id().to_string())
}
