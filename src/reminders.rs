//! Delivering reminders: a loop that every second asks each channel's
//! store for the reminders due ([`MemoryStore::claim_reminders`]: each
//! claimed by one broker, once) and posts them to the chat they were set
//! in, then ends each claim: posted (a repeating one moves to its next
//! time), to be retried (the platform failed; a few times, backing off),
//! or missed (its time passed more than `reminders.maxLateHours` ago, or
//! every retry failed), which the user hears of in their next
//! conversation there. A reminder posted late says so: "(late: the bot was
//! offline at 09:00)". What was posted goes into the user's short-term
//! log as the bot's message, so a follow-up has its context.
//!
//! The loop reads the time only through its [`Clock`], so a test can move
//! it (a repeating reminder's next time is days away).
//!
//! What it must not do: log or count a reminder's text, or post one
//! anywhere but its own chat.

use crate::app::App;
use crate::scheduler::Clock;
use chrono::{DateTime, Duration as Span, Utc};
use futures_util::StreamExt as _;
use mnemo_channels::{Outbound, OutboundBody};
use mnemo_sessions::commands::remind;
use mnemo_sessions::reminders::{Claimed, Finish, parse_zone};
use mnemo_sessions::store::MemoryStore;
use mnemo_sessions::{Record, Role};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the stores are asked for due reminders.
const EVERY: Duration = Duration::from_secs(1);
/// Reminders claimed at once per channel.
const BATCH: usize = 20;
/// Reminders of one channel posted at the same time.
const POSTS_AT_ONCE: usize = 8;
/// Posts tried for one time before it is missed.
const MAX_ATTEMPTS: u32 = 5;
/// A reminder posted this long after its time says it is late.
const LATE_AFTER_SECS: i64 = 120;

pub struct Delivery {
    task: JoinHandle<()>,
}

impl Delivery {
    /// Starts the loop on the wall clock; it stops when `stop` fires.
    pub fn start(app: App, stop: watch::Receiver<bool>) -> Delivery {
        Delivery::start_with_clock(app, stop, Arc::new(Utc::now))
    }

    /// Starts the loop reading the time from `clock`.
    pub fn start_with_clock(app: App, mut stop: watch::Receiver<bool>, clock: Clock) -> Delivery {
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => pass(&app, clock()).await,
                    _ = crate::shutdown::fired(&mut stop) => break,
                }
            }
        });
        Delivery { task }
    }

    /// Stops the loop (a claim it was posting is kept as missed if the
    /// post did not end: never sent twice).
    pub async fn stop(self) {
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// One round: every channel's due reminders, claimed and posted.
pub async fn pass(app: &App, now: DateTime<Utc>) {
    for (name, memory) in app.memories() {
        if app.channel(name).is_none() {
            continue;
        }
        let claimed = match memory.store.claim_reminders(now, BATCH).await {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(channel = %name, error = %e, "due reminders could not be claimed; asked again in a second");
                continue;
            }
        };
        // Side by side, a few at a time: a platform slowing one post down
        // (its rate limit, a retry) does not hold up the others.
        futures_util::stream::iter(claimed)
            .for_each_concurrent(POSTS_AT_ONCE, |claim| deliver(app, &memory.store, claim, now))
            .await;
    }
}

/// Posts one claimed reminder and ends its claim.
async fn deliver(app: &App, store: &Arc<dyn MemoryStore>, claim: Claimed, now: DateTime<Utc>) {
    let Claimed { user, reminder: r } = claim;
    // Where it was set: a linked account's platform may not be its store's.
    let name = r.place.platform.clone().unwrap_or_else(|| store.channel().to_string());
    let Some(channel) = app.channel(&name) else {
        tracing::warn!(channel = %name, user = %user.log_id(), id = %r.id, "a reminder's platform is not served now; tried again later");
        end(
            store,
            &user,
            &r.id,
            Finish::Retry {
                at: now + Span::minutes(5),
            },
        )
        .await;
        return;
    };
    let metrics = crate::ops::metrics::metrics();
    let next = r.next_after(now.max(r.at));
    let late = now - r.at;
    if late > Span::hours(i64::from(app.parts().reminders.max_late_hours)) {
        tracing::info!(channel = %name, user = %user.log_id(), id = %r.id, "a reminder's time passed too long ago; the user is told it was missed");
        metrics.reminder(&name, "missed");
        end(store, &user, &r.id, Finish::Missed { next }).await;
        return;
    }
    let zone = parse_zone(&r.timezone).unwrap_or(app.parts().tz);
    let is_late = late > Span::seconds(LATE_AFTER_SECS);
    let text = if is_late {
        format!(
            "⏰ Reminder: {} (late: the bot was offline at {})",
            r.text,
            remind::local_time(r.at, zone)
        )
    } else {
        format!("⏰ Reminder: {}", r.text)
    };
    let out = Outbound {
        channel: name.clone(),
        chat_id: r.place.chat_id.clone(),
        thread_id: r.place.thread_id.clone(),
        reply_to: None,
        ephemeral: false,
        interaction: None,
        private_to: None,
        body: OutboundBody::Text(text.clone()),
    };
    match channel.send(out).await {
        Ok(()) => {
            metrics.reminder(&name, if is_late { "late" } else { "delivered" });
            tracing::info!(channel = %name, user = %user.log_id(), id = %r.id, "reminder posted");
            end(store, &user, &r.id, Finish::Posted { next }).await;
            let record = Record {
                ts: now,
                role: Role::Assistant,
                text,
                msg_id: format!("reminder-{}-{}", r.id, r.at.timestamp()),
                channel: name.clone(),
                thread_id: r.place.thread_id.clone(),
                chat_id: Some(r.place.chat_id.clone()),
                user_name: None,
            };
            // In its own task: on Postgres the append waits for the
            // user's turn in progress, which must not hold up the others.
            let store = store.clone();
            tokio::spawn(async move {
                let stored = match store.user(&user).await {
                    Ok(mut mine) => mine.append(&record, now).await.map(|_| ()),
                    Err(e) => Err(e),
                };
                if let Err(e) = stored {
                    tracing::warn!(channel = %record.channel, user = %user.log_id(), error = %e, "a posted reminder could not be added to the user's log");
                }
            });
        }
        Err(e) if r.attempts + 1 >= MAX_ATTEMPTS => {
            tracing::warn!(channel = %name, user = %user.log_id(), id = %r.id, error = %e, "a reminder could not be posted after {MAX_ATTEMPTS} tries; the user is told it was missed");
            metrics.reminder(&name, "failed");
            end(store, &user, &r.id, Finish::Missed { next }).await;
        }
        Err(e) => {
            let wait = Span::seconds(15 << r.attempts.min(6));
            tracing::warn!(channel = %name, user = %user.log_id(), id = %r.id, error = %e, retry_in_secs = wait.num_seconds(), "a reminder could not be posted; tried again");
            end(store, &user, &r.id, Finish::Retry { at: now + wait }).await;
        }
    }
}

async fn end(store: &Arc<dyn MemoryStore>, user: &mnemo_sessions::SafeName, id: &str, finish: Finish) {
    if let Err(e) = store.finish_reminder(user, id, finish).await {
        // The claim stays; after its time it is taken for a dead broker's
        // and kept as missed, never posted twice.
        tracing::error!(channel = store.channel(), user = %user.log_id(), id, error = %e, "a reminder's claim could not be ended");
    }
}
