//! One channel's memory as the broker wires it: the operator config, the
//! state folder, and the store behind the memory seam (the files, or
//! Postgres). What the message path reaches is [`ChannelMemory::store`].
//!
//! What it must not do: touch a memory file itself (the stores do), or
//! depend on the app that holds it.

use anyhow::{Context as _, Result};
use mnemo_sessions::Layout;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::Maintenance;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::store::MemoryStore;
use mnemo_sessions::store::files::FileStore;
use mnemo_sessions::summarizer::{NoModel, Summarizer};
use std::sync::Arc;

/// One channel's memory: its operator config, its state folder, and the
/// store its users' memory lives in ([`MemoryStore`]: the files, or
/// Postgres), which is all the message path talks to.
#[derive(Clone)]
pub struct ChannelMemory {
    pub layout: Layout,
    pub config: SessionConfig,
    /// The channel's state folder: the file store's memory, or, on
    /// Postgres, the export bundles and logs (`mnemo` ops act on it).
    pub stm: Stm,
    /// The channel's recall over its files, and the embedder a turn's
    /// question is embedded with on either store.
    pub recall: Recall,
    /// Where the users' memory is.
    pub store: Arc<dyn MemoryStore>,
}

impl ChannelMemory {
    /// Opens (and validates) the memory of `channel` under `state_root`,
    /// on the files. A bad `sessions/config.json` is an error here, at
    /// start, naming the file — never a silent fallback to defaults.
    pub fn open(
        state_root: &std::path::Path,
        channel: &str,
        locks: &LockRegistry,
        tz: chrono_tz::Tz,
        summarizer: Arc<dyn Summarizer>,
    ) -> Result<Self> {
        ChannelMemory::open_rotating(state_root, channel, locks, tz, summarizer, false)
    }

    /// [`ChannelMemory::open`]; `rotates_logs`: this channel's maintenance
    /// also rotates the state folder's shared `logs/` (one channel does).
    pub(crate) fn open_rotating(
        state_root: &std::path::Path,
        channel: &str,
        locks: &LockRegistry,
        tz: chrono_tz::Tz,
        summarizer: Arc<dyn Summarizer>,
        rotates_logs: bool,
    ) -> Result<Self> {
        let layout = Layout::new(state_root, channel);
        // A served channel has its folder from the start (private), so
        // `mnemo access` knows it even before anything is stored.
        mnemo_sessions::fsutil::create_private_dir_all(state_root, layout.root())
            .with_context(|| format!("cannot create {}", layout.root().display()))?;
        let config = SessionConfig::load(&layout.config_path())?;
        let stm = Stm::new(layout.clone(), locks.clone(), config.stm.fsync);
        let recall = Recall::of(&stm);
        let store = FileStore::new(stm.clone(), config.clone(), summarizer, tz, rotates_logs);
        Ok(ChannelMemory {
            layout,
            config,
            stm,
            recall,
            store: Arc::new(store),
        })
    }

    /// Keeps the channel's users' memory in the database of `store`
    /// (`store.kind: postgres`); the state folder keeps the exports and
    /// logs. `holder` names this broker in the maintenance leases.
    pub fn on_postgres(
        mut self,
        store: &mnemo_pg::PgStore,
        tz: chrono_tz::Tz,
        summarizer: Arc<dyn Summarizer>,
        rotates_logs: bool,
        holder: &str,
    ) -> Self {
        let channel = self.layout.channel().as_str().to_string();
        let database =
            mnemo_pg::PgChannel::new(store.clone(), &channel, self.config.clone(), summarizer.clone()).with_tz(tz);
        let files = Maintenance::new(self.stm.clone(), self.config.clone(), tz, summarizer).rotating_logs(rotates_logs);
        let memory = mnemo_pg::PgMemory::new(database, self.layout.clone(), self.recall.clone(), files, holder);
        self.store = Arc::new(memory);
        self
    }

    /// The memory of `channel` for an operator's verb acting for one user
    /// (`sessions forget`, `sessions export`) in a process without a model:
    /// on the files under `state_root`, or in `database` when the store is
    /// Postgres. Creates nothing: a channel with no folder (on the files)
    /// is an error naming where it looked.
    pub fn for_operator(
        state_root: &std::path::Path,
        channel: &str,
        database: Option<&mnemo_pg::PgStore>,
    ) -> Result<Self> {
        let layout = Layout::new(state_root, channel);
        if database.is_none() && !layout.root().is_dir() {
            anyhow::bail!(
                "no stored memory for channel `{channel}` under {}",
                state_root.display()
            );
        }
        let config = SessionConfig::load(&layout.config_path())?;
        let stm = Stm::new(layout.clone(), LockRegistry::new(), config.stm.fsync);
        let recall = Recall::of(&stm);
        let store: Arc<dyn MemoryStore> = Arc::new(FileStore::without_model(stm.clone(), config.clone()));
        let memory = ChannelMemory {
            layout,
            config,
            stm,
            recall,
            store,
        };
        Ok(match database {
            Some(database) => {
                memory.on_postgres(database, chrono_tz::UTC, Arc::new(NoModel), false, "mnemo (operator)")
            }
            None => memory,
        })
    }

    /// Turns recall's dense embeddings on for this channel when its
    /// `sessions/config.json` has `recall.embeddings` (off otherwise): the
    /// endpoint is checked like the `summarizer` section and its key read
    /// through `env`; a bad one fails here, at start, naming the file.
    pub fn use_embeddings(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        let embedder = crate::model::embeddings::recall_embedder(self.config.recall.embeddings.as_ref(), env)
            .with_context(|| format!("the session config {} is refused", self.layout.config_path().display()))?;
        self.recall.use_embedder(embedder);
        Ok(())
    }
}
