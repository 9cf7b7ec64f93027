//! Webhook mode, the adapter's half: registering the webhook with Telegram
//! (`setWebhook` with the secret token, one connection at a time so updates
//! arrive in order), and the [`WebhookIntake`] that checks each delivery's
//! `X-Telegram-Bot-Api-Secret-Token` header and queues the update for
//! [`TelegramChannel::receive`].
//!
//! It serves no HTTP itself: the binary owns the listening socket and hands
//! each request's header and body to [`WebhookIntake::accept`], so this
//! crate needs no web server.

use super::inbound::Me;
use super::polling::receive_error;
use super::{TelegramChannel, stopped};
use crate::retry::{Backoff, pause};
use crate::{ChannelError, Inbound, Shutdown};
use std::sync::Arc;
use teloxide::payloads::SetWebhookSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::{AllowedUpdate, Update};
use tokio::sync::mpsc;

use super::api::Failure;

/// Updates accepted but not yet taken by the adapter; beyond this Telegram
/// is told to try again later.
pub(crate) const QUEUE_DEPTH: usize = 64;

/// Why a webhook delivery was refused; each maps to an HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRejection {
    /// 401: the secret header is missing or wrong (not from Telegram).
    #[error("the X-Telegram-Bot-Api-Secret-Token header is missing or wrong")]
    Unauthorized,
    /// 400: the body is not a Telegram update (not even its `update_id`
    /// is readable; one that has an id but cannot be decoded is skipped
    /// with 200, so it cannot hold back the updates behind it).
    #[error("the body is not a Telegram update")]
    Malformed,
    /// 503: the queue is full or the adapter stopped; Telegram retries.
    #[error("not taking updates right now; Telegram will deliver it again")]
    Unavailable,
}

impl WebhookRejection {
    /// The HTTP status to answer with.
    pub fn status(self) -> u16 {
        match self {
            WebhookRejection::Unauthorized => 401,
            WebhookRejection::Malformed => 400,
            WebhookRejection::Unavailable => 503,
        }
    }
}

/// Takes webhook deliveries for one [`TelegramChannel`]. Cheap to clone.
#[derive(Clone)]
pub struct WebhookIntake {
    secret: Arc<str>,
    queue: mpsc::Sender<Update>,
}

impl WebhookIntake {
    /// The header Telegram puts the secret token in.
    pub const SECRET_HEADER: &'static str = "X-Telegram-Bot-Api-Secret-Token";

    pub(crate) fn new(secret: &str, queue: mpsc::Sender<Update>) -> Self {
        WebhookIntake {
            secret: secret.into(),
            queue,
        }
    }

    /// Accepts one delivery: `secret` is the value of [`Self::SECRET_HEADER`]
    /// (if present), `body` the request body. Ok means "answer 200".
    pub fn accept(&self, secret: Option<&[u8]>, body: &[u8]) -> Result<(), WebhookRejection> {
        if !secret.is_some_and(|given| same_secret(given, self.secret.as_bytes())) {
            return Err(WebhookRejection::Unauthorized);
        }
        let body = std::str::from_utf8(body).map_err(|_| WebhookRejection::Malformed)?;
        match super::updates::decode(body) {
            Ok(update) => self.queue.try_send(update).map_err(|_| WebhookRejection::Unavailable),
            // An update from Telegram that we cannot read is skipped (and
            // logged by id): refusing it would make Telegram retry it and
            // hold back every update behind it.
            Err(Some(_)) => Ok(()),
            Err(None) => Err(WebhookRejection::Malformed),
        }
    }
}

