//! The Slack channel (slack-morphism): Socket Mode by default, the Events
//! API over HTTP (signed requests) as the alternative. Turns DMs, mentions,
//! thread replies and the `/session` slash command into [`Inbound`], and
//! other channel messages into unaddressed ones for the access gate to judge
//! (`requireMention`); posts replies as mrkdwn in the message's thread,
//! through a "thinking…" placeholder that the answer replaces (and, while
//! the model writes it, grows into: `live.rs`).
//!
//! A message's delivery is acknowledged to Slack (the Socket Mode ack, the
//! Events API's 200) only once the broker has taken it ([`Channel::taken`]:
//! stored, or refused and answered), waiting at most 2.5 s (`receipts.rs`);
//! otherwise Slack delivers it again. Slash commands are acknowledged once
//! in the broker's inbox (`Shared::on_command` says why).
//!
//! Knows nothing of memory or of what to answer. Never logs message text,
//! tokens, the signing secret or a `response_url`: ids, counts and reasons.

mod events;
mod files;
mod http;
mod live;
mod receipts;
mod recent;
pub mod signature;
mod socket;
mod web;

use crate::{Channel, ChannelError, Inbound, Outbound, OutboundBody, Shutdown};
use async_trait::async_trait;
use events::{Decision, Identity, Memory};
use receipts::{Receipts, Redelivery, TAKE_WAIT};
use recent::RecentMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use web::{Web, WebError};

pub use crate::format::SLACK_MAX_CHARS;
use crate::format::{self, SlackMrkdwn};
use crate::retry::{Gave, RetryPolicy, Verdict};
pub use live::EMPTY_ANSWER;

/// What the placeholder says while the model works (mrkdwn italics).
pub const THINKING: &str = "_thinking…_";

/// Per-message facts kept for the reply; a reply comes within minutes.
const REMEMBERED_MESSAGES: usize = 1_024;

/// How the adapter receives Slack traffic.
#[derive(Clone, Debug)]
pub enum SlackMode {
    /// A websocket opened with the app-level token (`xapp-…`): no public URL.
    Socket { app_token: String },
    /// Slack POSTs events and slash commands to `listen` (paths
    /// [`EVENTS_PATH`] and [`COMMANDS_PATH`]), signed with the app's
    /// signing secret.
    Events { signing_secret: String, listen: SocketAddr },
}

pub use http::{COMMANDS_PATH, EVENTS_PATH};

/// Everything the Slack channel needs; secrets are values here, read by the
/// caller from the environment.
#[derive(Clone)]
pub struct SlackSettings {
    pub bot_token: String,
    pub mode: SlackMode,
    /// The Web API base including `/api` (GovSlack, a proxy, a test server);
    /// `None` is `https://slack.com/api`.
    pub api_url: Option<String>,
}

/// Why the Slack channel could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    #[error("slack: could not set up HTTPS (are the system's CA certificates installed?): {0}")]
    Tls(#[source] std::io::Error),
    #[error("slack: apiUrl `{0}` must start with http:// or https://")]
    ApiUrl(String),
}

pub struct SlackChannel {
    shared: Arc<Shared>,
    mode: SlackMode,
}

/// State shared by the receiving loop and the senders.
struct Shared {
    web: Web,
    /// Downloads of shared files, with the bot token.
    files: files::Files,
    /// Known after `auth.test` at the start of [`Channel::receive`].
    identity: Mutex<Option<Identity>>,
    memory: Mutex<Memory>,
    /// Deliveries waiting for the broker to take their message before they
    /// are acknowledged, and the messages it took.
    receipts: Receipts,
    /// The user who sent each recent message: ephemeral notes and exports
    /// go to that person, never to the whole channel.
    askers: Mutex<RecentMap<String>>,
    /// The "thinking…" post for each message being answered: the task that
    /// posts it (detached, so a cancelled typing refresh cannot lose its ts);
    /// `None` once answered, so a late refresh cannot post a second one.
    placeholders: Mutex<RecentMap<Option<JoinHandle<Option<String>>>>>,
    /// Where the Events API listener is bound, once it is.
    listening: watch::Sender<Option<SocketAddr>>,
    /// Up on Socket Mode `hello` or a bound Events API listener, down on a
    /// socket error: the broker's readiness reads it.
    link: crate::Link,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; if one ever did, the data is
    // still consistent (single inserts/removes), so keep serving.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves when the broker shuts down (or can no longer say so).
async fn stopped(shutdown: &mut Shutdown) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Retries of a start-up call while Slack cannot be reached: 5, after
/// about 0.5 s, 1 s, 2 s, ….
const STARTUP_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 5,
    base_delay: std::time::Duration::from_millis(500),
    max_delay: std::time::Duration::from_secs(16),
    max_retry_after: std::time::Duration::from_secs(60),
};

