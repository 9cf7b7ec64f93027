//! When a Slack delivery of a message may be acknowledged (the Socket Mode
//! ack, the Events API's 200): only once the broker has taken the message
//! ([`crate::Channel::taken`]: stored, or deliberately refused and
//! answered). Slack delivers again what was not acknowledged, so a broker
//! killed between the handover and the store loses nothing it said it had.
//!
//! [`Receipts::deliver`] hands a message to the broker and waits for the
//! outcome, at most [`TAKE_WAIT`]; [`Receipts::settle`] is how the outcome
//! arrives. Each message is handed over once per outcome: a redelivery of a
//! message already taken is acknowledged without a second handover; one
//! whose first copy is still with the broker waits for that copy's outcome;
//! one whose earlier copy was not taken is handed over again. Keyed by
//! `msg_id` (`channel:ts`), so the two copies Slack sends of a channel
//! mention (`app_mention` and `message`) count as one message too.
//!
//! Knows nothing of Socket Mode or HTTP; logs message ids, never text.

use super::recent::Recent;
use crate::Inbound;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Duration, Instant};

/// How long a delivery waits for the broker to take its message. Slack
/// counts a delivery as failed when it has no ack 3 s after sending it (and
/// sends it again); 2.5 s leaves room for the network and the ack itself.
/// The broker stores a message as it takes it in, so the answer normally
/// comes within milliseconds: a delivery that waits this long is one the
/// broker is struggling with, and is better left to Slack's retry.
pub(super) const TAKE_WAIT: Duration = Duration::from_millis(2_500);

/// How many taken messages are remembered, to acknowledge a redelivery
/// without handing it over twice. Slack's last retry comes about five
/// minutes after the first delivery; a few thousand messages cover that.
const REMEMBERED: usize = 4_096;

/// Whether Slack delivers a message again when this delivery of it is not
/// acknowledged: it retries a delivery up to three times (at once, after a
/// minute, after five), so only its third retry is the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Redelivery {
    Follows,
    Never,
}

/// The deliveries handed to the broker and not yet settled, and the
/// messages recently taken.
pub(super) struct Receipts(Mutex<Waiting>);

struct Waiting {
    /// `msg_id` → every delivery of it waiting for the broker's outcome.
    pending: HashMap<String, Pending>,
    /// `msg_id`s the broker took, oldest forgotten first.
    taken: Recent,
}

struct Pending {
    deliveries: Vec<oneshot::Sender<bool>>,
    /// As the newest delivery said: whether Slack will bring the message
    /// back if it is not taken (what [`Receipts::settle`] reports).
    redelivery: Redelivery,
}

/// What to do with one delivery, and where its outcome arrives.
enum Handover {
    /// Hand the message to the broker.
    Deliver(oneshot::Receiver<bool>),
    /// Already taken (the receiver says so at once), or waiting with its
    /// first copy.
    Repeat(oneshot::Receiver<bool>),
}

