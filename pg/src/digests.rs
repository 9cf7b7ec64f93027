//! Daily and weekly summaries ("digests") on Postgres: the
//! [`DigestStore`] the shared digest pass
//! (`mnemo_sessions::maintenance::digest_pass`) runs on, so both stores
//! keep one schedule, one per-run cap and one failure rule; and the
//! maintenance state (watermarks, failure counts) in `mnemo_maintenance`,
//! as the same JSON the file store's state file holds.
//!
//! A daily is made of one local day's messages (short-term or archived,
//! one query per run over the channel's day index); a weekly of that ISO
//! week's dailies. A digest row is written once (`ON CONFLICT DO NOTHING`)
//! under the user's turn lock, and only while what it summarizes is still
//! there: a user who cleared that day's messages, or deleted everything,
//! while the summarizer ran gets no digest of them. Digests go with the
//! user (`clear all` deletes them through the foreign key) and are found by
//! recall beside the messages.
//!
//! A job's `path` is the digest's name in an export
//! (`summaries/<user>/daily/2026-03-01.md`), which is also what a run
//! reports as written.

use crate::PgError;
use crate::channel::PgChannel;
use crate::turn::record_at;
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use mnemo_sessions::maintenance::digest_pass::{DigestStore, StoreError};
use mnemo_sessions::maintenance::digests::{DigestJob, DigestMeta, Period, weekly_from_dailies};
use mnemo_sessions::maintenance::schedule::{WeekId, local_day, local_day_bounds};
use mnemo_sessions::maintenance::state::MaintenanceState;
use mnemo_sessions::{Record, SafeName};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use tokio_postgres::types::ToSql;

/// One channel's digests in the database.
pub struct PgDigests<'a> {
    pub channel: &'a PgChannel,
    pub tz: Tz,
}

pub use mnemo_sessions::whole::StoredDigest;

/// The name a digest has in an export and in a run's report.
pub fn export_path(user: &SafeName, period: Period) -> PathBuf {
    PathBuf::from(format!(
        "summaries/{}/{}/{}.md",
        user.as_str(),
        period.kind_name(),
        period.label()
    ))
}

#[async_trait]
impl DigestStore for PgDigests<'_> {
    async fn users(&self) -> Result<Vec<SafeName>, StoreError> {
        let keys = crate::copy::users(self.channel.store(), Some(self.channel.name()), None).await?;
        Ok(keys.iter().filter_map(|(_, key)| SafeName::from_encoded(key)).collect())
    }

    async fn daily_jobs(
        &self,
        tz: Tz,
        days: &[NaiveDate],
        users: &[SafeName],
    ) -> (Vec<DigestJob>, Vec<(SafeName, StoreError)>) {
        match self.read_days(tz, days, users).await {
            Ok(jobs) => (jobs, Vec::new()),
            // One query for the channel: every user's days wait for the
            // next run.
            Err(e) => {
                let reason = e.to_string();
                let errors = users
                    .iter()
                    .map(|u| (u.clone(), StoreError::from(reason.clone())))
                    .collect();
                (Vec::new(), errors)
            }
        }
    }

    async fn weekly_job(&self, user: &SafeName, week: WeekId) -> Result<Option<DigestJob>, StoreError> {
        let period = Period::Week(week);
        let days: Vec<String> = week.days().iter().map(|d| d.format("%Y-%m-%d").to_string()).collect();
        let conn = self.channel.store().conn().await?;
        let (channel, key) = (self.channel.name(), user.as_str());
        let exists = conn
            .query_opt(
                "SELECT 1 FROM mnemo_digests WHERE channel = $1 AND user_key = $2 AND kind = 'weekly' AND period = $3",
                &[&channel, &key, &period.label()],
            )
            .await
            .map_err(PgError::from)?;
        if exists.is_some() {
            return Ok(None);
        }
        let rows = conn
            .query(
                "SELECT period, messages, body FROM mnemo_digests
                 WHERE channel = $1 AND user_key = $2 AND kind = 'daily' AND period = ANY($3)
                 ORDER BY period",
                &[&channel, &key, &days],
            )
            .await
            .map_err(PgError::from)?;
        let dailies = rows
            .iter()
            .filter_map(|row| {
                let day = row.get::<_, &str>(0).parse::<NaiveDate>().ok()?;
                let messages = usize::try_from(row.get::<_, i32>(1)).unwrap_or(0);
                Some((day, messages, row.get::<_, String>(2)))
            })
            .collect();
        Ok(weekly_from_dailies(user, week, export_path(user, period), dailies))
    }

    async fn write(&self, job: &DigestJob, meta: &DigestMeta, body: &str) -> Result<Option<PathBuf>, StoreError> {
        let mut turn = self.channel.begin_turn(&job.user).await?;
        let (channel, key) = (self.channel.name().to_string(), job.user.as_str().to_string());
        let messages = i32::try_from(meta.messages).unwrap_or(i32::MAX);
        let body = crate::pg_text(body.trim()).into_owned();
        let period = job.period.label();
        let head: [&(dyn ToSql + Sync); 7] = [
            &channel,
            &key,
            &period,
            &meta.timezone,
            &messages,
            &meta.generated,
            &body,
        ];
        // Written only while what it summarizes is there: the day's
        // messages for a daily, a daily of the week for a weekly.
        let written = match job.period {
            Period::Day(day) => {
                let (from, to) = local_day_bounds(self.tz, day);
                let params: Vec<&(dyn ToSql + Sync)> = head.iter().copied().chain([&from as _, &to as _]).collect();
                turn.conn().execute(WRITE_DAILY, &params).await
            }
            Period::Week(week) => {
                let (first, last) = week_bounds(week);
                let params: Vec<&(dyn ToSql + Sync)> = head.iter().copied().chain([&first as _, &last as _]).collect();
                turn.conn().execute(WRITE_WEEKLY, &params).await
            }
        }
        .map_err(PgError::from)?;
        Ok((written == 1).then(|| job.path.clone()))
    }
}