/// Runs a start-up call (`auth.test`, the app token check). A refusal from
/// Slack (bad token, missing scope) is final; network trouble or a 5xx is
/// waited out a little, since Slack or the network may be briefly down when
/// the bot starts. `None` if the broker shut down meanwhile.
async fn at_startup<T, F, Fut>(shutdown: &mut Shutdown, call: F) -> Result<Option<T>, ChannelError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, WebError>>,
{
    let judge = |e: &WebError| {
        if e.code.is_some() {
            Verdict::Fail
        } else {
            Verdict::Retry(None)
        }
    };
    match STARTUP_RETRY.run("slack start-up", Some(shutdown), judge, call).await {
        Ok(value) => Ok(Some(value)),
        Err(Gave::Stopped(_)) => Ok(None),
        Err(Gave::Up(e)) => Err(ChannelError::Receive {
            channel: "slack".into(),
            reason: e.to_string(),
        }),
    }
}

impl SlackChannel {
    pub fn new(settings: SlackSettings) -> Result<Self, SlackError> {
        if let Some(url) = &settings.api_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(SlackError::ApiUrl(url.clone()));
        }
        let connector = web::connector(settings.api_url.as_deref()).map_err(SlackError::Tls)?;
        Ok(SlackChannel {
            shared: Arc::new(Shared {
                web: Web::new(connector, &settings.bot_token),
                files: files::Files::new(&settings.bot_token, settings.api_url.as_deref()),
                identity: Mutex::new(None),
                memory: Mutex::new(Memory::default()),
                receipts: Receipts::new(),
                askers: Mutex::new(RecentMap::new(REMEMBERED_MESSAGES)),
                placeholders: Mutex::new(RecentMap::new(REMEMBERED_MESSAGES)),
                listening: watch::channel(None).0,
                link: crate::Link::default(),
            }),
            mode: settings.mode,
        })
    }

    /// The address the Events API listener is bound to (useful with a `:0`
    /// port): waits until [`Channel::receive`] has bound it; `None` at once
    /// if the channel is not in events mode.
    pub async fn listening_on(&self) -> Option<SocketAddr> {
        if !matches!(self.mode, SlackMode::Events { .. }) {
            return None;
        }
        let mut rx = self.shared.listening.subscribe();
        rx.wait_for(Option::is_some).await.ok().and_then(|a| *a)
    }
}

impl Shared {
    fn identity(&self) -> Identity {
        lock(&self.identity).clone().unwrap_or(Identity {
            user_id: String::new(),
            name: None,
        })
    }

    /// Hands an event's message to the broker. True when the delivery may
    /// be acknowledged: nothing in it for the broker, or its message taken
    /// (waited for at most [`TAKE_WAIT`]); false leaves it to Slack to
    /// deliver again.
    async fn on_event(
        &self,
        cb: &slack_morphism::prelude::SlackPushEventCallback,
        redelivery: Redelivery,
        inbox: &mpsc::Sender<Inbound>,
    ) -> bool {
        let me = self.identity();
        let decision = events::on_event(cb, &me, &mut lock(&self.memory));
        match decision {
            Decision::Ignore(reason) => {
                tracing::debug!(reason, "slack: event not for the broker");
                true
            }
            Decision::Deliver(message) => {
                self.remember_asker(&message);
                self.receipts.deliver(*message, redelivery, inbox, TAKE_WAIT).await
            }
        }
    }

    /// Hands a slash command to the broker; true once it is in the inbox.
    /// Not held until taken, as messages are: Slack wants the command's ack
    /// within 3 s while its answer waits behind the asker's turn in
    /// progress, and a command is not memory: one lost in a crash is typed
    /// again.
    async fn on_command(&self, ev: &slack_morphism::prelude::SlackCommandEvent, inbox: &mpsc::Sender<Inbound>) -> bool {
        let decision = events::on_command(ev, &mut lock(&self.memory));
        match decision {
            Decision::Ignore(reason) => {
                tracing::debug!(reason, "slack: command not for the broker");
                true
            }
            Decision::Deliver(message) => {
                self.remember_asker(&message);
                inbox.send(*message).await.is_ok()
            }
        }
    }

