//! Webhook mode, the adapter's half: registering the webhook with Telegram
//! (`setWebhook` with the secret token, one connection at a time so updates
//! arrive in order), and the [`WebhookIntake`] that checks each delivery's
//! `X-Telegram-Bot-Api-Secret-Token` header and queues the update for
//! [`TelegramChannel::receive`].
//!
//! A delivery is acknowledged (200) only once its message is safe: the
//! [`Receipt`] that [`WebhookIntake::accept`] returns resolves when the
//! broker reports the message taken ([`crate::Channel::taken`]: stored, or
//! deliberately refused and answered) or not ([`crate::Channel::not_taken`]:
//! the store failed, the broker is stopping), and updates that carry no
//! message for the broker at once. Telegram delivers again whatever was not
//! acknowledged, so a broker killed at any moment loses nothing it said it
//! had. A repeated delivery of an update this broker already took is
//! answered 200 without handing it over twice; one whose first copy is
//! still on its way waits for that copy's outcome.
//!
//! It serves no HTTP itself: the binary owns the listening socket and hands
//! each request's header and body to [`WebhookIntake::accept`], so this
//! crate needs no web server.

use super::inbound;
use super::inbound::Me;
use super::polling::receive_error;
use super::{TelegramChannel, stopped};
use crate::retry::{Backoff, pause};
use crate::{ChannelError, Inbound, Shutdown};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use teloxide::payloads::SetWebhookSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::{AllowedUpdate, Update};
use tokio::sync::{mpsc, oneshot};

use super::api::Failure;

/// Updates accepted but not yet taken by the adapter; beyond this Telegram
/// is told to try again later.
pub(crate) const QUEUE_DEPTH: usize = 64;

/// How many recently taken update ids are remembered, to answer a repeated
/// delivery without handing it over twice. Telegram repeats soon after a
/// lost answer; an older repeat is handed over again (a duplicate the
/// Postgres store ignores, never a loss).
const REMEMBERED: usize = 1024;

/// An update queued by the intake, with where to tell its outcome.
pub(crate) type Delivery = (Update, oneshot::Sender<bool>);

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
    queue: mpsc::Sender<Delivery>,
}

impl WebhookIntake {
    /// The header Telegram puts the secret token in.
    pub const SECRET_HEADER: &'static str = "X-Telegram-Bot-Api-Secret-Token";

    pub(crate) fn new(secret: &str, queue: mpsc::Sender<Delivery>) -> Self {
        WebhookIntake {
            secret: secret.into(),
            queue,
        }
    }

    /// Accepts one delivery: `secret` is the value of [`Self::SECRET_HEADER`]
    /// (if present), `body` the request body. Ok is a [`Receipt`] to wait
    /// on before answering: 200 once it says the message is kept.
    pub fn accept(&self, secret: Option<&[u8]>, body: &[u8]) -> Result<Receipt, WebhookRejection> {
        if !secret.is_some_and(|given| same_secret(given, self.secret.as_bytes())) {
            return Err(WebhookRejection::Unauthorized);
        }
        let body = std::str::from_utf8(body).map_err(|_| WebhookRejection::Malformed)?;
        match super::updates::decode(body) {
            Ok(update) => {
                let (done, receipt) = oneshot::channel();
                self.queue
                    .try_send((update, done))
                    .map_err(|_| WebhookRejection::Unavailable)?;
                Ok(Receipt(receipt))
            }
            // An update from Telegram that we cannot read is skipped (and
            // logged by id): refusing it would make Telegram retry it and
            // hold back every update behind it.
            Err(Some(_)) => Ok(Receipt::kept_now()),
            Err(None) => Err(WebhookRejection::Malformed),
        }
    }
}

/// What became of one accepted delivery: wait on it with
/// [`Receipt::kept`] before answering Telegram.
#[derive(Debug)]
pub struct Receipt(oneshot::Receiver<bool>);

impl Receipt {
    /// A delivery with nothing for the broker (an update that cannot be
    /// read), acknowledged at once.
    fn kept_now() -> Receipt {
        let (done, receipt) = oneshot::channel();
        let _ = done.send(true);
        Receipt(receipt)
    }

    /// Whether the update is safe with the broker (answer 200), waiting up
    /// to `limit`; false (answer 503, Telegram delivers it again) when the
    /// broker could not keep it, stopped, or took longer than `limit`.
    pub async fn kept(self, limit: Duration) -> bool {
        matches!(tokio::time::timeout(limit, self.0).await, Ok(Ok(true)))
    }
}

