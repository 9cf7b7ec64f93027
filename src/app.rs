//! The running broker: the memory of every enabled channel, the model, the
//! dispatcher and the scheduler, wired together. [`App`] is a cheap handle;
//! the end-to-end tests drive exactly this type.
//!
//! What it must not do: talk to a platform directly (channels do), or touch
//! a memory file except through `mnemo-sessions`.

mod recovery;

pub use crate::channel_memory::ChannelMemory;
pub use crate::parts::AppParts;

pub use recovery::Recovered;

use crate::dispatch::{Dispatcher, Refused};
use crate::pipeline::Pipeline;
use anyhow::{Context as _, Result};
use mnemo_channels::{Channel, Inbound};
use mnemo_sessions::locks::LockRegistry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

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

    /// The adapter of the channel `name` (to post what the bot starts).
    pub fn channel(&self, name: &str) -> Option<Arc<dyn Channel>> {
        self.pipeline.channel(name)
    }

    /// Counts the day's model budget by `clock` instead of the wall clock
    /// (tests of `limits.userTokensPerDay`).
    pub fn set_clock(&self, clock: crate::pipeline::Clock) {
        self.pipeline.set_clock(clock);
    }

    /// Questions answered, and questions whose model call failed, since
    /// the app started.
    pub fn answers(&self) -> (usize, usize) {
        self.pipeline.answers()
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