    fn remember_asker(&self, message: &Inbound) {
        lock(&self.askers).insert(&message.msg_id, message.user_id.clone());
        tracing::debug!(msg_id = %message.msg_id, "slack: message to the broker");
    }

    /// The placeholder's ts for `reply_to`, once its post has finished.
    async fn take_placeholder(&self, reply_to: Option<&str>) -> Option<String> {
        let reply_to = reply_to?;
        let task = {
            let mut placeholders = lock(&self.placeholders);
            let task = placeholders.take(reply_to).flatten();
            placeholders.insert(reply_to, None);
            task
        }?;
        task.await.ok().flatten()
    }

    /// Who a private answer is for: the user it names, else the asker of
    /// the message it answers.
    fn recipient(&self, out: &Outbound) -> Option<String> {
        out.private_to
            .clone()
            .or_else(|| lock(&self.askers).get(out.reply_to.as_deref()?).cloned())
    }

    async fn send_text(&self, out: &Outbound, text: &str) -> Result<(), WebError> {
        let messages: Vec<String> = format::to_chunks(&SlackMrkdwn, text)
            .into_iter()
            .map(|c| c.text)
            .collect();
        let placeholder = self.take_placeholder(out.reply_to.as_deref()).await;
        let thread = out.thread_id.as_deref();
        if let Some(url) = &out.interaction {
            self.remove(&out.chat_id, placeholder).await;
            for m in &messages {
                self.web.respond(url, m).await?;
            }
            return Ok(());
        }
        if out.ephemeral {
            self.remove(&out.chat_id, placeholder).await;
            let user = self.recipient(out).ok_or_else(unknown_asker)?;
            for m in &messages {
                self.web.post_ephemeral(&out.chat_id, &user, thread, m).await?;
            }
            return Ok(());
        }
        match (placeholder, messages.as_slice()) {
            (Some(ts), [only]) => {
                if let Err(e) = self.web.update(&out.chat_id, &ts, only).await {
                    tracing::warn!(error = %e, "slack: placeholder not updated; posting the answer instead");
                    self.web.post(&out.chat_id, thread, only).await?;
                    self.remove(&out.chat_id, Some(ts)).await;
                }
                Ok(())
            }
            (placeholder, _) => {
                // A split answer reads best as consecutive messages, so the
                // placeholder goes rather than holding only the first part.
                self.remove(&out.chat_id, placeholder).await;
                for m in &messages {
                    self.web.post(&out.chat_id, thread, m).await?;
                }
                Ok(())
            }
        }
    }

    /// Files (a `/session export`) are personal: they go to the asker's DM
    /// with the bot, with a short note where they were asked for.
    async fn send_file(&self, out: &Outbound, path: &Path, caption: &str) -> Result<(), WebError> {
        let placeholder = self.take_placeholder(out.reply_to.as_deref()).await;
        self.remove(&out.chat_id, placeholder).await;
        let caption = format::render(&SlackMrkdwn, caption);
        let in_bot_dm = out.chat_id.starts_with('D') && out.interaction.is_none();
        if in_bot_dm {
            return self
                .web
                .upload(&out.chat_id, out.thread_id.as_deref(), path, &caption)
                .await;
        }
        let user = self.recipient(out).ok_or_else(unknown_asker)?;
        let dm = self.web.open_dm(&user).await?;
        self.web.upload(&dm, None, path, &caption).await?;
        let note = "I've sent the file to our direct messages.";
        match &out.interaction {
            Some(url) => self.web.respond(url, note).await,
            None => {
                self.web
                    .post_ephemeral(&out.chat_id, &user, out.thread_id.as_deref(), note)
                    .await
            }
        }
    }

    /// Deletes a placeholder; a failure leaves a stray "thinking…" behind,
    /// which is worth a log line but not a failed reply.
    async fn remove(&self, channel: &str, placeholder: Option<String>) {
        if let Some(ts) = placeholder
            && let Err(e) = self.web.delete(channel, &ts).await
        {
            tracing::warn!(error = %e, "slack: placeholder not removed");
        }
    }
}

