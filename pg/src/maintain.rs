//! Maintenance of one channel on Postgres, by exactly one broker at a time:
//! a lease row (`mnemo_leases`, name `maintenance/<channel>`) is taken for
//! [`LEASE`] before a run and given back after it. A broker that dies
//! holding it loses it when it expires, and the next broker to look takes
//! it over; a run longer than the lease renews it between users, and stops
//! if it finds the lease gone to another broker.
//!
//! A run does, in order:
//! - **daily and weekly summaries**: the file store's digest pass
//!   (`mnemo_sessions::maintenance::digest_pass`: the same schedule,
//!   catch-up, per-run cap and failure rule) on
//!   [`crate::digests::PgDigests`], its watermarks kept in
//!   `mnemo_maintenance`;
//! - per user, **the fold sweep**: a user whose oldest short-term message is
//!   older than `stm.maxAgeMinutes` and who has not written since (so no
//!   turn started the fold) is compacted ([`crate::fold`]);
//! - per user, **expiry**: short-term memory idle for
//!   `scheduler.stmExpireDays` is archived (fold kind `expired`, still found
//!   by recall); the rolling summary is kept, so continuity survives. It
//!   does not wait for the last day's daily as on the files: expired
//!   messages stay in the database, where a later daily still reads them;
//! - **retention**: archived messages and digests past
//!   `scheduler.archiveKeepDays` / `summaryKeepDays` are deleted.

use crate::PgError;
use crate::channel::PgChannel;
use crate::digests::PgDigests;
use crate::fold::PgFold;
use chrono::{DateTime, TimeDelta, Utc};
use mnemo_sessions::SafeName;
use mnemo_sessions::maintenance::digest_pass::{Digester, digest_pass};
use mnemo_sessions::maintenance::{Failure, MaintenanceReport};

/// How long a maintenance lease lasts unless renewed.
pub const LEASE: TimeDelta = TimeDelta::minutes(10);

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintainReport {
    /// Another broker holds the lease: nothing was done.
    pub held_by: Option<String>,
    /// Users folded by the sweep, and the outcome labels of their folds.
    pub folded: usize,
    /// Users whose short-term memory expired into the archive.
    pub expired: usize,
    /// Users whose step failed (logged; retried next run).
    pub failed: usize,
    /// Daily and weekly summaries written, left for the next run by
    /// `scheduler.maxSummariesPerRun`, and failed (each logged).
    pub dailies: usize,
    pub weeklies: usize,
    pub digests_deferred: usize,
    pub digest_failures: Vec<Failure>,
    /// Archived messages and digests deleted past `scheduler.archiveKeepDays`
    /// and `summaryKeepDays`.
    pub removed_archived: u64,
    pub removed_digests: u64,
}

impl std::fmt::Display for MaintainReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.held_by {
            Some(holder) => write!(f, "skipped: broker {holder} holds the maintenance lease"),
            None => write!(
                f,
                "{} folded, {} expired, {} failed; dailies written: {}, weeklies written: {}, \
                 left for next run: {}, summary failures: {}; past keep time removed: {} archived message(s), \
                 {} summar(ies)",
                self.folded,
                self.expired,
                self.failed,
                self.dailies,
                self.weeklies,
                self.digests_deferred,
                self.digest_failures.len(),
                self.removed_archived,
                self.removed_digests
            ),
        }
    }
}

