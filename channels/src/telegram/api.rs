//! Talking to the Bot API through teloxide's `Bot`: what is retried (a 429
//! after its `retry_after`, a connection that never got through), what is
//! not (403 "blocked by the user", any other refusal), and how a failure is
//! described. Every description passes [`Api::redact`]: the token is part
//! of each request URL (`/bot<TOKEN>/method`) and must never reach a log.
//! Sends only what it is given; formatting and splitting live elsewhere.

use serde::Serialize;
use serde::de::IgnoredAny;
use std::time::Duration;
use teloxide::payloads::{
    EditMessageText, EditMessageTextSetters, SendDocumentSetters, SendMessage, SendMessageSetters,
};
use teloxide::requests::{JsonRequest, Output, Payload, Request, Requester};
use teloxide::types::{ChatId, InputFile, MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide::{ApiError, Bot, RequestError};

use crate::format::Chunk;
use crate::retry::{RetryPolicy, Verdict};

/// A longer `retry_after` than this is not waited for: the reply is
/// reported as undelivered rather than holding the user's queue for ages.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(120);
/// Retries of one request: flood control waited out as Telegram asks, and a
/// connection that failed (it never reached Telegram, so repeating it
/// cannot duplicate a message) after 1 s, 2 s, 4 s, ….
const RETRY: RetryPolicy = RetryPolicy {
    max_retries: 5,
    base_delay: Duration::from_secs(1),
    max_delay: Duration::from_secs(10),
    max_retry_after: MAX_RATE_LIMIT_WAIT,
};
/// Telegram's limit for a document caption.
const MAX_CAPTION_CHARS: usize = 1024;

/// Why a Bot API call failed, already free of the token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Failure {
    #[error("Telegram asks to wait {}s (flood control)", .0.as_secs())]
    RetryAfter(Duration),
    #[error("Telegram refused: {0} (the user blocked the bot, left, or the bot was removed); not retried")]
    Forbidden(String),
    #[error("Telegram refused the bot token; check the environment variable the config's tokenEnv names")]
    Unauthorized,
    #[error("the group became a supergroup ({0})")]
    Migrated(i64),
    #[error("Telegram could not parse the message's HTML: {0}")]
    BadEntities(String),
    #[error("another mnemo (or bot program) is polling with this token; stop it, only one may run")]
    Conflict,
    #[error("a webhook is set for this bot, so polling is refused")]
    WebhookActive,
    #[error("network: {0}")]
    Network(String),
    #[error("Telegram refused: {0}")]
    Rejected(String),
    #[error("the message already shows that text")]
    NotModified,
}

/// A Bot API method whose answer, the `Message` sent or edited, is read
/// for its `message_id` only. teloxide reads that `Message` whole (sender,
/// chat, entities: its flattened enums buffer every field before deciding),
/// which cost about as much CPU as the rest of the request (BENCHMARKS-JOURNAL.md,
/// fifth session); mnemo needs the id to edit a live reply, nothing else.
/// Errors (`ok: false`, flood control) are read as for any method.
#[derive(Clone, Serialize)]
#[serde(transparent)]
pub(crate) struct ForId<P>(P);

impl Payload for ForId<SendMessage> {
    type Output = MessageId;
    const NAME: &'static str = SendMessage::NAME;
}

/// A Bot API method whose answer is not read at all, only whether it
/// succeeded (see [`ForId`]).
#[derive(Clone, Serialize)]
#[serde(transparent)]
pub(crate) struct Unread<P>(P);

impl Payload for Unread<EditMessageText> {
    type Output = IgnoredAny;
    const NAME: &'static str = EditMessageText::NAME;
}

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub chat: ChatId,
    /// The forum topic, if any.
    pub thread: Option<ThreadId>,
    /// The message to quote (groups only; in a private chat it is noise).
    pub reply_to: Option<MessageId>,
}