fn unknown_asker() -> WebError {
    WebError {
        method: "chat.postEphemeral",
        reason: "the message this answers is no longer known, so the private answer has no recipient".into(),
        code: None,
    }
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        "slack"
    }

    fn max_message_chars(&self) -> usize {
        SLACK_MAX_CHARS
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let web = &self.shared.web;
        let Some(me) = at_startup(&mut shutdown, || web.auth_test()).await? else {
            return Ok(());
        };
        tracing::info!(bot_user = %me.user_id, "slack: signed in");
        *lock(&self.shared.identity) = Some(me);
        let served = match &self.mode {
            SlackMode::Socket { app_token } => socket::run(self.shared.clone(), app_token, inbox, shutdown).await,
            SlackMode::Events { signing_secret, listen } => {
                http::run(self.shared.clone(), signing_secret.clone(), *listen, inbox, shutdown).await
            }
        };
        self.shared.link.down();
        served
    }

    fn link(&self) -> crate::LinkStatus {
        self.shared.link.status()
    }

    async fn probe(&self) -> Result<String, ChannelError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| ChannelError::Receive {
            channel: "slack".into(),
            reason: format!("{what}: {e}"),
        };
        let me = self.shared.web.auth_test().await.map_err(|e| fail("auth.test", &e))?;
        if let SlackMode::Socket { app_token } = &self.mode {
            let token = slack_morphism::prelude::SlackApiToken::new(slack_morphism::prelude::SlackApiTokenValue(
                app_token.clone(),
            ));
            self.shared
                .web
                .check_app_token(&token)
                .await
                .map_err(|e| fail("apps.connections.open (app token)", &e))?;
        }
        Ok(format!("auth.test: bot user {}", me.user_id))
    }

    /// `users.info`: a workspace admin or owner (see [`web::Web::is_admin`]).
    async fn is_group_admin(&self, _chat_id: &str, user_id: &str) -> Result<bool, ChannelError> {
        self.shared
            .web
            .is_admin(user_id)
            .await
            .map_err(|e| ChannelError::Receive {
                channel: "slack".into(),
                reason: format!("users.info: {e}"),
            })
    }

    /// `url_private_download` with the bot token.
    async fn download(
        &self,
        attachment: &crate::Attachment,
        limits: crate::DownloadLimits,
    ) -> Result<Vec<u8>, crate::DownloadError> {
        self.shared.files.download(attachment, limits).await
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        let result = match &out.body {
            OutboundBody::Text(text) => self.shared.send_text(&out, text).await,
            OutboundBody::File { path, caption } => self.shared.send_file(&out, path, caption).await,
        };
        result.map_err(|e| ChannelError::Send {
            channel: "slack".into(),
            target: out.chat_id.clone(),
            reason: e.to_string(),
        })
    }

    /// The placeholder grows into the answer with `chat.update`
    /// (`slack/live.rs`).
    fn live(&self, out: Outbound) -> Box<dyn crate::LiveReply + '_> {
        live::reply(self, out)
    }

    /// Posts "thinking…" once per message (later refreshes do nothing); the
    /// answer replaces it. Slash commands are answered privately, so they get
    /// no public placeholder.
    async fn typing(&self, to: &Inbound) {
        if to.interaction.is_some() || to.channel != "slack" {
            return;
        }
        let mut placeholders = lock(&self.shared.placeholders);
        if placeholders.contains(&to.msg_id) {
            return;
        }
        let shared = self.shared.clone();
        let (chat, thread) = (to.chat_id.clone(), to.thread_id.clone());
        let task = tokio::spawn(async move {
            match shared.web.post(&chat, thread.as_deref(), THINKING).await {
                Ok(ts) => Some(ts),
                Err(e) => {
                    tracing::warn!(error = %e, "slack: placeholder not posted");
                    None
                }
            }
        });
        placeholders.insert(&to.msg_id, Some(task));
    }

    fn bot_name(&self) -> Option<String> {
        lock(&self.shared.identity).as_ref().and_then(|me| me.name.clone())
    }

    /// Lets the delivery waiting for `msg_id` be acknowledged; Slack's
    /// redeliveries of it are acknowledged without a second handover.
    fn taken(&self, msg_id: &str) {
        self.shared.receipts.settle(msg_id, true);
    }

    /// Leaves the delivery waiting for `msg_id` unacknowledged, so Slack
    /// delivers it again (and it is then handed over again). True unless
    /// that delivery was Slack's last try, or none waited (a slash
    /// command). Socket Mode does not say which try an envelope is
    /// (slack-morphism drops `retry_attempt`), so there another try is
    /// always assumed.
    fn not_taken(&self, msg_id: &str) -> bool {
        self.shared.receipts.settle(msg_id, false)
    }
}
