//! The gate every message passes before anything is stored (DESIGN §2:
//! access check → rate limit → `/session`? → …): the one call the pipeline
//! makes into access control. It reads each channel's rules through an
//! [`AccessStore`] (the file store) or a [`DbRules`] (`store.kind:
//! postgres`: the rules in the database, shared by every broker), runs
//! pairing for strangers, applies the per-user [`Limiter`], and says
//! whether the turn goes on and what, if anything, the sender is told.
//!
//! It is async because the database is asked (at most once per
//! `RECHECK` per channel for the rules, and in one transaction per pairing
//! step or greeting); the file store's work stays a `stat` and a small
//! read as before. If the database cannot be asked, the message is refused
//! quietly and logged (without its text): never admitted on rules that
//! were not read.
//!
//! What it must not do: store, log or forward the text of a refused message
//! (log lines carry channel, user, message id and the reason only), ask the
//! model anything, or let chat text change who is allowed.

use super::db::DbRules;
use super::decide::{CONSOLE, Decision, IgnoreReason, decide};
use super::file::AccessFile;
use super::limits::Limiter;
use super::pairing::{self, CodeSource, PairingStep, RandomCodes};
use super::store::AccessStore;
use crate::config::LimitsConfig;
use chrono::{DateTime, Utc};
use mnemo_channels::Inbound;
use mnemo_pg::PgStore;
use mnemo_sessions::{Layout, SafeName};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// A group with `memory: "shared"`: the message goes to the group's
    /// own memory, and is answered from it (`answer`), or only kept there
    /// as context (observed: the bot was not addressed).
    Group { answer: bool },
    /// Stop here: nothing is stored and the model is not asked. `reply`, if
    /// any, is all the sender hears.
    Refused { reply: Option<String> },
    /// The rules could not be read (`store.kind: postgres` and the
    /// database did not answer): refused without a word (the sender may be
    /// a stranger) and nothing stored, but not settled as taken, so a
    /// platform that delivers again brings the message back.
    Unavailable,
}

/// Where one channel's rules live.
#[derive(Clone)]
enum Rules {
    File(Arc<AccessStore>),
    Db(Arc<DbRules>),
}