/// A cheap-to-clone handle on the Bot API.
#[derive(Clone)]
pub(crate) struct Api {
    bot: Bot,
}

impl Api {
    pub fn new(bot: Bot) -> Self {
        Api { bot }
    }

    pub fn bot(&self) -> &Bot {
        &self.bot
    }

    /// `text` with the token replaced, for anything that may be logged.
    pub fn redact(&self, text: &str) -> String {
        redact(text, self.bot.token())
    }

    /// Turns a teloxide error into a [`Failure`] that is safe to log.
    pub fn failure(&self, error: RequestError) -> Failure {
        match error {
            RequestError::RetryAfter(wait) => Failure::RetryAfter(wait.duration()),
            RequestError::MigrateToChatId(chat) => Failure::Migrated(chat.0),
            RequestError::Api(api) => match api {
                ApiError::InvalidToken => Failure::Unauthorized,
                ApiError::CantParseEntities(reason) => Failure::BadEntities(self.redact(&reason)),
                ApiError::TerminatedByOtherGetUpdates => Failure::Conflict,
                ApiError::MessageNotModified => Failure::NotModified,
                ApiError::CantGetUpdates => Failure::WebhookActive,
                ApiError::BotBlocked
                | ApiError::BotKicked
                | ApiError::BotKickedFromSupergroup
                | ApiError::BotKickedFromChannel
                | ApiError::UserDeactivated
                | ApiError::CantInitiateConversation
                | ApiError::CantTalkWithBots => Failure::Forbidden(api.to_string()),
                ApiError::Unknown(reason) if reason.starts_with("Forbidden") => {
                    Failure::Forbidden(self.redact(&reason))
                }
                other => Failure::Rejected(self.redact(&other.to_string())),
            },
            RequestError::Network(error) => Failure::Network(self.redact(&describe_network(&error))),
            RequestError::InvalidJson { source, .. } => {
                // Not the raw body: it may hold message text.
                Failure::Network(format!("Telegram's answer was not the expected JSON ({source})"))
            }
            RequestError::Io(error) => Failure::Rejected(format!("could not read the file to upload: {error}")),
        }
    }

