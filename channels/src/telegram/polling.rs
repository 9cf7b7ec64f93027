//! Long polling: the `getUpdates` loop that feeds the broker in the default
//! mode. It owns the update offset (an update is confirmed only after the
//! broker has it, so a restart redelivers rather than loses), waits out
//! flood control, backs off on network errors, and stops promptly when
//! `shutdown` fires. It routes nothing itself ([`TelegramChannel::deliver`]
//! does).

use super::api::Failure;
use super::{CHANNEL, TelegramChannel, stopped};
use crate::{ChannelError, Inbound, Shutdown};
use std::time::Duration;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::AllowedUpdate;
use tokio::sync::mpsc;

use super::inbound::Me;

/// Longest pause between attempts after repeated network errors.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long the final offset confirmation may take at shutdown.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// Doubling pauses (1 s, 2 s, … up to [`MAX_BACKOFF`]) between failed
/// attempts; reset by a success.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub fn next(&mut self) -> Duration {
        let wait = Duration::from_secs(1u64 << self.failures.min(6)).min(MAX_BACKOFF);
        self.failures += 1;
        wait
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Sleeps `wait` unless `shutdown` fires first; false when it did.
pub(crate) async fn pause(wait: Duration, shutdown: &mut Shutdown) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = stopped(shutdown) => false,
    }
}

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
        let mut request = bot
            .get_updates()
            .timeout(timeout)
            .allowed_updates([AllowedUpdate::Message]);
        if let Some(offset) = offset {
            request = request.offset(offset);
        }
        let result = tokio::select! {
            result = request.send() => result,
            _ = stopped(shutdown) => break,
        };
        let updates = match result {
            Ok(updates) => {
                channel.link.up();
                backoff.reset();
                updates
            }
            Err(error) => {
                channel.link.down();
                let wait = match channel.api.failure(error) {
                    Failure::Unauthorized => return Err(receive_error(Failure::Unauthorized)),
                    Failure::RetryAfter(wait) => wait,
                    Failure::WebhookActive => {
                        tracing::warn!("telegram: a webhook is set but mode is polling; removing the webhook");
                        if let Err(e) = bot.delete_webhook().send().await {
                            tracing::warn!(error = %channel.api.failure(e), "telegram: could not remove the webhook");
                        }
                        backoff.next()
                    }
                    failure => {
                        let wait = backoff.next();
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
        for update in &updates {
            let delivered = tokio::select! {
                delivered = channel.deliver(update, me, inbox) => delivered,
                _ = stopped(shutdown) => break,
            };
            delivered?;
            offset = Some(update.id.as_offset());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute_and_resets() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..8).map(|_| backoff.next().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        backoff.reset();
        assert_eq!(backoff.next(), Duration::from_secs(1));
    }
}
