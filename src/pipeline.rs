//! The message path of DESIGN §2, for one message of one user: access
//! check and abuse limits (`crate::access`: refused → a short reply at most,
//! nothing stored; rules on Postgres that could not be read → nothing said
//! or stored, and the message left for the platform to deliver again) → `/session` command → answered from memory, no model;
//! otherwise append to STM (durable) and to the recall index → recall the
//! user's older history → build context → model, with the caller's memory
//! tools (`model::tools::answer`, bounded by `model.maxToolRounds`) →
//! append reply (and index it) → send (split for the platform) →
//! compaction in the background. With `store.kind: postgres` the same
//! steps run on the database (`mnemo_pg`), under the user's turn lock taken
//! after the access check. On a channel set to stream (and a model
//! that streams) the answer is shown while the model writes it
//! (`crate::streaming`) and the send step shows the stored final text.
//!
//! Invariants: the user's message is in STM before the model is asked, so a
//! model failure or a shutdown never loses it; the message goes to the model
//! once, as the user turn; only this user's memory is read for the context.

use crate::access::{Admission, Gate};
use crate::app::{AppParts, ChannelMemory};
use crate::config::LimitsConfig;
use crate::dispatch::{Backlog, TurnHandler};
use crate::memory_tools::MemoryTools;
use crate::model::tools::{self, ToolLimits};
use crate::model::{ModelError, ModelRequest, Usage};
use crate::ops::turn_log::{Outcome, Phase, TurnTrace};
use async_trait::async_trait;
use chrono::Utc;
use mnemo_channels::{Channel, Inbound, LiveReply, Outbound, OutboundBody};
use mnemo_sessions::commands::SessionCommand;
use mnemo_sessions::context::{self, ContextInput};
use mnemo_sessions::recall::TurnQuery;
use mnemo_sessions::session::{ContextView, SessionError};
use mnemo_sessions::{Record, Role, SafeName, commands, compaction, pending};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
        Pipeline {
            parts,
            memories,
            channels,
            model_slots: Semaphore::new(slots),
            access,
            draining: AtomicBool::new(false),
            background: tokio::sync::Mutex::new(tokio::task::JoinSet::new()),
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
        let Taken { message, user, work } = taken;
        // No fold while the user's next questions wait, stored, behind this
        // one: it would summarize (and archive) questions not answered yet,
        // out of a restart's sight; the last turn of the queue folds, or
        // the hard bound (`stm.maxMessages`) does.
        let fold_due = |due: Due| due.fold && (due.over_bound || backlog.behind() == 0);
        // On Postgres the user's turn lock is held from here to the end of
        // the turn, so another broker never interleaves this user's turns.
        let mut pg = match &memory.pg {
            Some(channel) => Some(channel.begin_turn(&user).await.map_err(TurnError::Database)?),
            None => None,
        };
        match work {
            Work::Command(command) => return self.command(memory, pg.as_mut(), &user, &message, &command).await,
            Work::GiveUp { earlier } => {
                return self
                    .give_up(memory, pg.as_mut(), &user, &message, &earlier, backlog)
                    .await;
            }
            Work::Question | Work::Recovered => {}
        }
        let keep = recent_keep(memory, &self.parts.limits);
        let view = match pg.as_mut() {
            Some(turn) => {
                // Answered by another broker (or an earlier run) already.
                if turn.is_settled(&message.msg_id).await.map_err(TurnError::Database)? {
                    return Ok(Outcome::Duplicate);
                }
                turn.view(keep).await.map_err(TurnError::Database)?
            }
            None => memory
                .sessions
                .turn_view(&user, keep, Utc::now())
                .await
                .map_err(TurnError::Store)?,
        };
        if memory.pg.is_none() && pending::is_settled(&view.recent, &message.msg_id) {
            return Ok(Outcome::Duplicate);
        }
        // One extra message because the one being answered is in the log too.
        let view = answering(view, &message.msg_id, memory.config.stm.context_window + 1);

        if self.draining.load(Ordering::SeqCst) {
            self.reply(&message, SAVED_WHILE_STOPPING).await;
            return Ok(Outcome::Saved);
        }

        let request = self.request_for(memory, pg.as_mut(), &user, &message, view).await;
        trace.lap(Phase::Memory);
        let (tools, limits) = self.memory_tools(memory, &user, &request, &mut pg);
        let (answer, live) = {
            let _slot = self.model_slots.acquire().await.map_err(|_| TurnError::Closed)?;
            self.answer(&message, request, tools.as_ref(), limits).await
        };
        // The database turn the tools borrowed (its lock held throughout).
        if let Some(turn) = tools.and_then(MemoryTools::into_turn) {
            pg = Some(turn);
        }
        trace.lap(Phase::Model);
        // What settles the question: the answer, or the failure notice the
        // user is shown instead (so a restart does not ask again).
        let (text, usage, broken, failed) = match answer {
            Ok(answer) => (answer.text, answer.usage, answer.broken, None),
            Err(e) => (e.user_message().to_string(), None, None, Some(e)),
        };
        trace.tokens(usage);
        let reply = reply_record(&message, text);
        // Shown first, stored second: a crash between the two (the store's
        // own instant) answers the question again at the next start; the
        // other order lost answers stored but never shown (a streamed
        // answer's last edit waits up to a second for the platform's pace).
        self.show(&message, live, &reply.text).await;
        trace.lap(Phase::Send);
        let due = match self.store_reply(memory, pg.as_mut(), &user, &reply).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(channel = %message.channel, user = %user, msg_id = %message.msg_id, error = %e, "the answer was shown but could not be stored; the next start answers the question again");
                return Ok(Outcome::Failed);
            }
        };
        trace.lap(Phase::Memory);
        self.fold_if_due(memory, &user, fold_due(due)).await;
        if failed.is_none() {
            self.embed_later(memory, &user).await;
        }
        let outcome = match (failed, broken) {
            (Some(e), _) => {
                tracing::warn!(channel = %message.channel, user = %user, error = %e, "model call failed; message kept in STM");
                Outcome::ModelFailed
            }
            (None, Some(e)) => {
                tracing::warn!(channel = %message.channel, user = %user, error = %e, "model stream broke; the answer so far is kept, marked as cut");
                self.reply(&message, e.user_message()).await;
                Outcome::ModelFailed
            }
            (None, None) => Outcome::Answered,
        };
        Ok(outcome)
    }

    /// Stores the record that settles a question (its answer or a notice)
    /// and indexes it; whether a fold is due after.
    async fn store_reply(
        &self,
        memory: &ChannelMemory,
        pg: Option<&mut mnemo_pg::PgTurn>,
        user: &SafeName,
        reply: &Record,
    ) -> Result<Due, TurnError> {
        Ok(match pg {
            Some(turn) => {
                let appended = turn.append(reply, Utc::now()).await.map_err(TurnError::Database)?;
                Due {
                    fold: appended.fold_due,
                    over_bound: appended.over_bound,
                }
            }
            None => {
                let appended = memory
                    .sessions
                    .append(user, reply, Utc::now())
                    .await
                    .map_err(TurnError::Store)?;
                memory.index(user, reply).await;
                Due {
                    fold: appended.fold_due,
                    over_bound: appended.over_bound,
                }
            }
        })
    }

    /// A `/session` command, answered from memory in its turn (after the
    /// user's earlier questions), never stored.
    async fn command(
        &self,
        memory: &ChannelMemory,
        pg: Option<&mut mnemo_pg::PgTurn>,
        user: &SafeName,
        message: &Inbound,
        command: &SessionCommand,
    ) -> Result<Outcome, TurnError> {
        let caller = commands::Caller {
            user,
            display_name: message.user_name.as_deref(),
            max_profile_chars: memory.config.ltm.max_profile_chars,
        };
        let reply = match pg {
            Some(turn) => crate::pg_session::answer(memory, turn, command, Utc::now()).await,
            None => {
                let reply = commands::execute(&memory.stm, caller, command, Utc::now()).await;
                // A command may have changed the files (clear, forget, …).
                memory.sessions.forget(user).await;
                reply
            }
        };
        let out = match reply.export {
            Some(path) => Outbound::file(message, path, reply.text),
            None => Outbound::reply(message, reply.text),
        };
        // DESIGN §5: memory asked for in a group reaches only the asker.
        let out = if command.reveals_memory() {
            out.privately(message)
        } else {
            out
        };
        self.send(out).await;
        Ok(Outcome::Command)
    }

    /// Questions found unanswered and too old to answer now: `message`
    /// the last of them, `earlier` the ids of the others. The user is told
    /// once, in one message, and that notice is stored as the answer of
    /// each (the ones nothing settled meanwhile), before it is sent: a
    /// crash in between costs the notice, never sends it twice.
    async fn give_up(
        &self,
        memory: &ChannelMemory,
        mut pg: Option<&mut mnemo_pg::PgTurn>,
        user: &SafeName,
        message: &Inbound,
        earlier: &[String],
        backlog: &Backlog,
    ) -> Result<Outcome, TurnError> {
        let mut open = Vec::new();
        for msg_id in earlier.iter().chain(std::iter::once(&message.msg_id)) {
            let settled = match pg.as_deref_mut() {
                Some(turn) => turn.is_settled(msg_id).await.map_err(TurnError::Database)?,
                None => false,
            };
            if !settled {
                open.push(msg_id.clone());
            }
        }
        if open.is_empty() {
            return Ok(Outcome::Duplicate);
        }
        let text = stale_notice(open.len(), message.ts);
        let mut due = Due::default();
        for msg_id in &open {
            let question = Inbound {
                msg_id: msg_id.clone(),
                ..message.clone()
            };
            let stored = self
                .store_reply(memory, pg.as_deref_mut(), user, &reply_record(&question, text.clone()))
                .await?;
            due = Due {
                fold: due.fold || stored.fold,
                over_bound: due.over_bound || stored.over_bound,
            };
            tracing::info!(channel = %message.channel, user = %user, msg_id = %msg_id, "recovery: a question too old to answer is given up; the user is told");
        }
        crate::ops::metrics::metrics().recovered(&message.channel, "stale", open.len());
        self.fold_if_due(memory, user, due.fold && (due.over_bound || backlog.behind() == 0))
            .await;
        self.reply(message, &text).await;
        Ok(Outcome::GaveUp)
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
        let channel = self
            .channels
            .get(&message.channel)
            .filter(|_| model.streams() && self.parts.streaming.contains(&message.channel));
        let Some(channel) = channel else {
            let answer = tools::answer(model, request, tools, limits).await.map(|reply| Answer {
                text: crate::reply_limit::cut(&reply.text, max_chars).into_owned(),
                usage: reply.usage,
                broken: None,
            });
            return (answer, None);
        };
        let mut live = channel.live(Outbound::reply(message, ""));
        let streamed = crate::streaming::answer(model, request, tools, limits, &mut *live, typing, max_chars).await;
        let answer = streamed.map(|s| {
            if let (Some(first), Some(shown)) = (s.first_text, s.first_shown) {
                crate::ops::metrics::metrics().first_text(&message.channel, shown.saturating_duration_since(first));
            }
            Answer {
                text: s.text,
                usage: s.usage,
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
    /// the session state in memory (`view`, read with the append: no
    /// whole-file read).
    async fn request_for(
        &self,
        memory: &ChannelMemory,
        pg: Option<&mut mnemo_pg::PgTurn>,
        user: &SafeName,
        message: &Inbound,
        view: ContextView,
    ) -> ModelRequest {
        let recall = &memory.config.recall;
        let recalled = match (recall.enabled, pg) {
            (false, _) => None,
            (true, Some(turn)) => {
                // The question's vector from the channel's embedder (the
                // same `recall.embeddings` as on the files), when set.
                let vector = memory.recall.query_vector(&message.text).await;
                let model = memory.recall.embedder().map(|(e, _)| e.model().to_string());
                let asked = match (&model, &vector) {
                    (Some(model), Some(vector)) => Some((model.as_str(), vector.as_slice())),
                    _ => None,
                };
                match turn.recall(&message.text, &view.recent, recall.max_tokens, asked).await {
                    Ok(found) => found.render(),
                    Err(e) => {
                        // The turn goes on without recall; the append after
                        // the answer tells whether the database is gone.
                        tracing::warn!(user = %user, error = %e, "recall failed; answering without it");
                        None
                    }
                }
            }
            (true, None) => {
                let query = TurnQuery {
                    message: &message.text,
                    recent: &view.recent,
                    max_tokens: recall.max_tokens,
                };
                memory.recall.for_turn_async(user, &query).await.render()
            }
        };
        let context = context::build(&ContextInput {
            system_prompt: &self.parts.system_prompt,
            profile: view.profile.as_deref(),
            summary: view.summary.as_deref(),
            recalled: recalled.as_deref(),
            recent: &view.recent,
            answering: Some(&message.msg_id),
            max_tokens: memory.config.context.max_tokens,
        });
        ModelRequest::new(context, message.text.clone())
    }

    /// The memory tools of this turn, built for this caller only (the
    /// scope is never a tool argument), and what the tool loop may spend:
    /// `model.maxToolRounds`, and tool results within what the context
    /// left of `context.maxTokens` (chars/4). On Postgres the tools act
    /// through the turn's connection: `pg` is lent to them (taken here,
    /// given back by [`MemoryTools::into_turn`]).
    fn memory_tools(
        &self,
        memory: &ChannelMemory,
        user: &SafeName,
        request: &ModelRequest,
        pg: &mut Option<mnemo_pg::PgTurn>,
    ) -> (Option<MemoryTools>, ToolLimits) {
        let used = request.context.estimated_tokens() + request.message.len().div_ceil(4);
        let limits = ToolLimits {
            max_rounds: self.parts.max_tool_rounds,
            budget_chars: memory.config.context.max_tokens.saturating_sub(used) * 4,
        };
        let tools = match pg.take() {
            Some(turn) => MemoryTools::on_database(memory, turn, Utc::now()),
            None => MemoryTools::for_caller(memory, user, Utc::now()),
        };
        (Some(tools), limits)
    }

    /// Starts the fold the counters say is due, before the reply goes out:
    /// once a user has seen the answer, the fold it made due is already
    /// among the background work [`Pipeline::wait_background`] waits for.
    async fn fold_if_due(&self, memory: &ChannelMemory, user: &SafeName, due: bool) {
        if due {
            self.compact_later(memory, user.clone()).await;
        }
    }

    /// On Postgres with `recall.embeddings` and pgvector: the vectors of
    /// the user's new messages, computed and stored in the background
    /// (`mnemo_pg::vectors::fill`: one fill per user at a time, picking up
    /// whatever has none yet). On the files, indexing does it.
    async fn embed_later(&self, memory: &ChannelMemory, user: &SafeName) {
        let (Some(pg), Some((embedder, _))) = (memory.pg.clone(), memory.recall.embedder()) else {
            return;
        };
        let user = user.clone();
        let mut set = self.background.lock().await;
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            if let Err(e) = mnemo_pg::vectors::fill(&pg, &user, embedder.as_ref()).await {
                tracing::warn!(user = %user, error = %e, "storing message vectors failed; filled at a later turn");
            }
        });
    }

    /// Folds the user's older messages in the background: the counters said
    /// a fold is due, and its file work runs on the blocking pool.
    async fn compact_later(&self, memory: &ChannelMemory, user: SafeName) {
        let sessions = memory.sessions.clone();
        let channel = memory.layout.channel().to_string();
        let mut set = self.background.lock().await;
        // Reap finished ones so the set stays small on a long-running bot.
        while set.try_join_next().is_some() {}
        if let Some(pg) = memory.pg.clone() {
            set.spawn(async move {
                let result = pg.compact(&user, Utc::now()).await;
                match &result {
                    Ok(outcome) => {
                        if let Some(label) = outcome.label() {
                            crate::ops::metrics::metrics().compaction(&channel, label);
                        }
                    }
                    Err(e) => {
                        crate::ops::metrics::metrics().compaction(&channel, "failed");
                        tracing::warn!(user = %user, error = %e, "compaction failed; will retry at the next turn");
                    }
                }
            });
            return;
        }
        set.spawn(async move {
            let result = sessions.compact(&user, Utc::now()).await;
            if let Some(outcome) = compaction_label(&result) {
                crate::ops::metrics::metrics().compaction(&channel, outcome);
            }
            if let Err(e) = result {
                tracing::warn!(user = %user, error = %e, "compaction failed; will retry at the next turn");
            }
        });
    }
}

/// The `outcome` label of a compaction run; `None` when there was nothing
/// to do (not counted).
fn compaction_label(
    result: &Result<compaction::CompactionOutcome, compaction::CompactionError>,
) -> Option<&'static str> {
    use compaction::CompactionOutcome as C;
    Some(match result {
        Ok(C::NotNeeded | C::AlreadyRunning) => return None,
        Ok(C::Resumed { .. }) => "resumed",
        Ok(C::Compacted { .. }) => "compacted",
        Ok(C::Fallback { .. }) => "fallback",
        Ok(C::SlidingWindow { .. }) => "sliding_window",
        Ok(C::SummarizerFailed { .. }) => "summarizer_failed",
        Ok(C::Superseded) => "superseded",
        Err(_) => "failed",
    })
}

