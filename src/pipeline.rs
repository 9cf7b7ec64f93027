//! The message path of DESIGN §2, for one message of one user, in two
//! steps of the user's queue (`crate::dispatch`). Intake (`intake.rs`):
//! access check and abuse limits (`crate::access`: refused → a short reply
//! at most, nothing stored; rules on Postgres that could not be read →
//! nothing said or stored, and the message left for the platform to
//! deliver again) → `/session` command → waits its turn unstored;
//! otherwise append to STM (durable) and to the recall index, and the
//! platform told it is safe. The turn (here): a command or a stale notice
//! answered without the model (`no_model.rs`); otherwise, unless something
//! settled the question already, recall the user's older history → build
//! context → model, with the caller's memory tools (`model::tools::answer`,
//! bounded by `model.maxToolRounds`) → send (split for the platform) →
//! append reply (and index it) → compaction in the background. Every
//! step reaches memory through the memory seam (`MemoryStore`, the
//! user's `UserMemory` for the turn), the same on the files and on
//! Postgres, where the user's turn lock is held for the turn. On a channel set to stream (and a
//! model that streams) the answer is shown while the model writes it
//! (`crate::streaming`).
//!
//! Invariants: the user's message is in STM before its platform is told
//! it is taken and before the model is asked, so neither a crash, a model
//! failure nor a shutdown loses it; the message goes to the model once, as
//! the user turn; only this user's memory is read for the context; what
//! settles a question (its answer, or the error shown) is stored right
//! after it is shown, and a settled question is never answered again.

mod attachments;
mod budget;
pub mod documents;
mod group;
mod intake;
mod linking;
mod no_model;
mod reminding;

pub use attachments::{AttachmentSettings, NO_VISION, NOT_AN_IMAGE, VOICE_NOT_SET_UP};
pub(crate) use budget::spend;
pub use budget::{Clock, channel_notice, user_notice};
pub use group::{ADMINS_UNKNOWN, NOT_A_GROUP_ADMIN};
pub use intake::{NOT_ANSWERED, NOT_STORED, Taken};
use intake::{Work, answering, recent_keep, reply_record};
pub use linking::HOME_NOT_SERVED;

use crate::access::Gate;
use crate::channel_memory::ChannelMemory;
use crate::dispatch::Backlog;
use crate::memory_tools::MemoryTools;
use crate::model::tools::{self, ToolLimits};
use crate::model::{ModelError, ModelRequest, Usage};
use crate::ops::turn_log::{Outcome, Phase, TurnTrace};
use crate::parts::AppParts;
use chrono::Utc;
use mnemo_channels::{Channel, Inbound, LiveReply, Outbound, OutboundBody};
use mnemo_sessions::context::{self, ContextInput};
use mnemo_sessions::session::ContextView;
use mnemo_sessions::store::{StoreError, UserMemory};
use mnemo_sessions::usage::Purpose;
use mnemo_sessions::{Record, SafeName};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

pub struct Pipeline {
    parts: Arc<AppParts>,
    memories: Arc<HashMap<String, ChannelMemory>>,
    channels: HashMap<String, Arc<dyn Channel>>,
    /// The global cap on model calls in flight (`limits.maxConcurrentModelCalls`).
    model_slots: Semaphore,
    /// Who may talk and how much: checked before anything is stored.
    access: Gate,
    /// Set by a shutdown signal: turns not yet started are saved, not answered.
    draining: AtomicBool,
    /// Background compactions, awaited briefly at shutdown.
    background: tokio::sync::Mutex<tokio::task::JoinSet<()>>,
    /// Questions answered, and those whose model call failed, since start
    /// (a piped `mnemo chat` exits non-zero when none was answered).
    answered: AtomicUsize,
    model_failed: AtomicUsize,
    /// The time the day's budget is counted by (the wall clock unless a
    /// test sets one).
    clock: std::sync::RwLock<budget::Clock>,
    /// One turn at a time on each memory several accounts share (a
    /// shared group's, a linked person's).
    group_turns: group::GroupTurns,
    /// Linked identities.
    people: crate::people::People,
}

