//! Long polling: the `getUpdates` loop that feeds the broker in the default
//! mode. It owns the update offset: an update is confirmed to Telegram only
//! once the broker took it ([`crate::Channel::taken`]: stored, or refused
//! and answered), so a broker killed at any moment finds every update it
//! had not taken again on restart. The offset therefore lags behind what
//! was handed over, and Telegram answers with those updates again: the
//! books in [`Unconfirmed`] say which are new, so none is handed over
//! twice, and one the broker gave back ([`crate::Channel::not_taken`]) is
//! handed over again after a pause. When an answer holds nothing new the
//! loop waits for the broker to take something (or a second) instead of
//! asking again at once. It also waits out flood control, backs off on
//! network errors, and stops promptly when `shutdown` fires: it then gives
//! the broker a moment to take what it was handed, and confirms up to the
//! first update still not taken. It routes
//! nothing itself ([`TelegramChannel::message_or_answer`] does), and logs
//! update ids only.

use super::api::Failure;
use super::inbound::{self, Me};
use super::unconfirmed::Unconfirmed;
use super::updates::{self, Batch};
use super::{CHANNEL, TelegramChannel, stopped};
use crate::retry::{Backoff, pause};
use crate::{ChannelError, Inbound, Shutdown};
use std::time::Duration;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::{Request, Requester};
use tokio::sync::mpsc;

/// How long the final offset confirmation may take at shutdown.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// At shutdown, how long the broker may still take what it was handed
/// before the final confirmation (what it takes later comes again after a
/// restart: a duplicate, never a loss).
const SETTLE_GRACE: Duration = Duration::from_secs(2);

/// The longest wait before asking again when an answer held nothing new:
/// an update given back comes due, or the broker took something without
/// the wake-up being seen.
const RECHECK: Duration = Duration::from_secs(1);

/// Polls until `shutdown` fires (Ok) or polling cannot work at all: the
/// token is refused or the broker stopped taking messages (Err).
pub(crate) async fn run(
    channel: &TelegramChannel,
    me: &Me,
    inbox: &mpsc::Sender<Inbound>,
    shutdown: &mut Shutdown,
) -> Result<(), ChannelError> {
    let bot = channel.api.bot();
    let timeout = u32::try_from(channel.poll_timeout.as_secs()).unwrap_or(u32::MAX);
    let mut backoff = Backoff::default();
    loop {
        let result = tokio::select! {
            result = updates::fetch(&channel.api, channel.unconfirmed.offset(), timeout) => result,
            _ = stopped(shutdown) => break,
        };
        let batch = match result {
            Ok(batch) => {
                channel.link.up();
                backoff.reset();
                batch
            }
            Err(failure) => {
                channel.link.down();
                let wait = match failure {
                    Failure::Unauthorized => return Err(receive_error(Failure::Unauthorized)),
                    Failure::RetryAfter(wait) => backoff.next(Some(wait)),
                    Failure::WebhookActive => {
                        tracing::warn!("telegram: a webhook is set but mode is polling; removing the webhook");
                        if let Err(e) = bot.delete_webhook().send().await {
                            tracing::warn!(error = %channel.api.failure(e), "telegram: could not remove the webhook");
                        }
                        backoff.next(None)
                    }
                    failure => {
                        let wait = backoff.next(None);
                        tracing::warn!(error = %failure, retry_in_secs = wait.as_secs(), "telegram: getUpdates failed");
                        wait
                    }
                };
                if !pause(wait, shutdown).await {
                    break;
                }
                continue;
            }
        };
        let new = match hand_over_new(channel, &batch, me, inbox, shutdown).await? {
            Some(new) => new,
            None => break,
        };
        // Nothing new but updates the broker has not taken yet: asking
        // again now would bring the same answer at once.
        if new == 0 && !batch.updates.is_empty() && !waited_for_news(&channel.unconfirmed, shutdown).await {
            break;
        }
    }
    confirm_at_shutdown(channel).await;
    Ok(())
}

/// Hands the batch's updates that are due ([`Unconfirmed::is_due`]) to the
/// broker in order, answering or skipping those without a message for it.
/// Returns how many were due, or `None` when shutdown came first.
async fn hand_over_new(
    channel: &TelegramChannel,
    batch: &Batch,
    me: &Me,
    inbox: &mpsc::Sender<Inbound>,
    shutdown: &mut Shutdown,
) -> Result<Option<usize>, ChannelError> {
    let books = &channel.unconfirmed;
    let mut new = 0;
    for update in &batch.updates {
        let id = update.id.as_offset() - 1;
        if !books.is_due(id) {
            continue;
        }
        new += 1;
        let Some(message) = channel.message_or_answer(update, inbound::route(update, me)) else {
            books.dealt_with(id);
            continue;
        };
        // Booked before it goes: the broker may take it at once.
        let msg_id = message.msg_id.clone();
        books.hand_over(id, &msg_id);
        let sent = tokio::select! {
            sent = inbox.send(message) => sent,
            _ = stopped(shutdown) => {
                books.give_back(&msg_id);
                return Ok(None);
            }
        };
        if sent.is_err() {
            books.give_back(&msg_id);
            return Err(ChannelError::InboxClosed {
                channel: CHANNEL.into(),
            });
        }
    }
    // Updates that could not be decoded count as taken (once every decoded
    // one before them was dealt with).
    if let Some(next) = batch.next_offset {
        books.seen_up_to(next - 1);
    }
    Ok(Some(new))
}

/// Waits until the broker settles an update, or [`RECHECK`]; false when
/// shutdown came first.
async fn waited_for_news(books: &Unconfirmed, shutdown: &mut Shutdown) -> bool {
    tokio::select! {
        _ = books.settled() => true,
        _ = tokio::time::sleep(RECHECK) => true,
        _ = stopped(shutdown) => false,
    }
}

/// Waits up to [`SETTLE_GRACE`] for the broker to take (or give back)
/// every update it was handed, then confirms what it took.
async fn confirm_at_shutdown(channel: &TelegramChannel) {
    let books = &channel.unconfirmed;
    let _ = tokio::time::timeout(SETTLE_GRACE, async {
        while books.with_broker() {
            books.settled().await;
        }
    })
    .await;
    confirm(channel, books.offset()).await;
}

/// Tells Telegram which updates the broker took, so a restart does not
/// deliver them twice (the next `getUpdates` would have done it).
async fn confirm(channel: &TelegramChannel, offset: Option<i32>) {
    let Some(offset) = offset else { return };
    let request = channel.api.bot().get_updates().offset(offset).limit(1).timeout(0);
    match tokio::time::timeout(CONFIRM_TIMEOUT, request.send()).await {
        Ok(Ok(_)) => tracing::debug!(offset, "telegram: update offset confirmed"),
        Ok(Err(e)) => tracing::warn!(error = %channel.api.failure(e), "telegram: could not confirm the update offset"),
        Err(_) => tracing::warn!("telegram: confirming the update offset timed out"),
    }
}

pub(crate) fn receive_error(failure: Failure) -> ChannelError {
    ChannelError::Receive {
        channel: CHANNEL.into(),
        reason: failure.to_string(),
    }
}