impl Receipts {
    pub(super) fn new() -> Self {
        Receipts(Mutex::new(Waiting {
            pending: HashMap::new(),
            taken: Recent::new(REMEMBERED),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // Every change is one call that cannot panic half-way: a poisoned
        // lock is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `message` to the broker through `inbox` (unless it is a
    /// repeat) and waits, at most `limit` in all, for the broker's word:
    /// true when this delivery may be acknowledged (the message is taken),
    /// false when it must not be (not taken, not yet, or the broker is
    /// gone), so that Slack delivers it again. Cancelling the future before
    /// the message is in the inbox counts as not taken.
    pub(super) async fn deliver(
        &self,
        message: Inbound,
        redelivery: Redelivery,
        inbox: &mpsc::Sender<Inbound>,
        limit: Duration,
    ) -> bool {
        let deadline = Instant::now() + limit;
        let msg_id = message.msg_id.clone();
        let outcome = match self.register(&msg_id, redelivery) {
            Handover::Repeat(outcome) => {
                tracing::debug!(%msg_id, "slack: redelivered message not handed over twice");
                outcome
            }
            Handover::Deliver(outcome) => {
                let mut unsent = Unsent {
                    receipts: self,
                    msg_id: Some(&msg_id),
                };
                if let Ok(Ok(())) = tokio::time::timeout_at(deadline, inbox.send(message)).await {
                    // With the broker now: it settles the message itself.
                    unsent.msg_id = None;
                }
                drop(unsent);
                outcome
            }
        };
        match tokio::time::timeout_at(deadline, outcome).await {
            Ok(Ok(true)) => true,
            Ok(_) => {
                tracing::debug!(%msg_id, "slack: message not taken; left for Slack to deliver again");
                false
            }
            Err(_) => {
                tracing::warn!(
                    %msg_id,
                    wait_ms = limit.as_millis() as u64,
                    "slack: message not taken in time; left for Slack to deliver again"
                );
                false
            }
        }
    }

    fn register(&self, msg_id: &str, redelivery: Redelivery) -> Handover {
        let (done, outcome) = oneshot::channel();
        let mut waiting = self.lock();
        if waiting.taken.contains(msg_id) {
            let _ = done.send(true);
            return Handover::Repeat(outcome);
        }
        // Every message handed over is settled by the broker, so an entry
        // lives as long as its message waits, even past a delivery that gave
        // up on it: a redelivery then waits with it instead of reaching the
        // broker twice.
        if let Some(pending) = waiting.pending.get_mut(msg_id) {
            pending.deliveries.retain(|d| !d.is_closed());
            pending.deliveries.push(done);
            pending.redelivery = redelivery;
            return Handover::Repeat(outcome);
        }
        let pending = Pending {
            deliveries: vec![done],
            redelivery,
        };
        waiting.pending.insert(msg_id.to_string(), pending);
        Handover::Deliver(outcome)
    }

    /// The broker's outcome for `msg_id`: every delivery of it still
    /// waiting is answered, and a taken message is remembered. Returns
    /// whether Slack will deliver the message again: only for one not
    /// taken whose newest delivery was not Slack's last try (false too for
    /// a message no delivery waits for, such as a slash command).
    pub(super) fn settle(&self, msg_id: &str, taken: bool) -> bool {
        let mut waiting = self.lock();
        let Some(pending) = waiting.pending.remove(msg_id) else {
            return false;
        };
        if taken {
            waiting.taken.insert(msg_id);
        }
        drop(waiting);
        for done in pending.deliveries {
            let _ = done.send(taken);
        }
        !taken && pending.redelivery == Redelivery::Follows
    }
}

/// A message registered but not (yet) in the broker's inbox: dropped while
/// it still names one, it settles that message as not taken, so a
/// cancelled or failed handover never leaves its redeliveries waiting for
/// an outcome that cannot come.
struct Unsent<'a> {
    receipts: &'a Receipts,
    msg_id: Option<&'a str>,
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(msg_id) = self.msg_id {
            self.receipts.settle(msg_id, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatKind;
    use std::sync::Arc;

    const WAIT: Duration = Duration::from_secs(5);

    fn message(msg_id: &str) -> Inbound {
        Inbound {
            channel: "slack".into(),
            user_id: "U1".into(),
            user_name: None,
            chat_id: "D1".into(),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: msg_id.into(),
            text: "hi".into(),
            ts: chrono::Utc::now(),
            addressed: true,
            interaction: None,
            attachments: Vec::new(),
        }
    }

    /// Delivers `msg_id` in the background, as a Socket Mode callback or an
    /// Events API request would.
    fn deliver(
        receipts: &Arc<Receipts>,
        inbox: &mpsc::Sender<Inbound>,
        msg_id: &str,
        redelivery: Redelivery,
    ) -> tokio::task::JoinHandle<bool> {
        let (receipts, inbox, message) = (receipts.clone(), inbox.clone(), message(msg_id));
        tokio::spawn(async move { receipts.deliver(message, redelivery, &inbox, WAIT).await })
    }

    #[tokio::test]
    async fn a_delivery_may_be_acknowledged_only_once_its_message_is_taken() {
        let receipts = Arc::new(Receipts::new());
        let (inbox, mut broker) = mpsc::channel(4);
        let delivery = deliver(&receipts, &inbox, "D1:1.1", Redelivery::Follows);
        assert_eq!(broker.recv().await.map(|m| m.msg_id).as_deref(), Some("D1:1.1"));
        tokio::task::yield_now().await;
        assert!(!delivery.is_finished(), "acknowledged before the broker took it");
        assert!(
            !receipts.settle("D1:1.1", true),
            "a taken message is not delivered again"
        );
        assert!(delivery.await.unwrap());

        // A redelivery of it is acknowledged without reaching the broker.
        assert!(deliver(&receipts, &inbox, "D1:1.1", Redelivery::Follows).await.unwrap());
        assert!(broker.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_message_not_taken_is_not_acknowledged_and_its_redelivery_is_handed_over_again() {
        let receipts = Arc::new(Receipts::new());
        let (inbox, mut broker) = mpsc::channel(4);
        let delivery = deliver(&receipts, &inbox, "D1:2.2", Redelivery::Follows);
        broker.recv().await;
        assert!(receipts.settle("D1:2.2", false), "Slack delivers it again");
        assert!(!delivery.await.unwrap());

        let again = deliver(&receipts, &inbox, "D1:2.2", Redelivery::Never);
        assert_eq!(broker.recv().await.map(|m| m.msg_id).as_deref(), Some("D1:2.2"));
        assert!(
            !receipts.settle("D1:2.2", false),
            "Slack's last try: it will not come again"
        );
        assert!(!again.await.unwrap());
    }

    #[tokio::test]
    async fn a_redelivery_while_the_first_copy_waits_is_not_handed_over_and_shares_its_outcome() {
        let receipts = Arc::new(Receipts::new());
        let (inbox, mut broker) = mpsc::channel(4);
        let first = receipts.deliver(
            message("C1:3.3"),
            Redelivery::Follows,
            &inbox,
            Duration::from_millis(20),
        );
        assert!(!first.await, "never taken in time: not acknowledged");
        broker.recv().await;
        // Still with the broker: the redelivery waits for it.
        let again = deliver(&receipts, &inbox, "C1:3.3", Redelivery::Follows);
        tokio::task::yield_now().await;
        assert!(!again.is_finished());
        receipts.settle("C1:3.3", true);
        assert!(again.await.unwrap());
        assert!(broker.try_recv().is_err(), "handed over once");
    }

    #[tokio::test]
    async fn a_message_that_never_reached_the_broker_is_handed_over_on_its_redelivery() {
        let receipts = Arc::new(Receipts::new());
        let (inbox, mut broker) = mpsc::channel(1);
        inbox.send(message("D1:0.1")).await.unwrap();
        // The inbox is full and stays so: the handover gives up.
        let stuck = receipts.deliver(
            message("D1:4.4"),
            Redelivery::Follows,
            &inbox,
            Duration::from_millis(20),
        );
        assert!(!stuck.await);
        broker.recv().await;
        let again = deliver(&receipts, &inbox, "D1:4.4", Redelivery::Follows);
        assert_eq!(broker.recv().await.map(|m| m.msg_id).as_deref(), Some("D1:4.4"));
        receipts.settle("D1:4.4", true);
        assert!(again.await.unwrap());
    }

    #[test]
    fn an_outcome_for_a_message_no_delivery_waits_for_says_it_will_not_come_again() {
        let receipts = Receipts::new();
        assert!(!receipts.settle("cmd:tr1", false));
        assert!(!receipts.settle("cmd:tr1", true));
    }
}
