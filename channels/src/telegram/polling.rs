//! Long polling: the `getUpdates` loop that feeds the broker in the default
//! mode. It owns the update offset (an update is confirmed only after the
//! broker has it, so a restart redelivers rather than loses), waits out
//! flood control, backs off on network errors, and stops promptly when
//! `shutdown` fires. It routes nothing itself ([`TelegramChannel::deliver`]
//! does).

use super::api::Failure;
use super::updates;
use super::{CHANNEL, TelegramChannel, stopped};
use crate::retry::{Backoff, pause};
use crate::{ChannelError, Inbound, Shutdown};
use std::time::Duration;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::{Request, Requester};
use tokio::sync::mpsc;

use super::inbound::Me;

/// How long the final offset confirmation may take at shutdown.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

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
    let mut offset: Option<i32> = None;
    let mut backoff = Backoff::default();
    loop {
        let result = tokio::select! {
            result = updates::fetch(&channel.api, offset, timeout) => result,
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
        for update in &batch.updates {
            let delivered = tokio::select! {
                delivered = channel.deliver(update, me, inbox) => delivered,
                _ = stopped(shutdown) => break,
            };
            delivered?;
            offset = Some(update.id.as_offset());
        }
        // Updates that could not be decoded are confirmed too (once every
        // decoded one before them is with the broker).
        if !stopped_now(shutdown) && batch.next_offset > offset {
            offset = batch.next_offset;
        }
        if stopped_now(shutdown) {
            break;
        }
    }
    confirm(channel, offset).await;
    Ok(())
}

fn stopped_now(shutdown: &Shutdown) -> bool {
    *shutdown.borrow()
}

/// Tells Telegram which updates the broker already has, so a restart does
/// not deliver them twice (the next `getUpdates` would have done it).
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