const WRITE_DAILY: &str =
    "INSERT INTO mnemo_digests (channel, user_key, kind, period, timezone, messages, generated, body)
     SELECT $1, $2, 'daily', $3, $4, $5, $6, $7
     WHERE EXISTS (SELECT 1 FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND ts >= $8 AND ts < $9)
     ON CONFLICT DO NOTHING";

const WRITE_WEEKLY: &str =
    "INSERT INTO mnemo_digests (channel, user_key, kind, period, timezone, messages, generated, body)
     SELECT $1, $2, 'weekly', $3, $4, $5, $6, $7
     WHERE EXISTS (SELECT 1 FROM mnemo_digests
                   WHERE channel = $1 AND user_key = $2 AND kind = 'daily' AND period >= $8 AND period <= $9)
     ON CONFLICT DO NOTHING";

/// The first and last day of `week` as `YYYY-MM-DD` (daily periods sort
/// as dates).
fn week_bounds(week: WeekId) -> (String, String) {
    let days = week.days();
    let label = |d: Option<&NaiveDate>| d.map(|d| d.format("%Y-%m-%d").to_string()).unwrap_or_default();
    (label(days.first()), label(days.last()))
}

impl PgDigests<'_> {
    /// The daily jobs of `days` for `users`: the channel's messages of the
    /// whole span in one query (the day index), cut into local days, minus
    /// the dailies already stored.
    async fn read_days(&self, tz: Tz, days: &[NaiveDate], users: &[SafeName]) -> Result<Vec<DigestJob>, PgError> {
        let (Some(first), Some(last)) = (days.first(), days.last()) else {
            return Ok(Vec::new());
        };
        let (from, _) = local_day_bounds(tz, *first);
        let (_, to) = local_day_bounds(tz, *last);
        let channel = self.channel.name();
        let labels: Vec<String> = days.iter().map(|d| d.format("%Y-%m-%d").to_string()).collect();
        let conn = self.channel.store().conn().await?;
        let done: HashSet<(String, String)> = conn
            .query(
                "SELECT user_key, period FROM mnemo_digests
                 WHERE channel = $1 AND kind = 'daily' AND period = ANY($2)",
                &[&channel, &labels],
            )
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let rows = conn
            .query(
                "SELECT user_key, ts, role, text, msg_id, thread_id, chat_id, user_name FROM mnemo_messages
                 WHERE channel = $1 AND ts >= $2 AND ts < $3 ORDER BY user_key, seq",
                &[&channel, &from, &to],
            )
            .await?;
        let wanted: HashSet<&str> = users.iter().map(SafeName::as_str).collect();
        let wanted_days: HashSet<NaiveDate> = days.iter().copied().collect();
        let mut by_user_day: BTreeMap<(String, NaiveDate), Vec<Record>> = BTreeMap::new();
        for row in &rows {
            let key: String = row.get(0);
            if !wanted.contains(key.as_str()) {
                continue;
            }
            let record = record_at(row, channel, 1);
            let day = local_day(tz, record.ts);
            if wanted_days.contains(&day) && !done.contains(&(key.clone(), day.format("%Y-%m-%d").to_string())) {
                by_user_day.entry((key, day)).or_default().push(record);
            }
        }
        let mut jobs: Vec<DigestJob> = by_user_day
            .into_iter()
            .filter_map(|((key, day), messages)| {
                let user = SafeName::from_encoded(&key)?;
                let period = Period::Day(day);
                Some(DigestJob {
                    path: export_path(&user, period),
                    user,
                    period,
                    message_count: messages.len(),
                    messages,
                    notes: Vec::new(),
                })
            })
            .collect();
        jobs.sort_by(|a, b| (a.period, &a.user).cmp(&(b.period, &b.user)));
        Ok(jobs)
    }

    /// The channel's maintenance state; the default (a first run) when there
    /// is none. A row that does not parse is an error: which days are done
    /// is then unknown, and digests wait for the operator.
    pub async fn load_state(&self) -> Result<MaintenanceState, PgError> {
        let row = self
            .channel
            .store()
            .conn()
            .await?
            .query_opt(
                "SELECT state FROM mnemo_maintenance WHERE channel = $1",
                &[&self.channel.name()],
            )
            .await?;
        match row {
            None => Ok(MaintenanceState::default()),
            Some(row) => serde_json::from_str(row.get(0)).map_err(|e| {
                PgError::Invalid(format!(
                    "the maintenance state of channel {} (table mnemo_maintenance) is not valid ({e}); \
                     fix it, or delete the row to restart daily and weekly summaries from the last 7 days",
                    self.channel.name()
                ))
            }),
        }
    }

    pub async fn save_state(&self, state: &MaintenanceState, now: DateTime<Utc>) -> Result<(), PgError> {
        let text = serde_json::to_string(state).map_err(|e| PgError::Invalid(e.to_string()))?;
        self.channel
            .store()
            .conn()
            .await?
            .execute(
                "INSERT INTO mnemo_maintenance (channel, state, updated_at) VALUES ($1, $2, $3)
                 ON CONFLICT (channel) DO UPDATE SET state = $2, updated_at = $3",
                &[&self.channel.name(), &text, &now],
            )
            .await?;
        Ok(())
    }
}