/// Whether a fold is due after an append, and whether the hard bound asks.
#[derive(Clone, Copy, Default)]
struct Due {
    fold: bool,
    over_bound: bool,
}

/// A model answer, ready to store and show.
struct Answer {
    /// Cut to `limits.maxReplyChars`; marked as cut if the stream broke.
    text: String,
    usage: Option<Usage>,
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
    #[error("could not save to short-term memory: {0}")]
    Store(SessionError),
    #[error("the database store failed: {0}")]
    Database(mnemo_pg::PgError),
    #[error("the broker is shutting down")]
    Closed,
}

/// A message taken in and waiting for its turn in its user's queue.
pub struct Taken {
    message: Inbound,
    /// Whose memory it is: the name the store keys the user by.
    user: SafeName,
    work: Work,
}

/// What a taken message's turn does.
enum Work {
    /// A question stored on intake: the model answers it.
    Question,
    /// A `/session` command: answered in its turn, after the user's
    /// earlier questions; never stored, and its platform told it was
    /// taken only once it is answered.
    Command(SessionCommand),
    /// A question found stored and unanswered at start (or left by a dead
    /// broker): answered like a question, unless something settled it.
    Recovered,
    /// The last of the questions found unanswered and older than
    /// `limits.answerStaleAfterMinutes` (`earlier`: the others' ids): its
    /// user is told once.
    GiveUp { earlier: Vec<String> },
}

