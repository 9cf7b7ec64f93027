//! One channel's memory in the database: the pool, the channel's name
//! and config, its summarizer and time zone. Its users' turns and intake
//! are in [`crate::turn`], folds in [`crate::fold`]; what the broker sees
//! of it is [`crate::store::PgMemory`], behind the memory seam. Depends on
//! no other module of the crate but its root (the floor the others stand
//! on).

use crate::PgStore;
use chrono_tz::Tz;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::summarizer::Summarizer;
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
}