/// Why the rules could not be changed.
#[derive(Debug, thiserror::Error)]
enum UpdateError {
    #[error(transparent)]
    File(#[from] super::file::AccessFileError),
    #[error(transparent)]
    Db(#[from] super::db::DbAccessError),
}

impl Rules {
    /// The rules in effect; `Err` when the database could not be asked.
    async fn current(&self, now: DateTime<Utc>) -> Result<Arc<AccessFile>, mnemo_pg::PgError> {
        match self {
            Rules::File(store) => Ok(store.current(now)),
            Rules::Db(rules) => rules.current(now).await,
        }
    }

    /// A read-modify-write as the store does it; `Ok(None)`: degraded,
    /// nothing done.
    async fn update<T>(&self, change: impl FnOnce(&mut AccessFile) -> T) -> Result<Option<T>, UpdateError> {
        match self {
            Rules::File(store) => Ok(store.update(change)?),
            Rules::Db(rules) => Ok(rules.update(change).await?),
        }
    }
}

pub struct Gate {
    state_root: PathBuf,
    /// `store.kind: postgres`: every channel's rules are in this database.
    database: Option<PgStore>,
    /// One store per channel, made on first use. A std mutex, held only to
    /// look up or insert.
    stores: Mutex<HashMap<String, Rules>>,
    /// How often each store looks at its file or row (`store::RECHECK`).
    recheck: Duration,
    limiter: Limiter,
    codes: Box<dyn CodeSource>,
    /// (channel, user) already told that all pairing slots are taken.
    told_busy: Mutex<HashSet<(String, String)>>,
}

impl Gate {
    pub fn new(state_root: impl Into<PathBuf>, limits: &LimitsConfig) -> Self {
        Gate {
            state_root: state_root.into(),
            database: None,
            stores: Mutex::new(HashMap::new()),
            recheck: super::store::RECHECK,
            limiter: Limiter::new(limits),
            codes: Box::new(RandomCodes),
            told_busy: Mutex::new(HashSet::new()),
        }
    }

    /// Looks at each `access.json` (or database row) no more than once per
    /// `every` of message time (zero: on every message). For tests that edit the file
    /// between two messages and do not want to wait [`super::store::RECHECK`];
    /// only stores made after this call take it.
    pub fn with_recheck(mut self, every: Duration) -> Self {
        self.recheck = every;
        self
    }

    /// Keeps the rules in `database` (`store.kind: postgres`) instead of
    /// each channel's `access.json`; `None` leaves them in the files. Only
    /// stores made after this call take it.
    pub fn with_database(mut self, database: Option<PgStore>) -> Self {
        self.database = database;
        self
    }

    /// Uses `codes` for pairing codes (tests).
    pub fn with_codes(mut self, codes: Box<dyn CodeSource>) -> Self {
        self.codes = codes;
        self
    }

    /// The verdict on `message`, received at `now`.
    pub async fn admit(&self, message: &Inbound, now: DateTime<Utc>) -> Admission {
        self.admit_at(message, now, Instant::now()).await
    }

    /// [`Gate::admit`] with the limiter's clock given.
    pub async fn admit_at(&self, message: &Inbound, now: DateTime<Utc>, clock: Instant) -> Admission {
        let console = message.channel == CONSOLE;
        let store = self.store(&message.channel);
        let mut decision = if console {
            Decision::Allow { greet_paired: false }
        } else {
            match store.current(now).await {
                Ok(rules) => decide(&rules, message),
                Err(e) => return unreadable(message, &e),
            }
        };
        if decision == Decision::Pair {
            match self.pair(&store, message, now).await {
                Ok(refused) => return refused,
                // Approved (or the rules changed) since the cached read.
                Err(fresh) => decision = fresh,
            }
        }
        let (greet, group) = match decision {
            Decision::Allow { greet_paired } => (greet_paired, None),
            Decision::Group { answer } => (false, Some(answer)),
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
                channel = %message.channel, user = %SafeName::of(&message.user_id).log_id(), msg_id = %message.msg_id,
                reason = refusal.hit.reason(), told = refusal.tell, "message refused"
            );
            crate::ops::metrics::metrics().refused(&message.channel, refusal.hit.label());
            // Someone who did not address the bot is never answered by it.
            let tell = refusal.tell && group != Some(false);
            return Admission::Refused {
                reply: tell.then(|| refusal.hit.reply()),
            };
        }
        if let Some(answer) = group {
            return Admission::Group { answer };
        }
        let greeting = if greet {
            self.take_greeting(&store, message).await
        } else {
            None
        };
        Admission::Proceed { greeting }
    }

    /// Whether a sender whose queue is full should be told so: only someone
    /// allowed to talk, and once per window.
    pub async fn tell_queue_full(&self, message: &Inbound) -> bool {
        let allowed = message.channel == CONSOLE
            || match self.store(&message.channel).current(Utc::now()).await {
                Ok(rules) => matches!(
                    decide(&rules, message),
                    Decision::Allow { .. } | Decision::Group { answer: true }
                ),
                // Could not be asked: say nothing.
                Err(_) => false,
            };
        allowed
            && self
                .limiter
                .tell_queue_full(&message.channel, &message.user_id, Instant::now())
    }

    fn store(&self, channel: &str) -> Rules {
        let mut stores = lock(&self.stores);
        // The common case, without allocating the key.
        if let Some(store) = stores.get(channel) {
            return store.clone();
        }
        let store = stores
            .entry(channel.to_string())
            .or_insert_with(|| match &self.database {
                Some(db) => Rules::Db(Arc::new(DbRules::with_recheck(db.clone(), channel, self.recheck))),
                None => Rules::File(Arc::new(AccessStore::with_recheck(
                    Layout::new(&self.state_root, channel).access_path(),
                    self.recheck,
                ))),
            });
        store.clone()
    }

    /// Runs the pairing step on the rules as stored now (the file on
    /// disk, or the row in a database transaction). `Err` with the fresh
    /// decision when that is no longer "pair".
    async fn pair(&self, store: &Rules, message: &Inbound, now: DateTime<Utc>) -> Result<Admission, Decision> {
        let outcome = store
            .update(|rules| match decide(rules, message) {
                Decision::Pair => Ok(pairing::step(rules, message, now, self.codes.as_ref())),
                other => Err(other),
            })
            .await;
        let step = match outcome {
            Ok(Some(Ok(step))) => step,
            Ok(Some(Err(fresh))) => return Err(fresh),
            // Degraded: the fallback never pairs, so this is a race with a
            // corruption; refuse quietly.
            Ok(None) => return Ok(Admission::Refused { reply: None }),
            Err(e) => {
                tracing::error!(channel = %message.channel, error = %e, "pairing request not recorded; the stranger is not answered");
                // The database did not answer: as if the rules were unread
                // (a redelivery may get the code through).
                if matches!(e, UpdateError::Db(super::db::DbAccessError::Db(_))) {
                    return Ok(Admission::Unavailable);
                }
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
            channel = %message.channel, user = %SafeName::of(&message.user_id).log_id(), msg_id = %message.msg_id,
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
    async fn take_greeting(&self, store: &Rules, message: &Inbound) -> Option<String> {
        let had = store
            .update(|rules| {
                let before = rules.approved.len();
                rules.approved.retain(|n| n.user_id != message.user_id);
                rules.approved.len() != before
            })
            .await;
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

/// The rules could not be read from the database: refused quietly, never
/// admitted on rules that were not read.
fn unreadable(message: &Inbound, error: &mnemo_pg::PgError) -> Admission {
    tracing::error!(
        channel = %message.channel, user = %crate::ops::turn_log::user_hash(&message.user_id), msg_id = %message.msg_id,
        error = %error, "access rules could not be read from the database; message refused"
    );
    crate::ops::metrics::metrics().refused(&message.channel, "rules_unavailable");
    Admission::Unavailable
}

fn refused(message: &Inbound, reason: IgnoreReason) -> Admission {
    tracing::info!(
        channel = %message.channel, user = %SafeName::of(&message.user_id).log_id(), msg_id = %message.msg_id,
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
