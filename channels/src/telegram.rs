//! The Telegram channel (teloxide): Telegram updates in as [`Inbound`],
//! replies out as Telegram HTML. Long polling by default, a webhook as an
//! option. Knows nothing of memory: `/session …` is passed through as text
//! (the broker answers it) and only registered in the command menu here.
//!
//! Layout: [`inbound`] decides what an update means, [`crate::format`]
//! renders and splits replies as Telegram HTML, [`api`] calls the Bot API with the
//! retry policy, [`polling`] and [`webhook`] bring updates in, and each
//! acknowledges an update to Telegram only once the broker took its
//! message ([`unconfirmed`] keeps polling's books on that). The token
//! never appears in a log line or an error (see [`api::redact`]); message
//! text is never logged.

mod api;
mod files;
mod inbound;
mod live;
mod polling;
mod unconfirmed;
mod updates;
mod webhook;

pub use files::BOT_API_DOWNLOAD_LIMIT;
pub use webhook::{Receipt, WebhookIntake, WebhookRejection};

use crate::format::{self, TELEGRAM_MAX_CHARS, TelegramHtml};
use crate::retry::{Backoff, pause};
use crate::{
    ASK_PRIVATELY, Channel, ChannelError, Inbound, Link, LinkStatus, Outbound, OutboundBody, SENT_PRIVATELY, Shutdown,
};
use api::{Api, Failure, Target};
use async_trait::async_trait;
use inbound::{Me, Routed};
use polling::receive_error;
use std::sync::OnceLock;
use std::time::Duration;
use teloxide::Bot;
use teloxide::payloads::SendChatActionSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::{BotCommand, ChatAction, ChatId, MessageId, ThreadId, Update, UserId};
use tokio::sync::{Mutex, mpsc};

/// The channel's name (and its state folder).
pub(crate) const CHANNEL: &str = "telegram";

/// The Bot API everyone uses unless `apiUrl` says otherwise.
const DEFAULT_API_URL: &str = "https://api.telegram.org";

/// What a sticker, video or the like without a caption gets back.
pub const TEXT_ONLY_REPLY: &str =
    "I can't take this kind of message. I understand text, voice notes, audio files, photos and documents.";

/// The description of `/session` in Telegram's command menu.
const SESSION_COMMAND_DESCRIPTION: &str =
    "Your memory: status, clear, profile, remember, forget, history, undo, search, export, help";

/// How the channel gets updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TelegramMode {
    /// `getUpdates` long polling: works anywhere, needs no public address.
    Polling,
    /// Telegram POSTs each update to `public_url` with `secret` in the
    /// [`WebhookIntake::SECRET_HEADER`]; the binary serves the HTTP side.
    Webhook { public_url: String, secret: String },
}

/// Everything needed to build a [`TelegramChannel`].
#[derive(Clone)]
pub struct TelegramSettings {
    /// The bot token from @BotFather. Never logged.
    pub token: String,
    /// The Bot API base URL (a self-hosted Bot API server, a test server);
    /// `None` for `https://api.telegram.org`.
    pub api_url: Option<String>,
    pub mode: TelegramMode,
    /// How long one `getUpdates` call may wait for news.
    pub poll_timeout: Duration,
}

