//! The gate every message passes before anything is stored (DESIGN §2:
//! access check → rate limit → `/session`? → …): the one call the pipeline
//! makes into access control. It reads each channel's rules through an
//! [`AccessStore`], runs pairing for strangers, applies the per-user
//! [`Limiter`], and says whether the turn goes on and what, if anything,
//! the sender is told.
//!
//! What it must not do: store, log or forward the text of a refused message
//! (log lines carry channel, user, message id and the reason only), ask the
//! model anything, or let chat text change who is allowed.

use super::decide::{CONSOLE, Decision, IgnoreReason, decide};
use super::limits::Limiter;
use super::pairing::{self, CodeSource, PairingStep, RandomCodes};
use super::store::AccessStore;
use crate::config::LimitsConfig;
use chrono::{DateTime, Utc};
use mnemo_channels::Inbound;
use mnemo_sessions::{Layout, SafeName};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Sent with the answer to an approved sender's first message after
/// `mnemo access pair` (the CLI cannot reach the platform itself).
pub const PAIRED: &str = "You're paired: the owner approved you, so I'll answer you from now on.";

/// Strangers told "try later" remembered at most, to bound memory under a
/// flood of new ids; forgetting them only allows one more notice each.
const MAX_TOLD_BUSY: usize = 4096;

/// The gate's verdict on one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Go on with the turn; send `greeting` first if there is one.
    Proceed { greeting: Option<String> },
    /// Stop here: nothing is stored and the model is not asked. `reply`, if
    /// any, is all the sender hears.
    Refused { reply: Option<String> },
}

pub struct Gate {
    state_root: PathBuf,
    /// One store per channel, made on first use. A std mutex, held only to
    /// look up or insert.
    stores: Mutex<HashMap<String, Arc<AccessStore>>>,
    limiter: Limiter,
    codes: Box<dyn CodeSource>,
    /// (channel, user) already told that all pairing slots are taken.
    told_busy: Mutex<HashSet<(String, String)>>,
}

impl Gate {
    pub fn new(state_root: impl Into<PathBuf>, limits: &LimitsConfig) -> Self {
        Gate {
            state_root: state_root.into(),
            stores: Mutex::new(HashMap::new()),
            limiter: Limiter::new(limits),
            codes: Box::new(RandomCodes),
            told_busy: Mutex::new(HashSet::new()),
        }
    }

    /// Uses `codes` for pairing codes (tests).
    pub fn with_codes(mut self, codes: Box<dyn CodeSource>) -> Self {
        self.codes = codes;
        self
    }

    /// The verdict on `message`, received at `now`.
    pub fn admit(&self, message: &Inbound, now: DateTime<Utc>) -> Admission {
        self.admit_at(message, now, Instant::now())
    }

    /// [`Gate::admit`] with the limiter's clock given.
    pub fn admit_at(&self, message: &Inbound, now: DateTime<Utc>, clock: Instant) -> Admission {
        let console = message.channel == CONSOLE;
        let store = self.store(&message.channel);
        let mut decision = if console {
            Decision::Allow { greet_paired: false }
        } else {
            decide(&store.current(now), message)
        };
        if decision == Decision::Pair {
            match self.pair(&store, message, now) {
                Ok(refused) => return refused,
                // Approved (or the rules changed) since the cached read.
                Err(fresh) => decision = fresh,
            }
        }
        let greet = match decision {
            Decision::Allow { greet_paired } => greet_paired,
            Decision::Ignore(reason) => return refused(message, reason),
            Decision::Pair => {
                crate::ops::metrics::metrics().refused(&message.channel, "pairing");
                return Admission::Refused { reply: None };
            }
        };
        let chars = message.text.chars().count();
        if let Err(refusal) = self
            .limiter
            .check(&message.channel, &message.user_id, chars, !console, clock)
        {
            tracing::info!(
                channel = %message.channel, user = %SafeName::of(&message.user_id), msg_id = %message.msg_id,
                reason = refusal.hit.reason(), told = refusal.tell, "message refused"
            );
            crate::ops::metrics::metrics().refused(&message.channel, refusal.hit.label());
            return Admission::Refused {
                reply: refusal.tell.then(|| refusal.hit.reply()),
            };
        }
        let greeting = if greet {
            self.take_greeting(&store, message)
        } else {
            None
        };
        Admission::Proceed { greeting }
    }

