//! Spending limits (`limits.userTokensPerDay`, `limits.channelTokensPerDay`)
//! and the usage they are checked against: every model call of a turn is
//! added to the user's day (midnight in their timezone) and the channel's
//! (the app's timezone) through the memory seam, so brokers sharing a
//! store share the count. A question asked once a day's budget is spent
//! gets a short notice instead of a model call; the notice settles it
//! like the other notices (stored, then shown).
//!
//! What it must not do: refuse on a usage it could not read (the store
//! failing is logged and the question answered), or say another user's
//! numbers.

use crate::channel_memory::ChannelMemory;
use crate::model::Usage;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use mnemo_sessions::SafeName;
use mnemo_sessions::commands::remind;
use mnemo_sessions::store::{MemoryStore, UserMemory};
use mnemo_sessions::usage::{Days, Purpose, Spent};

use super::intake::reply_record;
use super::{Pipeline, TurnError, store_reply};
use crate::dispatch::Backlog;
use crate::ops::turn_log::Outcome;
use mnemo_channels::Inbound;

/// Where the day's budget reads the time (the wall clock, or a test's):
/// the scheduler's clock type.
pub use crate::scheduler::Clock;

impl Pipeline {
    /// The time for the day's budget (the injected clock, see
    /// [`Pipeline::set_clock`]).
    pub(super) fn now(&self) -> DateTime<Utc> {
        let clock = self.clock.read().map(|c| c.clone());
        clock.map_or_else(|_| Utc::now(), |c| c())
    }

    /// The user's timezone (`/session timezone`, else the app's): their
    /// day ends at its midnight, and the model reads the time in it. Read
    /// once per turn.
    pub(super) async fn zone(&self, mine: &mut dyn UserMemory) -> Tz {
        match remind::zone_of(mine, self.parts.tz).await {
            Ok(zone) => zone,
            Err(e) => {
                tracing::warn!(user = %mine.user().log_id(), error = %e, "the user's timezone could not be read; the app's is used");
                self.parts.tz
            }
        }
    }

    /// The user's timezone, and their day and the channel's now.
    pub(super) async fn today(&self, mine: &mut dyn UserMemory) -> (Tz, Days) {
        let zone = self.zone(mine).await;
        (zone, self.days(zone, self.now()))
    }

    /// The user's and the channel's day at `now`.
    pub(super) fn days(&self, zone: Tz, now: DateTime<Utc>) -> Days {
        Days::of(now, zone, self.parts.tz)
    }

    /// The notice instead of a model call when the user's or the
    /// channel's budget for the day is spent; `None`: answer.
    pub(super) async fn over_budget(
        &self,
        memory: &ChannelMemory,
        user: &SafeName,
        zone: Tz,
        days: Days,
    ) -> Option<String> {
        let limits = &self.parts.limits;
        let store = &memory.store;
        if limits.user_tokens_per_day > 0 {
            match store.usage(user, days.user).await {
                Ok(used) if used >= limits.user_tokens_per_day => {
                    return Some(user_notice(limits.user_tokens_per_day, zone));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(channel = store.channel(), user = %user.log_id(), error = %e, "usage unreadable; the question is answered unmetered")
                }
            }
        }
        if limits.channel_tokens_per_day > 0 {
            match store.channel_usage(days.channel).await {
                Ok(used) if used >= limits.channel_tokens_per_day => {
                    return Some(channel_notice(self.parts.tz));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(channel = store.channel(), error = %e, "usage unreadable; the question is answered unmetered")
                }
            }
        }
        None
    }

    /// A question asked with the day's budget spent: `notice` settles it
    /// (stored first, then shown, as [`Pipeline::give_up`] does).
    pub(super) async fn refuse_spent(
        &self,
        memory: &ChannelMemory,
        mine: &mut dyn UserMemory,
        message: &Inbound,
        notice: String,
        backlog: &Backlog,
        zone: Tz,
    ) -> Result<Outcome, TurnError> {
        let user = mine.user().clone();
        let due = store_reply(mine, &reply_record(message, notice.clone())).await?;
        tracing::info!(channel = %message.channel, user = %user.log_id(), msg_id = %message.msg_id, "the day's model budget is spent; the user is told");
        self.fold_if_due(memory, &user, due.now(backlog), zone).await;
        self.reply(message, &notice).await;
        Ok(Outcome::OverBudget)
    }
}

/// Adds what model calls reported to `user`'s day (or, with no user,
/// only the channel's own) and the channel's; a failure is logged.
pub(crate) async fn spend(
    store: &dyn MemoryStore,
    user: Option<&SafeName>,
    days: Days,
    purpose: Purpose,
    usage: Option<Usage>,
) {
    let Some(usage) = usage.filter(|u| u.input_tokens > 0 || u.output_tokens > 0) else {
        return;
    };
    let spent = Spent {
        purpose,
        tokens_in: usage.input_tokens,
        tokens_out: usage.output_tokens,
    };
    if let Err(e) = store.add_usage(user, days, spent).await {
        tracing::warn!(channel = store.channel(), purpose = purpose.as_str(), error = %e, "model usage not recorded");
    }
}

/// What a user over their day's budget is told.
pub fn user_notice(limit: u64, zone: Tz) -> String {
    format!(
        "You have used today's allowance of the model ({limit} tokens); it resets at midnight ({zone}). Your message is saved."
    )
}

/// What everyone is told when the channel's budget for the day is spent.
pub fn channel_notice(zone: Tz) -> String {
    format!(
        "This bot has used today's allowance of the model for everyone here; it resets at midnight ({zone}). Your message is saved."
    )
}