pub const SAVED_WHILE_STOPPING: &str =
    "I'm restarting right now; your message is saved and I'll answer it as soon as I'm back.";
pub const NOT_UPLOADED: &str =
    "I packed your data into an archive, but could not upload it here. The operator can hand it to you";

pub const QUEUE_FULL: &str =
    "You're sending messages faster than I can answer. Please wait for my reply, then try again.";

impl Pipeline {
    pub fn new(
        parts: Arc<AppParts>,
        memories: Arc<HashMap<String, ChannelMemory>>,
        channels: HashMap<String, Arc<dyn Channel>>,
    ) -> Self {
        let slots = parts.limits.max_concurrent_model_calls;
        let access = Gate::new(parts.state_root.clone(), &parts.limits).with_database(parts.store.clone());
        let people = crate::people::People::open(&parts.state_root, parts.store.as_ref());
        Pipeline {
            parts,
            memories,
            channels,
            model_slots: Semaphore::new(slots),
            access,
            draining: AtomicBool::new(false),
            background: tokio::sync::Mutex::new(tokio::task::JoinSet::new()),
            answered: AtomicUsize::new(0),
            model_failed: AtomicUsize::new(0),
            clock: std::sync::RwLock::new(Arc::new(Utc::now)),
            group_turns: group::GroupTurns::default(),
            people,
        }
    }

    /// Looks at `access.json` (or, on Postgres, the channel's row) no more
    /// than once per `every` (the default
    /// is `access::store::RECHECK`; zero: on every message), for tests that
    /// change the rules between two messages.
    pub fn with_access_recheck(mut self, every: Duration) -> Self {
        self.access = self.access.with_recheck(every);
        self
    }

    /// Reads the time of the day's model budget from `clock` (tests).
    pub fn set_clock(&self, clock: budget::Clock) {
        if let Ok(mut c) = self.clock.write() {
            *c = clock;
        }
    }