/// `user`'s digests, dailies then weeklies, oldest first, on any client
/// (the snapshot `store copy` and `/session export` read a user in).
pub(crate) async fn read_rows(
    client: &impl tokio_postgres::GenericClient,
    channel: &str,
    user: &SafeName,
) -> Result<Vec<StoredDigest>, PgError> {
    let rows = client
        .query(
            "SELECT kind, period, timezone, messages, generated, source, body FROM mnemo_digests
             WHERE channel = $1 AND user_key = $2 ORDER BY kind, period",
            &[&channel, &user.as_str()],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let (kind, label): (&str, &str) = (row.get(0), row.get(1));
            let period = Period::parse(kind, label)?;
            let messages = usize::try_from(row.get::<_, i32>(3)).unwrap_or(0);
            Some(StoredDigest {
                period,
                meta: DigestMeta {
                    user: user.decode().unwrap_or_else(|| user.to_string()),
                    period: label.to_string(),
                    timezone: row.get(2),
                    generated: row.get(4),
                    messages,
                    source: row.get(5),
                },
                body: row.get(6),
            })
        })
        .collect())
}

/// Inserts `digests` for `user` (a copy's transaction; the user is new
/// there).
pub(crate) async fn insert_rows(
    tx: &tokio_postgres::Transaction<'_>,
    channel: &str,
    user: &str,
    digests: &[StoredDigest],
) -> Result<(), PgError> {
    for d in digests {
        let messages = i32::try_from(d.meta.messages).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO mnemo_digests (channel, user_key, kind, period, timezone, messages, generated, source, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &channel,
                &user,
                &d.period.kind_name(),
                &d.period.label(),
                &d.meta.timezone,
                &messages,
                &d.meta.generated,
                &d.meta.source,
                &d.body,
            ],
        )
        .await?;
    }
    Ok(())
}
