//! serenity's event handler for the Discord channel. READY tells the bot who
//! it is and registers `/session`; MESSAGE_CREATE and `/session` interactions
//! pass the [`sequencer`](super::sequencer) and, converted by
//! [`inbound`](super::inbound), reach the broker's inbox in Discord's order.
//! Logs ids and reasons only, never message text.

use super::inbound::{self, CHANNEL, Me};
use super::sequencer::Reorder;
use super::{Shared, commands};
use crate::Inbound;
use async_trait::async_trait;
use serenity::all::{
    Builder, Command, Context, CreateInteractionResponse, CreateInteractionResponseMessage, EventHandler, Interaction,
    Message, Ready,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// An event waiting for its turn: messages are converted only when they
/// leave, by which time READY has surely told us who we are.
enum Pending {
    Message(Box<Message>),
    Command(Box<Inbound>),
}

/// Feeds one inbox from one gateway connection. Drive it through serenity
/// (as [`crate::discord::DiscordChannel::receive`] does) or directly with
/// recorded events.
pub struct DiscordHandler {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<(u64, Pending)>,
    /// Set once `/session` is registered: a later READY (after the gateway
    /// re-identifies) does not register it again.
    registered: AtomicBool,
}

impl DiscordHandler {
    pub(crate) fn new(shared: Arc<Shared>, inbox: mpsc::Sender<Inbound>) -> Self {
        let (queue, events) = mpsc::unbounded_channel();
        tokio::spawn(deliver_in_order(shared.clone(), events, inbox));
        DiscordHandler {
            shared,
            queue,
            registered: AtomicBool::new(false),
        }
    }

    /// READY: remember who we are, then register `/session` — per guild
    /// when `guild_id` is set, else globally — on the first READY only. A
    /// failed registration is logged and retried at the next READY; messages
    /// work regardless.
    pub async fn on_ready(&self, ready: &Ready) {
        self.shared.set_me(Me {
            id: ready.user.id,
            name: ready.user.name.clone(),
        });
        self.shared.http.set_application_id(ready.application.id);
        tracing::info!(channel = CHANNEL, bot_id = %ready.user.id, guilds = ready.guilds.len(), "gateway ready");
        if self.registered.swap(true, Ordering::SeqCst) {
            return;
        }
        let http = &*self.shared.http;
        let registered = match self.shared.guild_id {
            Some(guild) => guild.set_commands(http, vec![commands::session()]).await,
            None => Command::set_global_commands(http, vec![commands::session()]).await,
        };
        let scope = self
            .shared
            .guild_id
            .map_or_else(|| "global".to_string(), |g| format!("guild {g}"));
        match registered {
            Ok(_) => tracing::info!(channel = CHANNEL, scope = %scope, "registered the /session command"),
            Err(e) => {
                self.registered.store(false, Ordering::SeqCst);
                tracing::warn!(
                    channel = CHANNEL,
                    scope = %scope,
                    reason = %self.shared.redact(&e.to_string(), None),
                    "could not register the /session command (needs the applications.commands scope); plain-text /session still works"
                );
            }
        }
    }

    /// MESSAGE_CREATE: queued for the inbox unless it is from a bot or
    /// a system message (see [`inbound::message`]).
    pub async fn on_message(&self, msg: Message) {
        let id = msg.id.get();
        self.enqueue(id, Pending::Message(Box::new(msg)));
    }

    /// INTERACTION_CREATE: a `/session` command is acknowledged at once
    /// (Discord allows 3 s; the answer may take longer), privately, then
    /// queued for the broker, whose reply edits the acknowledgement.
    pub async fn on_interaction(&self, interaction: Interaction) {
        let Interaction::Command(cmd) = interaction else { return };
        let Some(inbound) = inbound::command(&cmd) else {
            tracing::debug!(channel = CHANNEL, command = %cmd.data.name, "not our command");
            return;
        };
        let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new().ephemeral(true));
        if let Err(e) = defer.execute(&*self.shared.http, (cmd.id, &cmd.token)).await {
            // Without the acknowledgement the user already sees a failure;
            // running the command anyway (`clear all`!) would surprise them.
            tracing::warn!(
                channel = CHANNEL,
                interaction = %cmd.id,
                reason = %self.shared.redact(&e.to_string(), Some(&cmd.token)),
                "could not acknowledge /session; dropped"
            );
            return;
        }
        self.enqueue(cmd.id.get(), Pending::Command(Box::new(inbound)));
    }

    fn enqueue(&self, id: u64, event: Pending) {
        if self.queue.send((id, event)).is_err() {
            tracing::debug!(channel = CHANNEL, id, "event after the sequencer stopped; dropped");
        }
    }
}

/// The sequencer task: holds events briefly and hands them to the inbox in
/// id order. Ends when the handler is gone (after delivering what it holds)
/// or the broker stops taking messages.
async fn deliver_in_order(
    shared: Arc<Shared>,
    mut events: mpsc::UnboundedReceiver<(u64, Pending)>,
    inbox: mpsc::Sender<Inbound>,
) {
    let mut held = Reorder::default();
    loop {
        let deadline = held.next_deadline();
        tokio::select! {
            event = events.recv() => match event {
                Some((id, event)) => held.push(id, event, Instant::now()),
                None => {
                    hand_over(&shared, &inbox, held.drain()).await;
                    return;
                }
            },
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                if !hand_over(&shared, &inbox, held.due(Instant::now())).await {
                    return;
                }
            }
        }
    }
}

/// Converts and delivers `due`; false once the broker stopped taking messages.
async fn hand_over(shared: &Shared, inbox: &mpsc::Sender<Inbound>, due: Vec<Pending>) -> bool {
    for event in due {
        let Some(inbound) = convert(shared, event) else {
            continue;
        };
        if inbox.send(inbound).await.is_err() {
            tracing::debug!(channel = CHANNEL, "the broker stopped taking messages");
            return false;
        }
    }
    true
}

fn convert(shared: &Shared, event: Pending) -> Option<Inbound> {
    match event {
        Pending::Command(inbound) => Some(*inbound),
        Pending::Message(msg) => match inbound::message(&msg, shared.me().as_ref()) {
            Ok(inbound) => Some(inbound),
            Err(skip) => {
                tracing::debug!(channel = CHANNEL, message = %msg.id, reason = ?skip, "message ignored");
                None
            }
        },
    }
}

#[async_trait]
impl EventHandler for DiscordHandler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.shared.link.session();
        self.on_ready(&ready).await;
    }

    /// The gateway came back on the same session after a drop.
    async fn resume(&self, _ctx: Context, _event: serenity::model::event::ResumedEvent) {
        tracing::info!(channel = CHANNEL, "gateway session resumed");
        self.shared.link.session();
    }

    /// Connection changes of the (single) shard, for readiness: anything
    /// but connected (resuming, reconnecting, disconnected) is not ready;
    /// READY or RESUMED marks it connected again.
    async fn shard_stage_update(&self, _ctx: Context, event: serenity::gateway::ShardStageUpdateEvent) {
        if event.new != serenity::gateway::ConnectionStage::Connected {
            self.shared.link.down();
        }
    }

    async fn message(&self, _ctx: Context, msg: Message) {
        self.on_message(msg).await;
    }

    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        self.on_interaction(interaction).await;
    }
}