    /// Sends `request`, waiting out flood control and retrying connections
    /// that failed, per [`RETRY`]. No shutdown cuts these waits: replies
    /// are still sent while the broker drains, and the waits are bounded.
    pub async fn call<R>(&self, method: &'static str, request: &R) -> Result<Output<R>, Failure>
    where
        R: Request<Err = RequestError>,
    {
        let judge = |error: &RequestError| match error {
            RequestError::RetryAfter(wait) if wait.duration() <= MAX_RATE_LIMIT_WAIT => {
                Verdict::Retry(Some(wait.duration()))
            }
            RequestError::Network(e) if e.is_connect() => Verdict::Retry(None),
            _ => Verdict::Fail,
        };
        RETRY
            .run(method, None, judge, || request.send_ref())
            .await
            .map_err(|gave| self.failure(gave.into_error()))
    }

    /// Sends one chunk as HTML; if Telegram cannot parse it after all, sends
    /// the same words without markup rather than nothing. Returns the new
    /// message's id (a live reply edits it later).
    pub async fn send_chunk(&self, to: Target, chunk: &Chunk) -> Result<MessageId, Failure> {
        let html = with_target(SendMessage::new(to.chat, &chunk.text).parse_mode(ParseMode::Html), to);
        match self.call("sendMessage", &self.for_id(html)).await {
            Err(Failure::BadEntities(reason)) => {
                tracing::warn!(chat = to.chat.0, %reason, "telegram: HTML refused; sending the chunk as plain text");
                let plain = with_target(SendMessage::new(to.chat, &chunk.plain), to);
                self.call("sendMessage", &self.for_id(plain)).await
            }
            other => other,
        }
    }

    /// `editMessageText` whose answer is not read (see [`Unread`]).
    fn unread(&self, payload: EditMessageText) -> JsonRequest<Unread<EditMessageText>> {
        JsonRequest::new(self.bot.clone(), Unread(payload))
    }

    /// `sendMessage` whose answer is read for the new message's id alone
    /// (see [`ForId`]).
    fn for_id(&self, payload: SendMessage) -> JsonRequest<ForId<SendMessage>> {
        JsonRequest::new(self.bot.clone(), ForId(payload))
    }

    /// Replaces the text of `message` with `chunk` (`editMessageText`), as
    /// plain text if Telegram cannot parse the HTML. Telegram's "message is
    /// not modified" counts as done.
    pub async fn edit_chunk(&self, chat: ChatId, message: MessageId, chunk: &Chunk) -> Result<(), Failure> {
        let html = EditMessageText::new(chat, message, &chunk.text).parse_mode(ParseMode::Html);
        let edited = match self.call("editMessageText", &self.unread(html)).await {
            Err(Failure::BadEntities(reason)) => {
                tracing::warn!(chat = chat.0, %reason, "telegram: HTML refused in an edit; editing as plain text");
                let plain = EditMessageText::new(chat, message, &chunk.plain);
                self.call("editMessageText", &self.unread(plain)).await.map(drop)
            }
            other => other.map(drop),
        };
        match edited {
            Err(Failure::NotModified) => Ok(()),
            other => other,
        }
    }

    /// Uploads `path` as a document (a `/session export` bundle).
    pub async fn send_document(&self, to: Target, path: &std::path::Path, caption: &str) -> Result<(), Failure> {
        let caption: String = caption.chars().take(MAX_CAPTION_CHARS).collect();
        let mut request = self.bot.send_document(to.chat, InputFile::file(path));
        if !caption.trim().is_empty() {
            request = request.caption(caption);
        }
        if let Some(thread) = to.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(message) = to.reply_to {
            request = request.reply_parameters(ReplyParameters::new(message).allow_sending_without_reply());
        }
        self.call("sendDocument", &request).await.map(drop)
    }
}

/// Adds the topic and the quoted message to a `sendMessage`.
fn with_target<R: SendMessageSetters>(mut request: R, to: Target) -> R {
    if let Some(thread) = to.thread {
        request = request.message_thread_id(thread);
    }
    if let Some(message) = to.reply_to {
        request = request.reply_parameters(ReplyParameters::new(message).allow_sending_without_reply());
    }
    request
}

/// A network error in words: its kind and its causes (reqwest's own text
/// names the URL, which holds the token; the caller redacts it anyway).
fn describe_network(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut text = kind.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` with every occurrence of `token` replaced by `<token>`.
pub(crate) fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        text.to_string()
    } else {
        text.replace(token, "<token>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_the_token_from_urls() {
        let text = "error sending request for url (https://api.telegram.org/bot123:ABC/getMe)";
        assert_eq!(
            redact(text, "123:ABC"),
            "error sending request for url (https://api.telegram.org/bot<token>/getMe)"
        );
        assert_eq!(redact("nothing", ""), "nothing");
    }

    #[test]
    fn blocked_and_kicked_are_forbidden_and_a_bad_token_is_unauthorized() {
        let api = Api::new(Bot::with_client("1:T", reqwest::Client::new()));
        assert!(matches!(
            api.failure(RequestError::Api(ApiError::BotBlocked)),
            Failure::Forbidden(_)
        ));
        let other = ApiError::Unknown("Forbidden: bot is not a member of the group chat".into());
        assert!(matches!(api.failure(RequestError::Api(other)), Failure::Forbidden(_)));
        assert_eq!(
            api.failure(RequestError::Api(ApiError::InvalidToken)),
            Failure::Unauthorized
        );
        let wait = teloxide::types::Seconds::from_seconds(3);
        assert_eq!(
            api.failure(RequestError::RetryAfter(wait)),
            Failure::RetryAfter(Duration::from_secs(3))
        );
    }
}
