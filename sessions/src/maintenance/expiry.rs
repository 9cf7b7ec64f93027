//! STM expiry: a user's short-term memory idle for `scheduler.stmExpireDays`
//! is archived and then removed (DESIGN §4), without losing anything.
//!
//! Under the user's lock, in this order: every record goes to the archive
//! (gzip, idempotent by content); the rolling summary is kept as part of the
//! daily summary of the last active local day — appended as a marked section
//! if that daily exists, written as that day's file if not — so continuity
//! survives; only then are `messages.jsonl` and `summary.md` removed. A crash
//! at any step leaves a state the next run finishes without duplicating the
//! kept summary. Malformed log lines are never dropped: they go to the
//! STM's quarantine file, which expiry leaves for the operator.
//!
//! It never removes an STM whose last day's daily summary is still pending,
//! so the kept rolling summary cannot take the place of that digest.

use super::digests::{self, DigestMeta, Period};
use super::schedule::local_day;
use crate::archive::{self, ArchiveError};
use crate::fsutil::{self, FileError};
use crate::names::SafeName;
use crate::stm::{Stm, StmError};
use crate::summary::{self, SummaryError};
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Heading of the section that keeps an expired STM's rolling summary.
pub const KEPT_SUMMARY_HEADING: &str = "## Conversation summary kept when short-term memory expired";

/// What expiry did for one user.
#[derive(Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Not idle long enough (or nothing to expire).
    Active,
    /// Idle, but the daily summary of `day` is not written yet; expired at a
    /// later run.
    Deferred { day: NaiveDate },
    /// Archived and removed. `summary_kept_in` is the daily file that now
    /// holds the rolling summary, if there was one.
    Archived {
        records: usize,
        summary_kept_in: Option<PathBuf>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ExpiryError {
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Summary(#[from] SummaryError),
    #[error(transparent)]
    Digest(#[from] digests::DigestError),
    #[error(transparent)]
    File(#[from] FileError),
}

/// Expires `user`'s STM if its newest message is at least `idle` old at
/// `now`. `dailies_done_through` is the last local day whose daily summaries
/// are complete (the maintenance state); a user whose last active day is
/// later is deferred.
pub async fn expire_user(
    stm: &Stm,
    tz: Tz,
    user: &SafeName,
    now: DateTime<Utc>,
    idle: TimeDelta,
    dailies_done_through: Option<NaiveDate>,
) -> Result<Expiry, ExpiryError> {
    let layout = stm.layout();
    // Cheap check first, so active users' locks are not taken at all.
    if stm.last_activity(user)?.is_some_and(|last| now - last < idle) {
        return Ok(Expiry::Active);
    }
    let guard = stm.lock(user).await;
    let snapshot = stm.read_all(user)?;
    let rolling = summary::read(layout, user)?;
    let last = match snapshot.records.iter().map(|r| r.ts).max() {
        Some(ts) => ts,
        // A summary without messages: its last fold is the last activity.
        None => match rolling.as_ref().and_then(|s| s.meta.last_compacted) {
            Some(ts) => ts,
            None => return Ok(Expiry::Active),
        },
    };
    if now - last < idle {
        return Ok(Expiry::Active);
    }
    let day = local_day(tz, last);
    if dailies_done_through.is_none_or(|done| done < day) {
        return Ok(Expiry::Deferred { day });
    }

    if !snapshot.records.is_empty() {
        archive::write_batch(layout, user, &snapshot.records)?;
    }
    let body = rolling.map(|s| s.body.trim().to_string()).filter(|b| !b.is_empty());
    let summary_kept_in = match body {
        Some(body) => {
            let day_messages = snapshot.records.iter().filter(|r| local_day(tz, r.ts) == day).count();
            Some(keep_rolling_summary(stm, tz, user, day, day_messages, &body, now)?)
        }
        None => None,
    };

    stm.drop_prefix_locked(&guard, user, &snapshot.records)?;
    let log = layout.messages_path(user);
    let rest = fsutil::read_if_exists(layout.state_root(), &log)?.unwrap_or_default();
    if rest.iter().all(u8::is_ascii_whitespace) {
        stm.remove_locked(&guard, user)?;
    } else {
        // Only a torn, unreadable tail is left; keep it for the operator.
        tracing::warn!(file = %log.display(), "expired log keeps an unreadable tail; left in place");
    }
    fsutil::remove_if_exists(layout.state_root(), &layout.summary_path(user))?;
    Ok(Expiry::Archived {
        records: snapshot.records.len(),
        summary_kept_in,
    })
}

/// Puts the rolling summary into the daily file of `day`, once: the section
/// carries a hash of the text, so a run repeated after a crash finds it and
/// adds nothing.
fn keep_rolling_summary(
    stm: &Stm,
    tz: Tz,
    user: &SafeName,
    day: NaiveDate,
    day_messages: usize,
    body: &str,
    now: DateTime<Utc>,
) -> Result<PathBuf, ExpiryError> {
    let path = stm.layout().daily_path(user, day);
    let digest = Sha256::digest(body.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let marker = format!("<!-- mnemo:kept-summary {hash} -->");
    let section = format!("{KEPT_SUMMARY_HEADING}\n\n{marker}\n\n{body}\n");
    let text = match fsutil::read_string_if_exists(stm.layout().state_root(), &path)? {
        Some(existing) if existing.contains(&marker) => return Ok(path),
        Some(existing) => format!("{}\n\n{section}", existing.trim_end()),
        None => {
            let mut meta = DigestMeta::new(user, Period::Day(day), tz, now, day_messages);
            meta.source = Some("expired-stm-summary".to_string());
            digests::render(&path, &meta, &section)?
        }
    };
    fsutil::replace(stm.layout().state_root(), &path, text.as_bytes())?;
    Ok(path)
}
