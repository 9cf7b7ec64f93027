//! One channel's access rules on the Postgres store (`store.kind:
//! postgres`): the same document as `access.json`, in the channel's
//! `mnemo_access` row (`mnemo_pg::access`), shared by every broker on the
//! database. The counterpart of [`super::store::AccessStore`], with the
//! same promises:
//!
//! - The rules are cached and the row is looked at (one indexed lookup of
//!   its revision; the document only when it changed) at most once per
//!   [`super::store::RECHECK`] of message time, not per message, so
//!   `mnemo access …` on any machine takes effect within a second.
//! - Pairing steps and greetings are read-modify-writes in one database
//!   transaction on the locked row ([`DbRules::update`]), so two brokers
//!   never issue two codes to one stranger or greet one sender twice.
//! - A row that does not parse (with `access::file`'s own types, one
//!   parser for both stores) puts the channel on [`restrictive_fallback`]
//!   with an error log, as a corrupt file does: never open, never the
//!   defaults. The row is left as it is for the operator (unlike a file it
//!   is not moved aside); nothing the bot does writes over it.
//! - A database error during a look is the caller's to refuse on (it is
//!   returned, never papered over with rules that were not read).
//!
//! It must not decide about messages (that is `decide`).

use super::decide::restrictive_fallback;
use super::file::AccessFile;
use super::store::RECHECK;
use chrono::{DateTime, Utc};
use mnemo_pg::access::{self as rows, AccessRow, Edit, Poll};
use mnemo_pg::{PgError, PgStore};
use mnemo_sessions::config::{ConfigError, ConfigFile, parse_object_bytes};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Why a change of the rules in the database was not made.
#[derive(Debug, thiserror::Error)]
pub enum DbAccessError {
    #[error(transparent)]
    Db(#[from] PgError),
    /// The row holds a document that is not valid rules: never written over.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The rules could not be put into JSON (never written as anything else).
    #[error("the access rules could not be written as JSON: {0}")]
    Render(#[from] serde_json::Error),
}

/// The name a channel's row goes by in messages (where a file's path
/// would be).
pub fn row_name(channel: &str) -> PathBuf {
    PathBuf::from(format!("mnemo_access row `{channel}`"))
}

/// Parses a row's document with the file's types.
pub fn parse(channel: &str, doc: &str) -> Result<AccessFile, ConfigError> {
    let at = row_name(channel);
    super::file::checked(
        ConfigFile::AccessRow,
        &at,
        parse_object_bytes(ConfigFile::AccessRow, &at, doc.as_bytes())?,
    )
}

/// A document as it is stored (compact JSON; the database keeps it as
/// `jsonb`).
pub fn render(rules: &AccessFile) -> Result<String, serde_json::Error> {
    serde_json::to_string(rules)
}

/// A read-modify-write of `channel`'s rules in one transaction on its
/// locked row (see [`mnemo_pg::access::update`]): `change` sees them as
/// committed now (default with no row); they are written only if it
/// changed them. Returns `change`'s value, the rules as they now stand,
/// and their revision (`None`: still no row). A row that does not parse
/// is an error and is never written over. For the gate and for
/// `mnemo access …`.
pub async fn edit<T>(
    store: &PgStore,
    channel: &str,
    change: impl FnOnce(&mut AccessFile) -> T,
) -> Result<((T, AccessFile), Option<i64>), DbAccessError> {
    rows::update(store, channel, |doc| {
        let before = match doc {
            Some(doc) => parse(channel, doc)?,
            None => AccessFile::default(),
        };
        let mut rules = before.clone();
        let out = change(&mut rules);
        let write = if rules != before { Some(render(&rules)?) } else { None };
        Ok::<_, DbAccessError>(Edit {
            out: (out, rules),
            write,
        })
    })
    .await
}

/// The rules in effect, and the revision they were read at.
struct Cached {
    /// The revision last seen (`None`: no row, or nothing read yet).
    revision: Option<i64>,
    /// When the row was last looked at (message time), for [`RECHECK`].
    checked_at: Option<DateTime<Utc>>,
    rules: Arc<AccessFile>,
    /// The last document that parsed, for the fallback's `allowFrom`.
    last_good: Option<AccessFile>,
    degraded: bool,
}

pub struct DbRules {
    store: PgStore,
    channel: String,
    recheck: Duration,
    /// A std mutex: never held across an `.await` (a look claims the
    /// interval, queries without the lock, then stores what it read).
    cached: Mutex<Cached>,
}

impl DbRules {
    pub fn new(store: PgStore, channel: &str) -> Self {
        Self::with_recheck(store, channel, RECHECK)
    }

    /// With the row looked at no more than once per `recheck` (zero: on
    /// every message).
    pub fn with_recheck(store: PgStore, channel: &str, recheck: Duration) -> Self {
        DbRules {
            store,
            channel: channel.to_string(),
            recheck,
            cached: Mutex::new(Cached {
                revision: None,
                checked_at: None,
                rules: Arc::default(),
                last_good: None,
                degraded: false,
            }),
        }
    }

    /// The rules in effect at `now`: the row is looked at again once
    /// `recheck` has passed since the last look (or the clock went back).
    /// Other messages meanwhile use the cached rules; an `Err` (the
    /// database could not be asked) is for the caller to refuse on, and
    /// the next message asks again.
    pub async fn current(&self, now: DateTime<Utc>) -> Result<Arc<AccessFile>, PgError> {
        let known = {
            let mut cached = self.lock();
            let fresh = cached
                .checked_at
                .and_then(|at| (now - at).to_std().ok())
                .is_some_and(|since| since < self.recheck);
            if fresh {
                return Ok(Arc::clone(&cached.rules));
            }
            // Claimed: messages arriving while this look runs use the cache.
            cached.checked_at = Some(now);
            cached.revision
        };
        let polled = rows::poll(&self.store, &self.channel, known).await;
        let mut cached = self.lock();
        match polled {
            Err(e) => {
                cached.checked_at = None;
                Err(e)
            }
            Ok(Poll::Same) => Ok(Arc::clone(&cached.rules)),
            Ok(Poll::Missing) => {
                // No row (never written, or deleted by the operator): the
                // default rules, as with no file.
                self.take(&mut cached, None, AccessFile::default());
                Ok(Arc::clone(&cached.rules))
            }
            Ok(Poll::Changed(row)) => {
                // A write of our own may have got further meanwhile.
                if cached.revision.is_none_or(|have| have < row.revision) {
                    self.read_row(&mut cached, row);
                }
                Ok(Arc::clone(&cached.rules))
            }
        }
    }

    /// Whether the channel is running on the restrictive fallback.
    pub fn degraded(&self) -> bool {
        self.lock().degraded
    }

    /// A read-modify-write of the rules in one transaction on the locked
    /// row: `change` sees them as committed now (default with no row), and
    /// they are written only if it changed them; the cache takes the
    /// result. A row that does not parse is never written over: the
    /// channel goes on the fallback and `Ok(None)` says nothing was done.
    pub async fn update<T>(&self, change: impl FnOnce(&mut AccessFile) -> T) -> Result<Option<T>, DbAccessError> {
        let result = edit(&self.store, &self.channel, change).await;
        let mut cached = self.lock();
        match result {
            Ok(((out, rules), revision)) => {
                if revision.is_none_or(|r| cached.revision.is_none_or(|have| have <= r)) {
                    self.take(&mut cached, revision, rules);
                }
                Ok(Some(out))
            }
            Err(DbAccessError::Invalid(invalid)) => {
                if !cached.degraded {
                    self.log_invalid(&invalid);
                }
                self.degrade(&mut cached);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn read_row(&self, cached: &mut Cached, row: AccessRow) {
        match parse(&self.channel, &row.doc) {
            Ok(rules) => {
                if cached.degraded {
                    tracing::warn!(channel = %self.channel, "the access rules in the database are valid again; leaving the restrictive fallback");
                }
                self.take(cached, Some(row.revision), rules);
            }
            Err(invalid) => {
                // Logged once per revision: the next look finds it the same.
                self.log_invalid(&invalid);
                cached.revision = Some(row.revision);
                self.degrade(cached);
            }
        }
    }

    fn log_invalid(&self, invalid: &ConfigError) {
        let (field, reason) = (invalid.field().unwrap_or("(the whole document)"), invalid.reason());
        tracing::error!(
            channel = %self.channel, field = %field, reason = %reason,
            "the access rules in the database are corrupt: strangers are refused and only the last good allowFrom may talk until the row is fixed (`mnemo access list` shows the error)"
        );
    }

    fn take(&self, cached: &mut Cached, revision: Option<i64>, rules: AccessFile) {
        cached.revision = revision;
        cached.last_good = Some(rules.clone());
        cached.rules = Arc::new(rules);
        cached.degraded = false;
    }

    fn degrade(&self, cached: &mut Cached) {
        cached.rules = Arc::new(restrictive_fallback(cached.last_good.as_ref()));
        cached.degraded = true;
    }

    fn lock(&self) -> MutexGuard<'_, Cached> {
        // Every update of `Cached` is a few assignments: consistent even if
        // a holder panicked.
        self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::file::{DmPolicy, GroupRule};

    #[test]
    fn a_document_round_trips_through_the_files_types() {
        let mut rules = AccessFile {
            dm_policy: DmPolicy::Allowlist,
            ..AccessFile::default()
        };
        rules.allow_from.insert("U1".into());
        rules.groups.insert("C1".into(), GroupRule::default());
        assert_eq!(parse("tg", &render(&rules).unwrap()).unwrap(), rules);
        assert_eq!(parse("tg", "{}").unwrap(), AccessFile::default());
    }

    #[test]
    fn a_bad_row_is_named_with_its_field_and_the_way_out() {
        let err = parse("tg", r#"{"dmPolicy": "opne"}"#).unwrap_err();
        assert_eq!(err.field(), Some("dmPolicy"));
        let text = err.to_string();
        assert!(
            text.starts_with("the access list mnemo_access row `tg`, field `dmPolicy`"),
            "{text}"
        );
        assert!(text.contains("delete the row"), "{text}");
        assert!(!text.contains("remove the file"), "{text}");
    }
}