/// The deliveries handed to the broker and not yet taken, by message id,
/// and the update ids recently taken: how a delivery's outcome reaches the
/// [`Receipt`] waiting for it.
#[derive(Default)]
pub(crate) struct Receipts(Mutex<Waiting>);

#[derive(Default)]
struct Waiting {
    /// Message id → its update id and every delivery of it waiting.
    pending: HashMap<String, (u32, Vec<oneshot::Sender<bool>>)>,
    /// Update ids the broker took, oldest first, at most [`REMEMBERED`].
    taken: VecDeque<u32>,
}

/// What to do with a delivered message.
#[derive(Debug, PartialEq, Eq)]
enum Handover {
    /// Hand it to the broker; its outcome is waited for.
    Deliver,
    /// A repeat: already taken (answered 200), or waiting with its first copy.
    Repeat,
}

impl Receipts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // Every update of the map is one call: a poisoned lock is still whole.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers the delivery `done` of update `update` carrying message
    /// `msg_id`, before the message goes to the broker.
    fn hand_over(&self, update: u32, msg_id: &str, done: oneshot::Sender<bool>) -> Handover {
        let mut waiting = self.lock();
        if waiting.taken.contains(&update) {
            let _ = done.send(true);
            return Handover::Repeat;
        }
        // Every message handed over is settled by the broker (stored,
        // refused or not kept), so an entry lives as long as its turn
        // waits, even after Telegram gave up on the answer (503 on
        // timeout): its redelivery then waits with it instead of being
        // handed over twice.
        if let Some((_, dones)) = waiting.pending.get_mut(msg_id) {
            dones.retain(|d| !d.is_closed());
            dones.push(done);
            return Handover::Repeat;
        }
        waiting.pending.insert(msg_id.to_string(), (update, vec![done]));
        Handover::Deliver
    }

    /// The broker's outcome for message `msg_id`: every delivery of it
    /// waiting is answered; a taken update is remembered. False when no
    /// delivery of it was waiting (settled before, or not from here).
    pub(crate) fn settle(&self, msg_id: &str, taken: bool) -> bool {
        let mut waiting = self.lock();
        let Some((update, dones)) = waiting.pending.remove(msg_id) else {
            return false;
        };
        if taken {
            if waiting.taken.len() == REMEMBERED {
                waiting.taken.pop_front();
            }
            waiting.taken.push_back(update);
        }
        drop(waiting);
        for done in dones {
            let _ = done.send(taken);
        }
        true
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
    loop {
        let delivery = tokio::select! {
            delivery = queue.recv() => delivery,
            _ = stopped(shutdown) => return Ok(()),
        };
        let Some((update, done)) = delivery else { return Ok(()) };
        let Some(message) = channel.message_or_answer(&update, inbound::route(&update, me)) else {
            let _ = done.send(true);
            continue;
        };
        let msg_id = message.msg_id.clone();
        if webhook.receipts.hand_over(update.id.0, &msg_id, done) == Handover::Repeat {
            tracing::debug!(
                update = update.id.0,
                "telegram: repeated webhook delivery not handed over twice"
            );
            continue;
        }
        let handed = tokio::select! {
            sent = inbox.send(message) => sent.is_ok(),
            _ = stopped(shutdown) => false,
        };
        if !handed {
            // Not with the broker: Telegram is told to deliver it again.
            let _ = webhook.receipts.settle(&msg_id, false);
            if *shutdown.borrow() {
                return Ok(());
            }
            return Err(ChannelError::InboxClosed {
                channel: super::CHANNEL.into(),
            });
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

    fn intake() -> (WebhookIntake, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(1);
        (WebhookIntake::new("s3cret-token", tx), rx)
    }

    const UPDATE: &[u8] = br#"{"update_id": 5, "message": {"message_id": 1, "date": 0,
        "chat": {"id": 1, "type": "private", "first_name": "A"}, "from": {"id": 1, "is_bot": false, "first_name": "A"},
        "text": "hi"}}"#;

    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn a_delivery_without_the_right_secret_is_refused() {
        let (intake, mut rx) = intake();
        assert_eq!(intake.accept(None, UPDATE).err(), Some(WebhookRejection::Unauthorized));
        assert_eq!(
            intake.accept(Some(b"s3cret-tokeN"), UPDATE).err(),
            Some(WebhookRejection::Unauthorized)
        );
        assert_eq!(
            intake.accept(Some(b"s3cret"), UPDATE).err(),
            Some(WebhookRejection::Unauthorized)
        );
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_delivery_with_the_secret_is_queued_and_a_full_queue_says_try_later() {
        let (intake, mut rx) = intake();
        assert!(intake.accept(Some(b"s3cret-token"), UPDATE).is_ok());
        assert_eq!(
            intake.accept(Some(b"s3cret-token"), UPDATE).err(),
            Some(WebhookRejection::Unavailable)
        );
        assert_eq!(rx.try_recv().map(|(u, _)| u.id.0).ok(), Some(5));
    }

    #[tokio::test]
    async fn a_delivery_is_acknowledged_only_when_the_broker_took_its_message() {
        let (intake, mut rx) = intake();
        let receipts = Receipts::default();
        let receipt = intake.accept(Some(b"s3cret-token"), UPDATE).unwrap();
        let (update, done) = rx.recv().await.unwrap();
        assert_eq!(receipts.hand_over(update.id.0, "1:1", done), Handover::Deliver);
        let waiting = tokio::spawn(receipt.kept(WAIT));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "answered before the broker took it");
        receipts.settle("1:1", true);
        assert!(waiting.await.unwrap());

        // Not kept: refused, so Telegram delivers it again; and that
        // delivery is handed over anew (it was never taken).
        let receipt = intake.accept(Some(b"s3cret-token"), UPDATE).unwrap();
        let (_, done) = rx.recv().await.unwrap();
        assert_eq!(receipts.hand_over(6, "1:2", done), Handover::Deliver);
        receipts.settle("1:2", false);
        assert!(!receipt.kept(WAIT).await);
        let (done, again) = oneshot::channel();
        assert_eq!(receipts.hand_over(6, "1:2", done), Handover::Deliver);
        receipts.settle("1:2", true);
        assert!(Receipt(again).kept(WAIT).await);
    }

    #[tokio::test]
    async fn a_repeated_delivery_is_not_handed_over_twice_nor_acknowledged_early() {
        let receipts = Receipts::default();
        let (first, first_receipt) = oneshot::channel();
        assert_eq!(receipts.hand_over(7, "1:3", first), Handover::Deliver);
        // The repeat comes while the first copy is on its way: it waits for it.
        let (repeat, repeat_receipt) = oneshot::channel();
        assert_eq!(receipts.hand_over(7, "1:3", repeat), Handover::Repeat);
        let repeat_waits = tokio::spawn(Receipt(repeat_receipt).kept(WAIT));
        tokio::task::yield_now().await;
        assert!(!repeat_waits.is_finished());
        receipts.settle("1:3", true);
        assert!(Receipt(first_receipt).kept(WAIT).await);
        assert!(repeat_waits.await.unwrap());
        // A repeat after it was taken is acknowledged at once.
        let (late, late_receipt) = oneshot::channel();
        assert_eq!(receipts.hand_over(7, "1:3", late), Handover::Repeat);
        assert!(Receipt(late_receipt).kept(WAIT).await);

        // Telegram gave up on the answer (503 after the wait) while the
        // message still waited its turn: the redelivery waits with it.
        let (slow, slow_receipt) = oneshot::channel();
        assert_eq!(receipts.hand_over(8, "1:4", slow), Handover::Deliver);
        assert!(!Receipt(slow_receipt).kept(Duration::from_millis(10)).await);
        let (again, again_receipt) = oneshot::channel();
        assert_eq!(receipts.hand_over(8, "1:4", again), Handover::Repeat);
        receipts.settle("1:4", true);
        assert!(Receipt(again_receipt).kept(WAIT).await);
    }

    #[tokio::test]
    async fn an_unreadable_update_is_acknowledged_and_a_receipt_given_up_on_says_no() {
        let (intake, _rx) = intake();
        // A name holding half of an emoji: serde cannot decode it.
        let unreadable = br#"{"update_id": 9, "message": {"message_id": 1, "date": 0,
            "chat": {"id": 1, "type": "private", "first_name": "\ud83d"},
            "from": {"id": 1, "is_bot": false, "first_name": "\ud83d"}, "text": "hi"}}"#;
        assert!(
            intake
                .accept(Some(b"s3cret-token"), unreadable)
                .unwrap()
                .kept(WAIT)
                .await
        );
        let (other, _rx) = self::intake();
        let receipt = other.accept(Some(b"s3cret-token"), UPDATE).unwrap();
        assert!(!receipt.kept(Duration::from_millis(20)).await, "never taken: 503");
    }

    #[test]
    fn a_body_that_is_not_an_update_is_malformed() {
        let (intake, _rx) = intake();
        assert_eq!(
            intake.accept(Some(b"s3cret-token"), b"{oops").err(),
            Some(WebhookRejection::Malformed)
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