impl Taken {
    /// The turn of a question found stored without its answer.
    pub(crate) fn recovered(message: Inbound, user: SafeName) -> Taken {
        Taken {
            message,
            user,
            work: Work::Recovered,
        }
    }

    /// The notice for stale questions: `last` the newest of them,
    /// `earlier` the others' ids.
    pub(crate) fn give_up(last: Inbound, user: SafeName, earlier: Vec<String>) -> Taken {
        Taken {
            message: last,
            user,
            work: Work::GiveUp { earlier },
        }
    }
}

/// How many of a user's newest records a turn reads, and the intake looks
/// through for a repeat: the context window, the message being answered,
/// and the questions that may wait behind it in the user's queue (stored
/// after it, left out of its context by [`answering`]).
fn recent_keep(memory: &ChannelMemory, limits: &LimitsConfig) -> usize {
    memory.config.stm.context_window + 1 + limits.user_queue_depth
}

/// `view` as the turn answering `msg_id` shows it to the model: without
/// the questions stored after it (not asked yet), the last `n` records.
fn answering(mut view: ContextView, msg_id: &str, n: usize) -> ContextView {
    let mut recent: Vec<_> = pending::before_answering(&view.recent, msg_id)
        .into_iter()
        .cloned()
        .collect();
    recent.drain(..recent.len().saturating_sub(n));
    view.recent = recent;
    view
}

