//! The running broker: the memory of every enabled channel, the model, the
//! dispatcher and the scheduler, wired together. [`App`] is a cheap handle;
//! the end-to-end tests drive exactly this type.
//!
//! What it must not do: talk to a platform directly (channels do), or touch
//! a memory file except through `mnemo-sessions`.

mod recovery;

pub use recovery::Recovered;

use crate::config::LimitsConfig;
use crate::dispatch::{Dispatcher, Refused};
use crate::model::Model;
use crate::pipeline::Pipeline;
use anyhow::{Context as _, Result};
use mnemo_channels::{Channel, Inbound};
use mnemo_sessions::Layout;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::Maintenance;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::store::MemoryStore;
use mnemo_sessions::store::files::FileStore;
use mnemo_sessions::summarizer::Summarizer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

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
    fn open_rotating(
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

/// Everything the app needs, resolved from config and environment.
pub struct AppParts {
    pub state_root: PathBuf,
    pub system_prompt: String,
    pub tz: chrono_tz::Tz,
    pub limits: LimitsConfig,
    /// The chat model's per-call timeout, for shutdown budgets.
    pub model_timeout: Duration,
    pub model: Arc<dyn Model>,
    /// `model.maxToolRounds` in effect (0 for a backend without tool
    /// calling): rounds of memory tool calls before the answer.
    pub max_tool_rounds: usize,
    pub summarizer: Arc<dyn Summarizer>,
    /// The channels whose answers are shown while the model writes them
    /// (`channels.<name>.streaming`); the others get each answer whole.
    pub streaming: std::collections::BTreeSet<String>,
    /// `store.kind: postgres`: the database pool (checked at start by
    /// `serve`); `None` keeps memory in the files.
    pub store: Option<mnemo_pg::PgStore>,
}

/// How long in-flight turns may take to finish after a shutdown signal.
/// Their user messages are already in STM, so this only decides whether the
/// answer still goes out; well under systemd's 90 s stop timeout.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a user's queue worker lingers with nothing to do.
const QUEUE_IDLE: Duration = Duration::from_secs(120);

#[derive(Clone)]
pub struct App {
    pipeline: Arc<Pipeline>,
    dispatcher: Dispatcher<Pipeline>,
    parts: Arc<AppParts>,
    memories: Arc<HashMap<String, ChannelMemory>>,
}

impl App {
    /// Builds the app for `channels`, opening each one's memory. An
    /// embeddings endpoint (`recall.embeddings`) gets no key: see
    /// [`App::with_env`].
    pub fn new(parts: AppParts, channels: Vec<Arc<dyn Channel>>) -> Result<Self> {
        App::with_env(parts, channels, &|_| None)
    }

    /// [`App::new`] with the environment lookup that gives each channel's
    /// `recall.embeddings` endpoint its key (`apiKeyEnv`).
    pub fn with_env(
        parts: AppParts,
        channels: Vec<Arc<dyn Channel>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let locks = LockRegistry::new();
        // Names this broker in the database's maintenance leases.
        let holder = broker_id();
        let mut memories = HashMap::new();
        let mut senders = HashMap::new();
        for channel in channels {
            let name = channel.name().to_string();
            // `<state>/logs` is shared: the first channel's maintenance rotates it.
            let first = memories.is_empty();
            let opened = ChannelMemory::open_rotating(
                &parts.state_root,
                &name,
                &locks,
                parts.tz,
                parts.summarizer.clone(),
                first,
            );
            let mut memory = opened.with_context(|| format!("opening the memory of channel `{name}`"))?;
            memory
                .use_embeddings(env)
                .with_context(|| format!("opening the memory of channel `{name}`"))?;
            if let Some(store) = &parts.store {
                memory = memory.on_postgres(store, parts.tz, parts.summarizer.clone(), first, &holder);
            }
            memories.insert(name.clone(), memory);
            senders.insert(name, channel);
        }
        let memories = Arc::new(memories);
        let parts = Arc::new(parts);
        let pipeline = Arc::new(Pipeline::new(parts.clone(), memories.clone(), senders));
        let dispatcher = Dispatcher::new(pipeline.clone(), parts.limits.user_queue_depth, QUEUE_IDLE);
        Ok(App {
            pipeline,
            dispatcher,
            parts,
            memories,
        })
    }

    pub fn parts(&self) -> &AppParts {
        &self.parts
    }

    pub fn memories(&self) -> &HashMap<String, ChannelMemory> {
        &self.memories
    }

    /// Users with a live queue, and messages waiting in them (for metrics).
    pub fn queue_depths(&self) -> (usize, usize) {
        (self.dispatcher.live_queues(), self.dispatcher.queued_messages())
    }

    /// Waits up to `limit` until no turn is queued or running: a reply is
    /// stored right after it is sent, so the last one sent may not be
    /// stored yet (the bench waits, before it counts or deletes).
    pub async fn wait_turns(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.dispatcher.queued_messages() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits up to `limit` for background compactions to finish (the bench
    /// does, before it removes its state folder).
    pub async fn wait_background(&self, limit: Duration) {
        self.pipeline.wait_background(limit).await;
    }

    /// Hands one message to its user's queue.
    pub async fn submit(&self, message: Inbound) {
        let (channel, msg_id) = (message.channel.clone(), message.msg_id.clone());
        // A full queue has already been answered (and settled); a closed one
        // (shutting down) took nothing: the platform may deliver it again.
        if let Err(Refused::Closed) = self.dispatcher.submit(message).await {
            let _ = self.pipeline.settle(&channel, &msg_id, false);
        }
    }

    /// Serves `channels` until they all end (console end of input) or
    /// `shutdown` fires, then drains: queued and in-flight turns finish
    /// (after a signal, unstarted turns and whatever the channels still
    /// hand over are saved, not answered) within a bounded time. Returns
    /// whether everything finished in time.
    pub async fn serve(&self, channels: Vec<Arc<dyn Channel>>, shutdown: watch::Receiver<bool>) -> bool {
        // Questions a crash left unanswered are queued before any channel
        // hands over a message (whose repeat would find them stored).
        self.recover().await;
        let sweeping = self.memories.values().any(|m| m.store.shared());
        let mut sweep = tokio::time::interval_at(
            tokio::time::Instant::now() + recovery::SWEEP_EVERY,
            recovery::SWEEP_EVERY,
        );
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (inbox_tx, mut inbox) = mpsc::channel::<Inbound>(256);
        let mut receivers = tokio::task::JoinSet::new();
        for channel in channels {
            let tx = inbox_tx.clone();
            let stop = shutdown.clone();
            receivers.spawn(async move {
                if let Err(e) = channel.receive(tx, stop).await {
                    tracing::error!(channel = channel.name(), error = %e, "channel stopped");
                }
            });
        }
        drop(inbox_tx);
        let mut stop = shutdown.clone();
        let ended_by_signal = loop {
            tokio::select! {
                message = inbox.recv() => match message {
                    Some(message) => self.submit(message).await,
                    None => break false,
                },
                _ = crate::shutdown::fired(&mut stop) => break true,
                _ = sweep.tick(), if sweeping => {
                    self.sweep().await;
                }
            }
        };
        // The channels watch the same signal and close the inbox when it
        // fires, so the loop may see the closed inbox first: an inbox that
        // closed after a signal is still a shutdown, with its short grace,
        // not an end of input that waits for every answer.
        let signalled = ended_by_signal || *shutdown.borrow();
        let grace = if signalled {
            SHUTDOWN_GRACE
        } else {
            // End of input: let every queued turn get its answer.
            Duration::from_secs(self.pipeline.turn_timeout_secs().saturating_mul(4).max(60))
        };
        let deadline = tokio::time::Instant::now() + grace;
        if signalled {
            self.pipeline.start_draining();
            // A message a channel took in as the signal fired (a platform
            // event already acknowledged) is saved, not dropped with the
            // inbox: take what the channels still hand over until they have
            // all stopped, within the same grace.
            let _ = tokio::time::timeout_at(deadline, async {
                while let Some(message) = inbox.recv().await {
                    self.submit(message).await;
                }
            })
            .await;
        }
        let finished = self
            .dispatcher
            .drain(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        self.pipeline.wait_background(Duration::from_secs(5)).await;
        receivers.abort_all();
        if !finished {
            tracing::warn!(
                ?grace,
                "shutdown: some turns did not finish in time; their messages are saved"
            );
        }
        finished
    }
}

/// This broker's name among several: host, process id and a random part
/// (a restarted process on the same host is another holder).
fn broker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}/{}/{:08x}", host.trim(), std::process::id(), rand::random::<u32>())
}