    /// Questions answered and questions whose model call failed, so far.
    pub fn answers(&self) -> (usize, usize) {
        (
            self.answered.load(Ordering::SeqCst),
            self.model_failed.load(Ordering::SeqCst),
        )
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The longest a single model call may take, for shutdown budgets.
    pub fn turn_timeout_secs(&self) -> u64 {
        self.parts.model_timeout.as_secs()
    }

    /// Waits up to `limit` for background compactions; what does not finish
    /// is abandoned safely (compaction is crash-safe by design).
    pub async fn wait_background(&self, limit: Duration) {
        let mut set = self.background.lock().await;
        let _ = tokio::time::timeout(limit, async { while set.join_next().await.is_some() {} }).await;
        set.abort_all();
    }

    /// Tells the message's channel whether the broker took it (stored, or
    /// refused on purpose and answered) or could not keep it, so a platform
    /// that redelivers what was not acknowledged (Telegram's webhook) gets
    /// its answer only once the message is safe.
    /// Returns whether the platform will deliver the message again (only
    /// ever for one not taken).
    /// The adapter of the channel `name`, for messages the bot starts
    /// (reminders).
    pub fn channel(&self, name: &str) -> Option<Arc<dyn Channel>> {
        self.channels.get(name).cloned()
    }

    pub fn settle(&self, channel: &str, msg_id: &str, taken: bool) -> bool {
        let Some(channel) = self.channels.get(channel) else {
            return false;
        };
        if taken {
            channel.taken(msg_id);
            false
        } else {
            channel.not_taken(msg_id)
        }
    }

    async fn reply(&self, to: &Inbound, text: &str) {
        let Some(channel) = self.channels.get(&to.channel) else {
            tracing::error!(channel = %to.channel, "no sender for channel; reply dropped");
            return;
        };
        if let Err(e) = channel.send(Outbound::reply(to, text)).await {
            tracing::warn!(channel = %to.channel, msg_id = %to.msg_id, error = %e, "reply not delivered");
        }
    }

    /// Shows the typing indicator now and every `TYPING_REFRESH` until the
    /// returned guard is dropped (when the answer is ready).
    fn keep_typing(&self, to: &Inbound) -> Option<AbortOnDrop> {
        let channel = self.channels.get(&to.channel)?.clone();
        let to = to.clone();
        Some(AbortOnDrop(tokio::spawn(async move {
            loop {
                channel.typing(&to).await;
                tokio::time::sleep(mnemo_channels::TYPING_REFRESH).await;
            }
        })))
    }

    /// Sends `out`; a file the platform would not take (an export) is
    /// followed by a text saying so, so the user is never left without an
    /// answer.
    async fn send(&self, out: Outbound) {
        let Some(channel) = self.channels.get(&out.channel) else {
            return;
        };
        let Err(e) = channel.send(out.clone()).await else {
            return;
        };
        tracing::warn!(error = %e, "reply not delivered");
        if let OutboundBody::File { path, .. } = &out.body {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let note = Outbound {
                body: OutboundBody::Text(format!("{NOT_UPLOADED} (`{name}` in this channel's exports folder).")),
                ..out
            };
            if let Err(e) = channel.send(note).await {
                tracing::warn!(error = %e, "note about the failed upload not delivered");
            }
        }
    }

    /// One taken message's turn: a `/session` command answered from
    /// memory, stale questions given up, or a stored question answered by
    /// the model (once: a question already settled is skipped).
    async fn turn(
        &self,
        memory: &ChannelMemory,
        taken: Taken,
        backlog: &Backlog,
        trace: &mut TurnTrace,
    ) -> Result<Outcome, TurnError> {
        let Taken {
            message,
            user,
            work,
            images,
            notes,
            ..
        } = taken;
        if self.tell(&message, &notes, &work).await {
            return Ok(Outcome::Refused);
        }
        let (_shared_turn, mut mine) = self.memory_for_turn(memory, &user, &message).await?;
        match work {
            Work::Command(command) => return self.command(memory, mine.as_mut(), &message, &command).await,
            Work::GiveUp { earlier } => return self.give_up(memory, mine.as_mut(), &message, &earlier, backlog).await,
            Work::Question | Work::Recovered | Work::Notes => {}
        }
        let config = memory.store.config();
        let keep = recent_keep(config, &self.parts.limits);
        // Answered by another broker (or an earlier run) already.
        let Some(view) = mine.question_view(&message.msg_id, keep, Utc::now()).await? else {
            return Ok(Outcome::Duplicate);
        };
        // One extra message because the one being answered is in the log too.
        let view = answering(view, &message.msg_id, config.stm.context_window + 1);

        if self.draining.load(Ordering::SeqCst) {
            self.reply(&message, SAVED_WHILE_STOPPING).await;
            return Ok(Outcome::Saved);
        }
        self.tell_missed(mine.as_mut(), &message).await;
        let (zone, days) = self.today(mine.as_mut()).await;
        if let Some(notice) = self.over_budget(memory, &user, zone, days).await {
            return self
                .refuse_spent(memory, mine.as_mut(), &message, notice, backlog, zone)
                .await;
        }

        let mut request = self.request_for(memory, mine.as_mut(), &message, view, zone).await;
        // This turn's photos: in this request only, never in memory.
        request.images = images;
        trace.lap(Phase::Memory);
        let (tools, limits) = self.memory_tools(memory, mine, &request);
        let tools = self.with_reminders(tools, &message);
        let (answer, live) = {
            let _slot = self.model_slots.acquire().await.map_err(|_| TurnError::Closed)?;
            self.answer(&message, request, Some(&tools), limits).await
        };
        // The turn's memory the tools borrowed (a lock held throughout).
        let mut mine = tools.into_memory();
        trace.lap(Phase::Model);
        // What settles the question: the answer, or the failure notice the
        // user is shown instead (so a restart does not ask again).
        let (text, (usage, tool_usage), broken, failed) = match answer {
            Ok(answer) => (answer.text, (answer.usage, answer.tool_usage), answer.broken, None),
            Err(e) => (e.user_message().to_string(), (None, None), None, Some(e)),
        };
        trace.tokens(tools::add_usage(usage, tool_usage));
        budget::spend(&*memory.store, Some(&user), days, Purpose::Answer, usage).await;
        budget::spend(&*memory.store, Some(&user), days, Purpose::Tools, tool_usage).await;
        let reply = reply_record(&message, text);
        // Shown first, stored second: a crash between the two (the store's
        // own instant) answers the question again at the next start; the
        // other order lost answers stored but never shown (a streamed
        // answer's last edit waits up to a second for the platform's pace).
        self.show(&message, live, &reply.text).await;
        trace.lap(Phase::Send);
        let due = match store_reply(mine.as_mut(), &reply).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(channel = %message.channel, user = %crate::ops::turn_log::user_hash(&message.user_id), msg_id = %message.msg_id, error = %e, "the answer was shown but could not be stored; the next start answers the question again");
                return Ok(Outcome::Failed);
            }
        };
        // The user's lock (on Postgres) is not held through the background work.
        drop(mine);
        trace.lap(Phase::Memory);
        self.fold_if_due(memory, &user, due.now(backlog), zone).await;
        if failed.is_none() {
            self.after_answer(memory, &user).await;
        }
        // An answer shown, even one a broken stream cut, is an answer; a
        // failed call showed the user only the failure.
        let counter = if failed.is_some() {
            &self.model_failed
        } else {
            &self.answered
        };
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(self.answered_as(&message, failed, broken).await)
    }

    /// What became of an answered turn: the model failed, its stream broke
    /// (the user is told), or it answered.
    async fn answered_as(&self, message: &Inbound, failed: Option<ModelError>, broken: Option<ModelError>) -> Outcome {
        match (failed, broken) {
            (Some(e), _) => {
                tracing::warn!(channel = %message.channel, user = %crate::ops::turn_log::user_hash(&message.user_id), error = %e, "model call failed; message kept in STM");
                Outcome::ModelFailed
            }
            (None, Some(e)) => {
                tracing::warn!(channel = %message.channel, user = %crate::ops::turn_log::user_hash(&message.user_id), error = %e, "model stream broke; the answer so far is kept, marked as cut");
                self.reply(message, e.user_message()).await;
                Outcome::Cut
            }
            (None, None) => Outcome::Answered,
        }
    }

    /// Says what a message's files could not be; whether that was all its
    /// turn had to do.
    async fn tell(&self, message: &Inbound, notes: &[String], work: &Work) -> bool {
        for note in notes {
            self.reply(message, note).await;
        }
        matches!(work, Work::Notes)
    }

    /// The model's answer to `request`, with the memory tools. On a
    /// channel set to stream, with a model that streams, it is shown while
    /// it is written, through the live reply returned beside it (to be
    /// finished with the stored text); otherwise it comes whole, `None`.
    async fn answer(
        &self,
        message: &Inbound,
        request: ModelRequest,
        tools: Option<&MemoryTools>,
        limits: ToolLimits,
    ) -> (Result<Answer, ModelError>, Option<Box<dyn LiveReply + '_>>) {
        let typing = self.keep_typing(message);
        let tools = tools.map(|t| t as &dyn tools::ToolExecutor);
        let model = &*self.parts.model;
        let max_chars = self.parts.limits.max_reply_chars;
        let hold = self.parts.streaming.get(&message.channel).filter(|_| model.streams());
        let channel = self.channels.get(&message.channel).zip(hold);
        let Some((channel, &hold)) = channel else {
            let answer = tools::answer(model, request, tools, limits).await.map(|reply| Answer {
                text: crate::reply_limit::cut(&reply.text, max_chars).into_owned(),
                usage: reply.usage,
                tool_usage: reply.tool_usage,
                broken: None,
            });
            return (answer, None);
        };
        let mut live = channel.live(Outbound::reply(message, ""));
        let showing = crate::streaming::Showing { max_chars, hold };
        let streamed = crate::streaming::answer(model, request, tools, limits, &mut *live, typing, showing).await;
        let answer = streamed.map(|s| {
            if let (Some(first), Some(shown)) = (s.first_text, s.first_shown) {
                crate::ops::metrics::metrics().first_text(&message.channel, shown.saturating_duration_since(first));
            }
            Answer {
                text: s.text,
                usage: s.usage,
                tool_usage: s.tool_usage,
                broken: s.broken,
            }
        });
        (answer, Some(live))
    }

    /// Shows `text` as the answer: the last state of the live reply that
    /// showed it growing, or one reply.
    async fn show(&self, to: &Inbound, live: Option<Box<dyn LiveReply + '_>>, text: &str) {
        let Some(live) = live else {
            return self.reply(to, text).await;
        };
        if let Err(e) = live.finish(text).await {
            tracing::warn!(channel = %to.channel, msg_id = %to.msg_id, error = %e, "reply not delivered");
        }
    }

    /// The context for this user only: profile, rolling summary, what recall
    /// found in their older history (and `_shared` notes) and the recent
    /// messages not yet folded, without the message being answered, from
    /// the turn's `view`.
    async fn request_for(
        &self,
        memory: &ChannelMemory,
        mine: &mut dyn UserMemory,
        message: &Inbound,
        view: ContextView,
        zone: chrono_tz::Tz,
    ) -> ModelRequest {
        let config = memory.store.config();
        let recalled = if config.recall.enabled {
            match mine.recall(&message.text, &view.recent, config.recall.max_tokens).await {
                Ok(found) => found.render(),
                Err(e) => {
                    // The turn goes on without recall; the append after
                    // the answer tells whether the store is gone.
                    tracing::warn!(channel = %message.channel, user = %crate::ops::turn_log::user_hash(&message.user_id), error = %e, "recall failed; answering without it");
                    None
                }
            }
        } else {
            None
        };
        // In a shared group, who said what (the memory is the group's).
        let (view, question) = match mine.user().is_group() {
            true => (
                group::spoken(view),
                group::said_by(message.user_name.as_deref(), &message.text),
            ),
            false => (view, message.text.clone()),
        };
        let mut context = context::build(&ContextInput {
            system_prompt: &self.parts.system_prompt,
            profile: view.profile.as_deref(),
            summary: view.summary.as_deref(),
            recalled: recalled.as_deref(),
            recent: &view.recent,
            answering: Some(&message.msg_id),
            max_tokens: config.context.max_tokens,
        });
        if self.parts.max_tool_rounds > 0 {
            context.system.push_str(&Pipeline::clock_line(zone, self.now()));
        }
        if mine.user().is_group() {
            context.system.push_str(group::GROUP_NOTE);
        }
        ModelRequest::new(context, question)
    }

    /// The memory tools of this turn, built for this caller only (the
    /// scope is never a tool argument), and what the tool loop may spend:
    /// `model.maxToolRounds`, and tool results within what the context
    /// left of `context.maxTokens` (chars/4). The turn's memory is lent
    /// to them (given back by [`MemoryTools::into_memory`]).
    fn memory_tools(
        &self,
        memory: &ChannelMemory,
        mine: Box<dyn UserMemory>,
        request: &ModelRequest,
    ) -> (MemoryTools, ToolLimits) {
        let config = memory.store.config();
        let used = request.context.estimated_tokens() + request.message.len().div_ceil(4);
        let limits = ToolLimits {
            max_rounds: self.parts.max_tool_rounds,
            budget_chars: config.context.max_tokens.saturating_sub(used) * 4,
        };
        let tools = MemoryTools::for_caller(mine, memory.store.channel(), config.ltm.max_profile_chars, Utc::now());
        (tools, limits)
    }

    /// Starts the fold the counters say is due, before the reply goes out:
    /// once a user has seen the answer, the fold it made due is already
    /// among the background work [`Pipeline::wait_background`] waits for.
    async fn fold_if_due(&self, memory: &ChannelMemory, user: &SafeName, due: bool, zone: chrono_tz::Tz) {
        if due {
            self.compact_later(memory, user.clone(), zone).await;
        }
    }

    /// What the store derives from the user's new messages in the
    /// background (`MemoryStore::after_answer`), among the background work.
    async fn after_answer(&self, memory: &ChannelMemory, user: &SafeName) {
        let Some(work) = memory.store.after_answer(user) else {
            return;
        };
        let mut set = self.background.lock().await;
        while set.try_join_next().is_some() {}
        set.spawn(work);
    }

    /// Folds the user's older messages in the background: the counters said
    /// a fold is due. The summarizer's tokens are the user's (`zone`: their day).
    async fn compact_later(&self, memory: &ChannelMemory, user: SafeName, zone: chrono_tz::Tz) {
        let store = memory.store.clone();
        let days = self.days(zone, self.now());
        let mut set = self.background.lock().await;
        // Reap finished ones so the set stays small on a long-running bot.
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            let channel = store.channel();
            let (folded, spent) = crate::model::metered(store.fold(&user, Utc::now())).await;
            budget::spend(&*store, Some(&user), days, Purpose::Summary, Some(spent)).await;
            match folded {
                Ok(Some(label)) => crate::ops::metrics::metrics().compaction(channel, label),
                Ok(None) => {}
                Err(e) => {
                    crate::ops::metrics::metrics().compaction(channel, "failed");
                    tracing::warn!(channel, user = %user.log_id(), error = %e, "compaction failed; will retry at the next turn");
                }
            }
        });
    }
}