/// The record that settles the question `to`: its answer or a notice.
fn reply_record(to: &Inbound, text: String) -> Record {
    Record {
        ts: Utc::now(),
        role: Role::Assistant,
        text,
        msg_id: pending::reply_id(&to.msg_id),
        channel: to.channel.clone(),
        thread_id: to.thread_id.clone(),
        chat_id: Some(to.chat_id.clone()),
        user_name: None,
    }
}

/// What a user is told of questions given up as stale (once).
fn stale_notice(count: usize, last: chrono::DateTime<Utc>) -> String {
    let when = last.format("%Y-%m-%d %H:%M UTC");
    if count == 1 {
        format!(
            "I was offline and did not answer your message of {when}. If you still need an answer, please ask again."
        )
    } else {
        format!(
            "I was offline and did not answer {count} of your messages (the last of {when}). If you still need answers, please ask again."
        )
    }
}

impl Pipeline {
    /// The whole path of one message at once: intake, then its turn (what
    /// the dispatcher does in two steps). For tests that drive the
    /// pipeline without a dispatcher.
    pub async fn handle(&self, message: Inbound) {
        if let Some(taken) = self.intake(message).await {
            TurnHandler::answer(self, taken, &Backlog::none()).await;
        }
    }

    /// Intake: the access check and abuse limits (DESIGN §2: a refused
    /// message is not stored, not sent to the model, and not logged with
    /// its text), then the message stored (durable) and indexed before it
    /// waits for its turn, and its platform told it is safe. A `/session`
    /// command waits unstored.
    async fn intake(&self, message: Inbound) -> Option<Taken> {
        let Some(memory) = self.memories.get(&message.channel) else {
            tracing::error!(channel = %message.channel, "message from a channel with no memory; dropped");
            let _ = self.settle(&message.channel, &message.msg_id, false);
            return None;
        };
        let user = SafeName::of(&message.user_id);
        let trace = TurnTrace::start(&message);
        match self.access.admit(&message, Utc::now()).await {
            Admission::Refused { reply } => {
                if let Some(text) = reply {
                    self.reply(&message, &text).await;
                }
                trace.finish(Outcome::Refused);
                // Refused on purpose and answered: not to be delivered again.
                self.settle(&message.channel, &message.msg_id, true);
                return None;
            }
            Admission::Proceed { greeting: Some(text) } => self.reply(&message, &text).await,
            Admission::Proceed { greeting: None } => {}
            // Nothing stored and nothing said (the sender may be a
            // stranger); not taken, so a platform that redelivers brings it
            // back once the database answers.
            Admission::Unavailable => {
                tracing::error!(channel = %message.channel, msg_id = %message.msg_id, "access rules could not be read; message not taken");
                trace.finish(Outcome::Failed);
                let _ = self.settle(&message.channel, &message.msg_id, false);
                return None;
            }
        }
        let bot_name = self.channels.get(&message.channel).and_then(|c| c.bot_name());
        if let Some(command) = commands::parse(&message.text, bot_name.as_deref()) {
            return Some(Taken {
                message,
                user,
                work: Work::Command(command),
            });
        }
        let record = Record {
            ts: message.ts,
            role: Role::User,
            text: message.text.clone(),
            msg_id: message.msg_id.clone(),
            channel: message.channel.clone(),
            thread_id: message.thread_id.clone(),
            chat_id: Some(message.chat_id.clone()),
            user_name: message.user_name.clone(),
        };
        let stored = match &memory.pg {
            // A repeat on Postgres may be a question a dead broker stored
            // and never answered: it is queued all the same, and its turn,
            // under the user's lock, skips it if it is settled.
            Some(channel) => channel
                .intake(&user, &record, Utc::now())
                .await
                .map(|_| true)
                .map_err(TurnError::Database),
            None => {
                let keep = recent_keep(memory, &self.parts.limits);
                match memory.sessions.append_new(&user, &record, Utc::now(), keep).await {
                    Ok(Some(_)) => {
                        memory.index(&user, &record).await;
                        Ok(true)
                    }
                    // A repeat: answered already, queued, or found at start.
                    Ok(None) => Ok(false),
                    Err(e) => Err(TurnError::Store(e)),
                }
            }
        };
        match stored {
            Ok(new) => {
                // Stored: the platform may stop delivering it.
                self.settle(&message.channel, &message.msg_id, true);
                if !new {
                    tracing::info!(channel = %message.channel, msg_id = %message.msg_id, "a repeated delivery of a stored message; not queued again");
                    trace.finish(Outcome::Duplicate);
                    return None;
                }
                Some(Taken {
                    message,
                    user,
                    work: Work::Question,
                })
            }
            Err(e) => {
                tracing::error!(channel = %message.channel, msg_id = %message.msg_id, error = %e, "message could not be stored");
                trace.finish(Outcome::Failed);
                // The platform brings it back: asking the user to send it
                // again would only double it (and repeat at every retry).
                if !self.settle(&message.channel, &message.msg_id, false) {
                    self.reply(&message, NOT_STORED).await;
                }
                None
            }
        }
    }
}