/// Compares without stopping at the first difference, so response timing
/// does not tell an attacker how much of a guess was right.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Whether `secret` is one Telegram accepts: 1–256 of `A-Z a-z 0-9 _ -`.
pub(crate) fn valid_secret(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Registers the webhook, then hands queued updates to the broker until
/// `shutdown` fires. The webhook stays set at shutdown: Telegram keeps
/// updates until mnemo answers again.
pub(crate) async fn run(
    channel: &TelegramChannel,
    me: &Me,
    inbox: &mpsc::Sender<Inbound>,
    shutdown: &mut Shutdown,
) -> Result<(), ChannelError> {
    let Some(webhook) = &channel.webhook else {
        return Err(ChannelError::Receive {
            channel: super::CHANNEL.into(),
            reason: "not in webhook mode".into(),
        });
    };
    let Some(mut queue) = webhook.queue.lock().await.take() else {
        return Err(ChannelError::Receive {
            channel: super::CHANNEL.into(),
            reason: "webhook updates are already being received".into(),
        });
    };
    if !register(channel, &webhook.public_url, &webhook.secret, shutdown).await? {
        return Ok(());
    }
    channel.link.up();
    // With one connection Telegram sends the next update only after the
    // previous one was answered, so ids only grow; a repeat means our 200
    // got lost and the update is already with the broker.
    let mut last_id = None;
    loop {
        let update = tokio::select! {
            update = queue.recv() => update,
            _ = stopped(shutdown) => return Ok(()),
        };
        let Some(update) = update else { return Ok(()) };
        if last_id.is_some_and(|last| update.id.0 <= last) {
            tracing::debug!(update = update.id.0, "telegram: repeated webhook delivery skipped");
            continue;
        }
        last_id = Some(update.id.0);
        tokio::select! {
            delivered = channel.deliver(&update, me, inbox) => delivered?,
            _ = stopped(shutdown) => return Ok(()),
        }
    }
}

/// `setWebhook`, retried on network errors; false when shutdown came first.
async fn register(
    channel: &TelegramChannel,
    url: &reqwest::Url,
    secret: &str,
    shutdown: &mut Shutdown,
) -> Result<bool, ChannelError> {
    let request = channel
        .api
        .bot()
        .set_webhook(url.clone())
        .secret_token(secret)
        .max_connections(1)
        .allowed_updates([AllowedUpdate::Message]);
    let mut backoff = Backoff::default();
    loop {
        let result = tokio::select! {
            result = request.send_ref() => result,
            _ = stopped(shutdown) => return Ok(false),
        };
        let wait = match result.map_err(|e| channel.api.failure(e)) {
            Ok(_) => {
                tracing::info!("telegram: webhook registered");
                return Ok(true);
            }
            Err(Failure::RetryAfter(wait)) => backoff.next(Some(wait)),
            Err(Failure::Network(reason)) => {
                let wait = backoff.next(None);
                tracing::warn!(%reason, retry_in_secs = wait.as_secs(), "telegram: setWebhook failed");
                wait
            }
            Err(failure) => return Err(receive_error(failure)),
        };
        if !pause(wait, shutdown).await {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake() -> (WebhookIntake, mpsc::Receiver<Update>) {
        let (tx, rx) = mpsc::channel(1);
        (WebhookIntake::new("s3cret-token", tx), rx)
    }

    const UPDATE: &[u8] = br#"{"update_id": 5, "message": {"message_id": 1, "date": 0,
        "chat": {"id": 1, "type": "private", "first_name": "A"}, "from": {"id": 1, "is_bot": false, "first_name": "A"},
        "text": "hi"}}"#;

    #[test]
    fn a_delivery_without_the_right_secret_is_refused() {
        let (intake, mut rx) = intake();
        assert_eq!(intake.accept(None, UPDATE), Err(WebhookRejection::Unauthorized));
        assert_eq!(
            intake.accept(Some(b"s3cret-tokeN"), UPDATE),
            Err(WebhookRejection::Unauthorized)
        );
        assert_eq!(
            intake.accept(Some(b"s3cret"), UPDATE),
            Err(WebhookRejection::Unauthorized)
        );
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_delivery_with_the_secret_is_queued_and_a_full_queue_says_try_later() {
        let (intake, mut rx) = intake();
        assert_eq!(intake.accept(Some(b"s3cret-token"), UPDATE), Ok(()));
        assert_eq!(
            intake.accept(Some(b"s3cret-token"), UPDATE),
            Err(WebhookRejection::Unavailable)
        );
        assert_eq!(rx.try_recv().map(|u| u.id.0), Ok(5));
    }

    #[test]
    fn a_body_that_is_not_an_update_is_malformed() {
        let (intake, _rx) = intake();
        assert_eq!(
            intake.accept(Some(b"s3cret-token"), b"{oops"),
            Err(WebhookRejection::Malformed)
        );
        assert_eq!(WebhookRejection::Malformed.status(), 400);
    }

    #[test]
    fn secrets_follow_telegrams_alphabet() {
        assert!(valid_secret("abc_DEF-123"));
        assert!(!valid_secret(""));
        assert!(!valid_secret("has space"));
        assert!(!valid_secret(&"a".repeat(257)));
    }
}
