//! One channel's users on the Postgres store: intake, turns and folds.
//! What the broker sees of it is [`crate::store::PgMemory`], behind the
//! memory seam.

use crate::turn::PgTurn;
use crate::{PgError, PgStore};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::summarizer::Summarizer;
use mnemo_sessions::{Record, SafeName};
use std::sync::Arc;

/// One channel's memory in the database. Cheap to clone.
#[derive(Clone)]
pub struct PgChannel {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: PgStore,
    name: String,
    config: SessionConfig,
    summarizer: Arc<dyn Summarizer>,
    /// Where local days begin and end for daily summaries.
    tz: Tz,
    /// Whether pgvector carries embeddings here, known after the first
    /// successful look (a migration that sets it up later takes a restart).
    vectors: Arc<tokio::sync::OnceCell<bool>>,
}

impl PgChannel {
    pub fn new(store: PgStore, name: &str, config: SessionConfig, summarizer: Arc<dyn Summarizer>) -> PgChannel {
        PgChannel {
            inner: Arc::new(Inner {
                store,
                name: name.to_string(),
                config,
                summarizer,
                tz: Tz::UTC,
                vectors: Arc::default(),
            }),
        }
    }

    /// Cuts daily summaries at midnight in `tz` (the app's `timezone`;
    /// UTC until set).
    pub fn with_tz(mut self, tz: Tz) -> PgChannel {
        Arc::make_mut(&mut self.inner).tz = tz;
        self
    }

    pub fn tz(&self) -> Tz {
        self.inner.tz
    }

    /// Whether recall's embeddings are stored and searched here (pgvector
    /// set up by `mnemo store migrate`). A failed look counts as no, and
    /// is tried again next time.
    pub async fn vectors_in_use(&self) -> bool {
        let looked = self
            .inner
            .vectors
            .get_or_try_init(|| async { self.store().vectors().await.map(|v| v == crate::Vectors::InUse) })
            .await;
        looked.copied().unwrap_or(false)
    }

    pub fn store(&self) -> &PgStore {
        &self.inner.store
    }

    /// The channel's name, as the rows are keyed.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &SessionConfig {
        &self.inner.config
    }

    pub(crate) fn summarizer(&self) -> &Arc<dyn Summarizer> {
        &self.inner.summarizer
    }

    /// Starts `user`'s turn: waits for the user's lock (held by another
    /// turn of theirs, on any broker) and keeps it until the turn is dropped.
    pub async fn begin_turn(&self, user: &SafeName) -> Result<PgTurn, PgError> {
        PgTurn::begin(self, user).await
    }

    /// Stores a message as it arrives (intake), without the user's turn
    /// lock (see [`crate::turn::append_on`]), on the intake pool's
    /// connections. A repeat (`duplicate`) adds nothing.
    pub async fn intake(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
    ) -> Result<crate::turn::PgAppended, PgError> {
        let conn = self.store().intake_conn().await?;
        crate::turn::append_on(&conn, self, user, record, now).await
    }

    /// Folds `user`'s older messages if the rules say so ([`crate::fold`]).
    pub async fn compact(&self, user: &SafeName, now: DateTime<Utc>) -> Result<crate::fold::PgFold, PgError> {
        crate::fold::compact(self, user, now).await
    }
}