pub const NOT_STORED: &str =
    "Sorry — I couldn't save your message, so I didn't answer it. Please try again in a moment.";
pub const NOT_ANSWERED: &str = "Sorry — I couldn't answer your message just now. Please try again in a moment.";

#[async_trait]
impl TurnHandler for Pipeline {
    type Taken = Taken;

    /// The user as the store names them: the same queue for a message
    /// that arrives and one found stored at start.
    fn queue_key(&self, message: &Inbound) -> String {
        SafeName::of(&message.user_id).as_str().to_string()
    }

    async fn take(&self, message: Inbound) -> Option<Taken> {
        self.intake(message).await
    }

    /// A command runs on the memory as the user's earlier messages left
    /// it, and before any later one is stored.
    fn holds_intake(&self, taken: &Taken) -> bool {
        matches!(taken.work, Work::Command(_))
    }

    async fn answer(&self, taken: Taken, backlog: &Backlog) {
        let Some(memory) = self.memories.get(&taken.message.channel) else {
            tracing::error!(channel = %taken.message.channel, "message from a channel with no memory; dropped");
            return;
        };
        let echo = taken.message.clone();
        let command = matches!(taken.work, Work::Command(_));
        let mut trace = TurnTrace::start(&echo);
        let outcome = self.turn(memory, taken, backlog, &mut trace).await;
        trace.finish(*outcome.as_ref().unwrap_or(&Outcome::Failed));
        // A command is done with once answered; one that failed is left for
        // the platform to deliver again. (A question was settled on intake.)
        let again = command && self.settle(&echo.channel, &echo.msg_id, outcome.is_ok());
        let Err(e) = outcome else { return };
        tracing::error!(channel = %echo.channel, msg_id = %echo.msg_id, error = %e, "turn failed");
        if again {
            return;
        }
        let text = match e {
            TurnError::Closed => SAVED_WHILE_STOPPING,
            // A stored question stays unanswered in the log: the next start
            // (or, on Postgres, another broker) answers it.
            TurnError::Store(_) | TurnError::Database(_) if !command => NOT_ANSWERED,
            TurnError::Store(_) | TurnError::Database(_) => NOT_STORED,
        };
        self.reply(&echo, text).await;
    }

    async fn overflow(&self, message: Inbound) {
        tracing::info!(channel = %message.channel, msg_id = %message.msg_id, "user queue full; message refused");
        crate::ops::metrics::metrics().refused(&message.channel, "queue_full");
        if self.access.tell_queue_full(&message).await {
            self.reply(&message, QUEUE_FULL).await;
        }
        // Refused on purpose, and the user was told: not to be delivered again.
        self.settle(&message.channel, &message.msg_id, true);
    }
}