/// Stores the record that settles a question (its answer or a notice);
/// whether a fold is due after.
async fn store_reply(mine: &mut dyn UserMemory, reply: &Record) -> Result<Due, TurnError> {
    let appended = mine.append(reply, Utc::now()).await?;
    Ok(Due {
        fold: appended.fold_due,
        over_bound: appended.over_bound,
    })
}

/// Whether a fold is due after an append, and whether the hard bound asks.
#[derive(Clone, Copy, Default)]
struct Due {
    fold: bool,
    over_bound: bool,
}

impl Due {
    /// Whether to fold now: not while the user's next questions wait,
    /// stored, behind this turn (the fold would summarize and archive
    /// questions not answered yet, out of a restart's sight), unless the
    /// hard bound (`stm.maxMessages`) asks; the queue's last turn folds.
    fn now(self, backlog: &Backlog) -> bool {
        self.fold && (self.over_bound || backlog.behind() == 0)
    }

    /// Due after either of two appends.
    fn or(self, other: Due) -> Due {
        Due {
            fold: self.fold || other.fold,
            over_bound: self.over_bound || other.over_bound,
        }
    }
}

/// A model answer, ready to store and show.
struct Answer {
    /// Cut to `limits.maxReplyChars`; marked as cut if the stream broke.
    text: String,
    /// The first model call's tokens, and the later calls' of its tool
    /// rounds (counted as `tools`).
    usage: Option<Usage>,
    tool_usage: Option<Usage>,
    /// What cut a streamed answer short (the text says so too).
    broken: Option<ModelError>,
}

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, thiserror::Error)]
enum TurnError {
    #[error("the memory store failed: {0}")]
    Store(#[from] StoreError),
    #[error("the broker is shutting down")]
    Closed,
}