/// Takes the lease `name` for `holder` until `now + ttl`: free, expired,
/// or already this holder's. `Err(holder)` names who has it.
pub async fn take_lease(
    channel: &PgChannel,
    name: &str,
    holder: &str,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Result<Result<(), String>, PgError> {
    let conn = channel.store().conn().await?;
    let until = now + ttl;
    let taken = conn
        .query_opt(
            "INSERT INTO mnemo_leases AS l (name, holder, expires_at) VALUES ($1, $2, $4)
             ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = $4
                 WHERE l.holder = $2 OR l.expires_at < $3
             RETURNING holder",
            &[&name, &holder, &now, &until],
        )
        .await?;
    if taken.is_some() {
        return Ok(Ok(()));
    }
    // The conflict's condition did not hold: someone else has it, alive.
    let current = conn
        .query_opt("SELECT holder FROM mnemo_leases WHERE name = $1", &[&name])
        .await?
        .map_or_else(String::new, |row| row.get(0));
    Ok(Err(current))
}

/// Gives the lease back if `holder` still has it.
pub async fn release_lease(channel: &PgChannel, name: &str, holder: &str) -> Result<(), PgError> {
    channel
        .store()
        .conn()
        .await?
        .execute(
            "DELETE FROM mnemo_leases WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await?;
    Ok(())
}

/// One maintenance run of `channel` by the broker `holder`, under the lease.
pub async fn run(channel: &PgChannel, holder: &str, now: DateTime<Utc>) -> Result<MaintainReport, PgError> {
    let lease = format!("maintenance/{}", channel.name());
    if let Err(other) = take_lease(channel, &lease, holder, now, LEASE).await? {
        return Ok(MaintainReport {
            held_by: Some(other),
            ..MaintainReport::default()
        });
    }
    let digested = digest(channel, now).await;
    let result = sweep(channel, &lease, holder, now).await;
    let retained = retention(channel, now).await;
    release_lease(channel, &lease, holder).await?;
    let mut report = result?;
    (report.removed_archived, report.removed_digests) = retained?;
    match digested {
        Ok(digests) => {
            report.dailies = digests.dailies_written.len();
            report.weeklies = digests.weeklies_written.len();
            report.digests_deferred = digests.summaries_deferred;
            report.digest_failures = digests.failures;
        }
        Err(e) => report.digest_failures.push(Failure {
            user: None,
            task: "state".into(),
            reason: e.to_string(),
        }),
    }
    Ok(report)
}

/// Deletes what is past its keep time (`scheduler.archiveKeepDays`: folds
/// archived before the cut-off, with their messages; `summaryKeepDays`:
/// digests generated before it; 0 keeps forever), each in one statement.
/// The short-term memory, the summary and the profile are never touched.
async fn retention(channel: &PgChannel, now: DateTime<Utc>) -> Result<(u64, u64), PgError> {
    let keep = channel.config().scheduler.keep();
    let conn = channel.store().conn().await?;
    let name = channel.name();
    let archived = match keep.archives {
        Some(age) => {
            conn.execute(
                "WITH old AS (DELETE FROM mnemo_folds WHERE channel = $1 AND at < $2 RETURNING user_key, fold)
                 DELETE FROM mnemo_messages m USING old
                 WHERE m.channel = $1 AND m.user_key = old.user_key AND m.fold = old.fold",
                &[&name, &(now - age)],
            )
            .await?
        }
        None => 0,
    };
    let digests = match keep.summaries {
        Some(age) => {
            conn.execute(
                "DELETE FROM mnemo_digests WHERE channel = $1 AND generated < $2",
                &[&name, &(now - age)],
            )
            .await?
        }
        None => 0,
    };
    Ok((archived, digests))
}

/// The daily and weekly summaries due at `now`, under the lease; the state
/// is saved only after the digests it records are stored.
async fn digest(channel: &PgChannel, now: DateTime<Utc>) -> Result<MaintenanceReport, PgError> {
    let store = PgDigests {
        channel,
        tz: channel.tz(),
    };
    let mut state = store.load_state().await?;
    let mut report = MaintenanceReport::default();
    let digester = Digester {
        config: channel.config(),
        tz: channel.tz(),
        summarizer: channel.summarizer(),
    };
    digest_pass(&digester, &store, now, &mut state, &mut report, &mut |_| {}).await;
    state.last_run = Some(now);
    store.save_state(&state, now).await?;
    Ok(report)
}

async fn sweep(channel: &PgChannel, lease: &str, holder: &str, now: DateTime<Utc>) -> Result<MaintainReport, PgError> {
    let config = channel.config();
    let mut report = MaintainReport::default();
    let expire_before = now - config.scheduler.stm_expiry();
    let aged_before = now.checked_sub_signed(config.stm.max_age());
    // Users with short-term messages: their oldest and newest message times.
    let rows = channel
        .store()
        .conn()
        .await?
        .query(
            "SELECT user_key, min(ts), max(ts) FROM mnemo_messages
             WHERE channel = $1 AND fold IS NULL GROUP BY user_key ORDER BY user_key",
            &[&channel.name()],
        )
        .await?;
    let started = std::time::Instant::now();
    let mut renewed = started;
    for row in rows {
        // A long run keeps its lease; one lost to another broker stops it.
        if renewed.elapsed() > (LEASE / 2).to_std().unwrap_or_default() {
            let at = now + TimeDelta::from_std(started.elapsed()).unwrap_or(TimeDelta::zero());
            if let Err(other) = take_lease(channel, lease, holder, at, LEASE).await? {
                tracing::warn!(channel = channel.name(), %other, "maintenance lease taken over; stopping this run");
                break;
            }
            renewed = std::time::Instant::now();
        }
        let (key, oldest, newest): (String, DateTime<Utc>, DateTime<Utc>) = (row.get(0), row.get(1), row.get(2));
        let Some(user) = SafeName::from_encoded(&key) else {
            continue;
        };
        let step = if newest < expire_before {
            expire(channel, &user, now).await.map(|done| {
                report.expired += usize::from(done);
            })
        } else if aged_before.is_some_and(|cutoff| oldest < cutoff) {
            channel.compact(&user, now).await.map(|outcome| {
                if !matches!(outcome, PgFold::NotNeeded | PgFold::AlreadyRunning) {
                    report.folded += 1;
                }
            })
        } else {
            Ok(())
        };
        if let Err(e) = step {
            report.failed += 1;
            tracing::warn!(channel = channel.name(), user = %user.log_id(), error = %e, "maintenance step failed; retried next run");
        }
    }
    Ok(report)
}

/// Archives `user`'s whole short-term memory as an `expired` fold, under
/// the user's turn lock (so no turn is mid-way) in one transaction.
async fn expire(channel: &PgChannel, user: &SafeName, now: DateTime<Utc>) -> Result<bool, PgError> {
    let mut turn = channel.begin_turn(user).await?;
    turn.expire(now).await
}