impl TelegramSettings {
    /// Polling against the public Bot API with a 30 s long poll.
    pub fn polling(token: impl Into<String>) -> Self {
        TelegramSettings {
            token: token.into(),
            api_url: None,
            mode: TelegramMode::Polling,
            poll_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a [`TelegramChannel`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TelegramError {
    #[error("telegram: the bot token is empty; set the environment variable named by channels.telegram.tokenEnv")]
    EmptyToken,
    #[error("telegram: apiUrl `{0}` is not an http(s) URL; use e.g. https://api.telegram.org")]
    ApiUrl(String),
    #[error(
        "telegram: webhook URL `{0}` is not an http(s) URL; set channels.telegram.webhookUrl to the public address"
    )]
    WebhookUrl(String),
    #[error("telegram: the webhook secret must be 1-256 characters of A-Z, a-z, 0-9, `_` and `-`")]
    WebhookSecret,
    #[error("telegram: could not build the HTTP client: {0}")]
    Client(String),
}

/// The webhook's registration data and the queue its intake fills.
struct Webhook {
    public_url: reqwest::Url,
    secret: String,
    intake: WebhookIntake,
    /// Taken by the one running `receive`.
    queue: Mutex<Option<mpsc::Receiver<webhook::Delivery>>>,
    /// Where the broker's [`Channel::taken`] reaches the waiting delivery.
    receipts: webhook::Receipts,
}

/// The Telegram adapter behind the [`Channel`] trait.
pub struct TelegramChannel {
    api: Api,
    poll_timeout: Duration,
    /// Set from `getMe` when receiving starts; [`Channel::bot_name`] and
    /// the group addressing rules need it.
    me: OnceLock<Me>,
    webhook: Option<Webhook>,
    /// Polling mode: the updates handed to the broker and not yet taken,
    /// which hold the `getUpdates` offset back (see [`polling`]).
    unconfirmed: unconfirmed::Unconfirmed,
    /// Up after each answered `getMe`/`getUpdates`/webhook registration,
    /// down after a failed one: the broker's readiness reads it.
    link: Link,
    /// Downloads of the files messages carry (`getFile` and the file URL).
    files: files::Files,
}

impl TelegramChannel {
    pub fn new(settings: TelegramSettings) -> Result<Self, TelegramError> {
        if settings.token.trim().is_empty() {
            return Err(TelegramError::EmptyToken);
        }
        let api_url = http_url(settings.api_url.as_deref().unwrap_or(DEFAULT_API_URL))
            .ok_or_else(|| TelegramError::ApiUrl(settings.api_url.clone().unwrap_or_default()))?;
        // The client must outwait a long poll; uploads share the budget.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(settings.poll_timeout + Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| TelegramError::Client(e.to_string()))?;
        let files = files::Files::new(&api_url, &settings.token).map_err(|e| TelegramError::Client(e.to_string()))?;
        let bot = Bot::with_client(settings.token.trim(), client).set_api_url(api_url);
        let webhook = match settings.mode {
            TelegramMode::Polling => None,
            TelegramMode::Webhook { public_url, secret } => {
                let url = http_url(&public_url).ok_or(TelegramError::WebhookUrl(public_url))?;
                if !webhook::valid_secret(&secret) {
                    return Err(TelegramError::WebhookSecret);
                }
                let (tx, rx) = mpsc::channel(webhook::QUEUE_DEPTH);
                let intake = WebhookIntake::new(&secret, tx);
                Some(Webhook {
                    public_url: url,
                    secret,
                    intake,
                    queue: Mutex::new(Some(rx)),
                    receipts: webhook::Receipts::default(),
                })
            }
        };
        Ok(TelegramChannel {
            api: Api::new(bot),
            poll_timeout: settings.poll_timeout,
            me: OnceLock::new(),
            webhook,
            unconfirmed: unconfirmed::Unconfirmed::default(),
            link: Link::default(),
            files,
        })
    }

    /// In webhook mode, the handle the HTTP server passes deliveries to.
    pub fn webhook_intake(&self) -> Option<WebhookIntake> {
        self.webhook.as_ref().map(|w| w.intake.clone())
    }

    /// Asks `getMe` who we are (retrying network errors until shutdown) and
    /// puts `/session` in the command menu. `None` when shutdown came first.
    async fn start(&self, shutdown: &mut Shutdown) -> Result<Option<Me>, ChannelError> {
        let mut backoff = Backoff::default();
        let me = loop {
            let result = tokio::select! {
                result = self.api.bot().get_me().send() => result,
                _ = stopped(shutdown) => return Ok(None),
            };
            let result = result.map_err(|e| self.api.failure(e));
            if result.is_err() {
                self.link.down();
            }
            let wait = match result {
                Ok(me) => break me,
                Err(Failure::RetryAfter(wait)) => backoff.next(Some(wait)),
                Err(failure @ (Failure::Network(_) | Failure::Rejected(_))) => {
                    let wait = backoff.next(None);
                    tracing::warn!(error = %failure, retry_in_secs = wait.as_secs(), "telegram: getMe failed");
                    wait
                }
                Err(failure) => return Err(receive_error(failure)),
            };
            if !pause(wait, shutdown).await {
                return Ok(None);
            }
        };
        let me = Me {
            id: me.user.id.0,
            username: me.user.username.clone().unwrap_or_default(),
        };
        let me = self.me.get_or_init(|| me).clone();
        let commands = self
            .api
            .bot()
            .set_my_commands([BotCommand::new("session", SESSION_COMMAND_DESCRIPTION)]);
        tokio::select! {
            registered = self.api.call("setMyCommands", &commands) => if let Err(failure) = registered {
                tracing::warn!(error = %failure, "telegram: could not register /session in the command menu");
            },
            _ = stopped(shutdown) => return Ok(None),
        }
        tracing::info!(bot = %me.username, "telegram: connected");
        Ok(Some(me))
    }

    /// The message `update` carries for the broker; an update without one
    /// is answered here (a text-only note) or skipped.
    fn message_or_answer(&self, update: &Update, routed: Routed) -> Option<Inbound> {
        match routed {
            Routed::Message(message) => {
                tracing::debug!(chat = %message.chat_id, msg_id = %message.msg_id, "telegram: message in");
                Some(message)
            }
            Routed::TextOnly(to) => {
                // Not awaited: a flood-control wait must not stall polling.
                let api = self.api.clone();
                let note = Outbound::reply(&to, TEXT_ONLY_REPLY);
                tokio::spawn(async move {
                    if let Err(e) = send(&api, note).await {
                        tracing::warn!(error = %e, "telegram: text-only note not delivered");
                    }
                });
                None
            }
            Routed::Ignored(why) => {
                tracing::debug!(update = update.id.0, why, "telegram: update skipped");
                None
            }
        }
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn max_message_chars(&self) -> usize {
        TELEGRAM_MAX_CHARS
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let Some(me) = self.start(&mut shutdown).await? else {
            return Ok(());
        };
        let served = if self.webhook.is_some() {
            webhook::run(self, &me, &inbox, &mut shutdown).await
        } else {
            polling::run(self, &me, &inbox, &mut shutdown).await
        };
        self.link.down();
        served
    }

    fn link(&self) -> LinkStatus {
        self.link.status()
    }

    /// Webhook mode: the delivery that brought `msg_id` is answered 200.
    /// Polling: its update no longer holds the offset back.
    fn taken(&self, msg_id: &str) {
        match &self.webhook {
            Some(webhook) => {
                let _ = webhook.receipts.settle(msg_id, true);
            }
            None => {
                let _ = self.unconfirmed.taken(msg_id);
            }
        }
    }

    /// Webhook mode: the delivery that brought `msg_id` is answered 503,
    /// and Telegram delivers it again. Polling: its update stays
    /// unconfirmed and is handed over again after a pause (or, at
    /// shutdown, by Telegram to the next process).
    fn not_taken(&self, msg_id: &str) -> bool {
        match &self.webhook {
            Some(webhook) => webhook.receipts.settle(msg_id, false),
            None => self.unconfirmed.give_back(msg_id),
        }
    }

    async fn probe(&self) -> Result<String, ChannelError> {
        let me = self
            .api
            .bot()
            .get_me()
            .send()
            .await
            .map_err(|e| ChannelError::Receive {
                channel: CHANNEL.into(),
                reason: format!("getMe: {}", self.api.failure(e)),
            })?;
        Ok(format!("getMe: @{}", me.user.username.clone().unwrap_or_default()))
    }

    /// `getChatMember`: the owner (`creator`) and `administrator`s are.
    async fn is_group_admin(&self, chat_id: &str, user_id: &str) -> Result<bool, ChannelError> {
        let refused = |reason: String| ChannelError::Receive {
            channel: CHANNEL.into(),
            reason,
        };
        let (Ok(chat), Ok(user)) = (chat_id.parse::<i64>(), user_id.parse::<u64>()) else {
            return Err(refused("getChatMember: not a Telegram chat or user id".into()));
        };
        let request = self.api.bot().get_chat_member(ChatId(chat), UserId(user));
        let member = self
            .api
            .call("getChatMember", &request)
            .await
            .map_err(|e| refused(format!("getChatMember: {e}")))?;
        Ok(member.is_privileged())
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        send(&self.api, out).await
    }

    /// `getFile`, then the file URL; never more than the Bot API's 20 MB.
    async fn download(
        &self,
        attachment: &crate::Attachment,
        limits: crate::DownloadLimits,
    ) -> Result<Vec<u8>, crate::DownloadError> {
        self.files.download(attachment, limits).await
    }

    fn live(&self, out: Outbound) -> Box<dyn crate::LiveReply + '_> {
        live::reply(self, &self.api, out)
    }

    /// One `sendChatAction typing`; a failure only costs the indicator.
    async fn typing(&self, to: &Inbound) {
        let Ok(chat) = to.chat_id.parse::<i64>() else { return };
        let mut request = self.api.bot().send_chat_action(ChatId(chat), ChatAction::Typing);
        if let Some(thread) = thread(to.thread_id.as_deref()) {
            request = request.message_thread_id(thread);
        }
        if let Err(e) = request.send().await {
            tracing::debug!(chat, error = %self.api.failure(e), "telegram: typing indicator not shown");
        }
    }

    fn bot_name(&self) -> Option<String> {
        self.me
            .get()
            .map(|me| me.username.clone())
            .filter(|name| !name.is_empty())
    }
}

/// Sends one reply; one marked private goes to the asker's private chat
/// (see [`send_privately`]).
async fn send(api: &Api, out: Outbound) -> Result<(), ChannelError> {
    match out.private_to.clone() {
        Some(user) => send_privately(api, out, &user).await,
        None => send_to_chat(api, &out).await,
    }
}

/// A memory-revealing answer asked in a group goes to the asker's private
/// chat with the bot (its id is the user's id); the group hears only that
/// it did. Telegram lets a bot write only to users who started it, so when
/// it refuses, the group is told to ask in a private chat instead.
async fn send_privately(api: &Api, out: Outbound, user: &str) -> Result<(), ChannelError> {
    let private = Outbound {
        chat_id: user.to_string(),
        thread_id: None,
        reply_to: None,
        private_to: None,
        ..out.clone()
    };
    let note = match send_to_chat(api, &private).await {
        Ok(()) => SENT_PRIVATELY,
        Err(e) => {
            tracing::info!(error = %e, "telegram: private answer not delivered; asking to ask in a private chat");
            ASK_PRIVATELY
        }
    };
    let note = Outbound {
        private_to: None,
        ephemeral: false,
        body: OutboundBody::Text(note.into()),
        ..out
    };
    send_to_chat(api, &note).await
}

/// Sends one reply to its chat: text as HTML chunks (the first quoting the
/// user's message in groups), a file as a document. A group that became a
/// supergroup is followed once.
async fn send_to_chat(api: &Api, out: &Outbound) -> Result<(), ChannelError> {
    let error = |failure: Failure| ChannelError::Send {
        channel: CHANNEL.into(),
        target: out.chat_id.clone(),
        reason: failure.to_string(),
    };
    let mut target = target(out)?;
    match &out.body {
        OutboundBody::Text(text) => {
            let chunks = format::to_chunks(&TelegramHtml, text);
            for (i, chunk) in chunks.iter().enumerate() {
                let to = if i == 0 {
                    target
                } else {
                    Target {
                        reply_to: None,
                        ..target
                    }
                };
                match api.send_chunk(to, chunk).await {
                    Err(Failure::Migrated(chat)) => {
                        tracing::info!(from = to.chat.0, to = chat, "telegram: group moved to a supergroup");
                        target.chat = ChatId(chat);
                        api.send_chunk(
                            Target {
                                chat: ChatId(chat),
                                ..to
                            },
                            chunk,
                        )
                        .await
                        .map_err(error)?;
                    }
                    sent => {
                        sent.map_err(error)?;
                    }
                }
            }
            tracing::debug!(chat = target.chat.0, chunks = chunks.len(), "telegram: reply sent");
            Ok(())
        }
        OutboundBody::File { path, caption } => match api.send_document(target, path, caption).await {
            Err(Failure::Migrated(chat)) => api
                .send_document(
                    Target {
                        chat: ChatId(chat),
                        ..target
                    },
                    path,
                    caption,
                )
                .await
                .map_err(error),
            sent => sent.map_err(error),
        },
    }
}

/// Where `out` goes. Quoting only in groups (negative chat ids): in a
/// private chat the answer to the last message needs no quote.
fn target(out: &Outbound) -> Result<Target, ChannelError> {
    let chat: i64 = out.chat_id.parse().map_err(|_| ChannelError::Send {
        channel: CHANNEL.into(),
        target: out.chat_id.clone(),
        reason: "not a Telegram chat id".into(),
    })?;
    let reply_to = (chat < 0)
        .then(|| out.reply_to.as_deref().and_then(inbound::message_number))
        .flatten();
    Ok(Target {
        chat: ChatId(chat),
        thread: thread(out.thread_id.as_deref()),
        reply_to: reply_to.map(MessageId),
    })
}

fn thread(id: Option<&str>) -> Option<ThreadId> {
    id?.parse().ok().map(|n| ThreadId(MessageId(n)))
}

/// An http(s) URL without a trailing slash (teloxide appends
/// `/bot<TOKEN>/<method>` as path segments).
fn http_url(text: &str) -> Option<reqwest::Url> {
    let url = reqwest::Url::parse(text.trim().trim_end_matches('/')).ok()?;
    (matches!(url.scheme(), "http" | "https") && !url.cannot_be_a_base()).then_some(url)
}

/// Resolves when `shutdown` fires (or its sender is gone).
async fn stopped(shutdown: &mut Shutdown) {
    // An Err means the sender was dropped: nobody can ask us to keep going.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let bad_url = TelegramSettings {
            api_url: Some("ftp://x".into()),
            ..TelegramSettings::polling("1:T")
        };
        assert!(matches!(TelegramChannel::new(bad_url), Err(TelegramError::ApiUrl(_))));
        assert!(matches!(
            TelegramChannel::new(TelegramSettings::polling(" ")),
            Err(TelegramError::EmptyToken)
        ));
        let webhook = |secret: &str| TelegramSettings {
            mode: TelegramMode::Webhook {
                public_url: "https://bot.example/tg".into(),
                secret: secret.into(),
            },
            ..TelegramSettings::polling("1:T")
        };
        assert!(matches!(
            TelegramChannel::new(webhook("bad secret")),
            Err(TelegramError::WebhookSecret)
        ));
        let channel = TelegramChannel::new(webhook("good_secret")).unwrap();
        assert!(channel.webhook_intake().is_some());
    }

    #[test]
    fn replies_quote_the_message_only_in_groups() {
        let out = |chat: &str| Outbound {
            channel: CHANNEL.into(),
            chat_id: chat.into(),
            thread_id: Some("3".into()),
            reply_to: Some(format!("{chat}:12")),
            ephemeral: false,
            private_to: None,
            interaction: None,
            body: OutboundBody::Text("hi".into()),
        };
        let group = target(&out("-100500")).unwrap();
        assert_eq!(group.reply_to, Some(MessageId(12)));
        assert_eq!(group.thread, Some(ThreadId(MessageId(3))));
        assert_eq!(target(&out("42")).unwrap().reply_to, None);
        assert!(target(&out("console")).is_err());
    }

    #[test]
    fn api_urls_keep_their_path_and_lose_a_trailing_slash() {
        assert_eq!(
            http_url("http://127.0.0.1:8081/").unwrap().as_str(),
            "http://127.0.0.1:8081/"
        );
        assert_eq!(http_url("https://proxy.example/tg/").unwrap().path(), "/tg");
        assert!(http_url("mailto:x@y").is_none());
    }
}