    /// Whether a sender whose queue is full should be told so: only someone
    /// allowed to talk, and once per window.
    pub fn tell_queue_full(&self, message: &Inbound) -> bool {
        let allowed = message.channel == CONSOLE
            || matches!(
                decide(&self.store(&message.channel).current(Utc::now()), message),
                Decision::Allow { .. }
            );
        allowed
            && self
                .limiter
                .tell_queue_full(&message.channel, &message.user_id, Instant::now())
    }

    fn store(&self, channel: &str) -> Arc<AccessStore> {
        let mut stores = lock(&self.stores);
        // The common case, without allocating the key.
        if let Some(store) = stores.get(channel) {
            return Arc::clone(store);
        }
        let store = stores
            .entry(channel.to_string())
            .or_insert_with(|| Arc::new(AccessStore::new(Layout::new(&self.state_root, channel).access_path())));
        Arc::clone(store)
    }

    /// Runs the pairing step on the file as it is on disk now. `Err` with
    /// the fresh decision when that is no longer "pair".
    fn pair(&self, store: &AccessStore, message: &Inbound, now: DateTime<Utc>) -> Result<Admission, Decision> {
        let outcome = store.update(|rules| match decide(rules, message) {
            Decision::Pair => Ok(pairing::step(rules, message, now, self.codes.as_ref())),
            other => Err(other),
        });
        let step = match outcome {
            Ok(Some(Ok(step))) => step,
            Ok(Some(Err(fresh))) => return Err(fresh),
            // Degraded: the fallback never pairs, so this is a race with a
            // corruption; refuse quietly.
            Ok(None) => return Ok(Admission::Refused { reply: None }),
            Err(e) => {
                tracing::error!(channel = %message.channel, error = %e, "pairing request not recorded; the stranger is not answered");
                return Ok(Admission::Refused { reply: None });
            }
        };
        let what = match &step {
            PairingStep::Issued { .. } => "pairing code issued",
            PairingStep::Reminded { .. } => "pairing code repeated",
            PairingStep::Quiet => "pairing reply cap reached",
            PairingStep::Full => "pairing slots full",
        };
        let told = step != PairingStep::Full || self.first_busy_notice(message);
        tracing::info!(
            channel = %message.channel, user = %SafeName::of(&message.user_id), msg_id = %message.msg_id,
            "stranger's direct message not answered: {what} (see `mnemo access list {}`)", message.channel
        );
        crate::ops::metrics::metrics().refused(&message.channel, "pairing");
        Ok(Admission::Refused {
            reply: if told { step.reply(&message.channel) } else { None },
        })
    }

    fn first_busy_notice(&self, message: &Inbound) -> bool {
        let mut told = lock(&self.told_busy);
        if told.len() >= MAX_TOLD_BUSY {
            told.clear();
        }
        told.insert((message.channel.clone(), message.user_id.clone()))
    }

    /// Clears the sender's approval notice; the greeting if there was one.
    fn take_greeting(&self, store: &AccessStore, message: &Inbound) -> Option<String> {
        let had = store.update(|rules| {
            let before = rules.approved.len();
            rules.approved.retain(|n| n.user_id != message.user_id);
            rules.approved.len() != before
        });
        match had {
            Ok(Some(true)) => Some(PAIRED.to_string()),
            Ok(_) => None,
            Err(e) => {
                // Not greeting beats greeting on every message.
                tracing::warn!(channel = %message.channel, error = %e, "could not clear the approval notice; no greeting");
                None
            }
        }
    }
}

fn refused(message: &Inbound, reason: IgnoreReason) -> Admission {
    tracing::info!(
        channel = %message.channel, user = %SafeName::of(&message.user_id), msg_id = %message.msg_id,
        reason = %reason, "message ignored"
    );
    crate::ops::metrics::metrics().refused(&message.channel, reason.label());
    Admission::Refused { reply: None }
}

/// Locks a std mutex, recovering from poisoning: each holder does one
/// insert or lookup, so the data stays consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
