//! Reminders on Postgres: the rows of `mnemo_reminders` (migration 7),
//! one per reminder, with the fields of
//! [`mnemo_sessions::reminders::Reminder`] as columns. A user's own
//! reminders are read and changed on the turn's connection (inside their
//! lock); the delivery loop's claims are channel-wide, on a pooled
//! connection: `FOR UPDATE SKIP LOCKED` and the state turned to `sending`
//! make each claim one broker's. How a claim ends is computed once, by
//! [`Reminder::finished`], and written back.

use crate::turn::PgTurn;
use crate::{PgChannel, PgError};
use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::GenericClient;
use mnemo_sessions::SafeName;
use mnemo_sessions::reminders::{Book, BookError, CLAIM_SECS, Claimed, Finish, Place, Reminder, State};
use tokio_postgres::Row;

/// The columns every read returns, in [`reminder_of`]'s order.
const COLUMNS: &str = "id, text, at, due, repeat, timezone, chat_id, thread_id, in_group, created, state, claimed_at, attempts, missed, platform";

fn state_name(state: State) -> &'static str {
    match state {
        State::Active => "active",
        State::Sending => "sending",
        State::Done => "done",
    }
}

/// A reminder from a row of [`COLUMNS`] starting at `at`.
fn reminder_of(row: &Row, at: usize) -> Reminder {
    let state: String = row.get(at + 10);
    let attempts: i32 = row.get(at + 12);
    Reminder {
        id: row.get(at),
        text: row.get(at + 1),
        at: row.get(at + 2),
        due: row.get(at + 3),
        repeat: row.get(at + 4),
        timezone: row.get(at + 5),
        place: Place {
            chat_id: row.get(at + 6),
            thread_id: row.get(at + 7),
            group: row.get(at + 8),
            platform: row.get(at + 14),
        },
        created: row.get(at + 9),
        state: match state.as_str() {
            "sending" => State::Sending,
            "done" => State::Done,
            _ => State::Active,
        },
        claimed_at: row.get(at + 11),
        attempts: u32::try_from(attempts).unwrap_or(0),
        missed: row.get(at + 13),
    }
}

/// Writes `next` over the row of `id` (or deletes it: nothing left).
async fn put(
    db: &impl GenericClient,
    channel: &str,
    key: &str,
    id: &str,
    next: Option<&Reminder>,
) -> Result<(), PgError> {
    match next {
        None => {
            db.execute(
                "DELETE FROM mnemo_reminders WHERE channel = $1 AND user_key = $2 AND id = $3",
                &[&channel, &key, &id],
            )
            .await?;
        }
        Some(r) => {
            let attempts = i32::try_from(r.attempts).unwrap_or(i32::MAX);
            db.execute(
                "UPDATE mnemo_reminders SET at = $4, due = $5, state = $6, claimed_at = $7, attempts = $8, missed = $9,
                        claimed_by = CASE WHEN $6 = 'sending' THEN claimed_by END
                 WHERE channel = $1 AND user_key = $2 AND id = $3",
                &[
                    &channel,
                    &key,
                    &id,
                    &r.at,
                    &r.due,
                    &state_name(r.state),
                    &r.claimed_at,
                    &attempts,
                    &r.missed,
                ],
            )
            .await?;
        }
    }
    Ok(())
}

/// `user`'s reminders and timezone, as the files hold them.
pub(crate) async fn read_book(
    db: &impl tokio_postgres::GenericClient,
    channel: &str,
    key: &str,
) -> Result<Book, PgError> {
    let rows = db
        .query(
            &format!("SELECT {COLUMNS} FROM mnemo_reminders WHERE channel = $1 AND user_key = $2 ORDER BY id"),
            &[&channel, &key],
        )
        .await?;
    let timezone = db
        .query_opt(
            "SELECT timezone FROM mnemo_users WHERE channel = $1 AND user_key = $2",
            &[&channel, &key],
        )
        .await?
        .and_then(|row| row.get(0));
    Ok(Book {
        timezone,
        reminders: rows.iter().map(|row| reminder_of(row, 0)).collect(),
    })
}

/// Writes `book` as `user`'s reminders and timezone (the user's row
/// exists; their reminders are none yet): `mnemo store copy`.
pub(crate) async fn write_book(
    db: &impl tokio_postgres::GenericClient,
    channel: &str,
    key: &str,
    book: &Book,
) -> Result<(), PgError> {
    db.execute(
        "UPDATE mnemo_users SET timezone = $3 WHERE channel = $1 AND user_key = $2",
        &[&channel, &key, &book.timezone],
    )
    .await?;
    for r in &book.reminders {
        if insert(db, channel, key, r).await? == 0 {
            return Err(PgError::Invalid(format!("reminder {} is there already", r.id)));
        }
    }
    Ok(())
}

/// Inserts `r` as a row of `user`'s (none if its id is taken); rows
/// inserted.
async fn insert(
    db: &impl tokio_postgres::GenericClient,
    channel: &str,
    key: &str,
    r: &Reminder,
) -> Result<u64, PgError> {
    let attempts = i32::try_from(r.attempts).unwrap_or(i32::MAX);
    Ok(db
        .execute(
            "INSERT INTO mnemo_reminders
                (channel, user_key, id, text, at, due, repeat, timezone, chat_id, thread_id, in_group, created,
                 state, claimed_at, attempts, missed, platform)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
             ON CONFLICT DO NOTHING",
            &[
                &channel,
                &key,
                &r.id,
                &r.text,
                &r.at,
                &r.due,
                &r.repeat,
                &r.timezone,
                &r.place.chat_id,
                &r.place.thread_id,
                &r.place.group,
                &r.created,
                &state_name(r.state),
                &r.claimed_at,
                &attempts,
                &r.missed,
                &r.place.platform,
            ],
        )
        .await?)
}

impl PgTurn {
    /// The user's own timezone.
    pub async fn timezone(&mut self) -> Result<Option<String>, PgError> {
        let (channel, key) = self.keys();
        Ok(self
            .conn()
            .query_opt(
                "SELECT timezone FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                &[&channel, &key],
            )
            .await?
            .and_then(|row| row.get(0)))
    }

    pub async fn set_timezone(&mut self, zone: &str) -> Result<(), PgError> {
        let (channel, key) = self.keys();
        self.conn()
            .execute(
                "INSERT INTO mnemo_users (channel, user_key, timezone) VALUES ($1, $2, $3)
                 ON CONFLICT (channel, user_key) DO UPDATE SET timezone = EXCLUDED.timezone",
                &[&channel, &key, &zone],
            )
            .await?;
        Ok(())
    }

    /// The reminders waiting for their time, soonest first.
    pub async fn reminders(&mut self) -> Result<Vec<Reminder>, PgError> {
        let (channel, key) = self.keys();
        let rows = self
            .conn()
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM mnemo_reminders
                     WHERE channel = $1 AND user_key = $2 AND state <> 'done' ORDER BY at, id"
                ),
                &[&channel, &key],
            )
            .await?;
        Ok(rows.iter().map(|row| reminder_of(row, 0)).collect())
    }

    /// Adds `r` unless `max` are waiting.
    pub async fn add_reminder(&mut self, r: &Reminder, max: usize) -> Result<Result<(), BookError>, PgError> {
        let (channel, key) = self.keys();
        let tx = self.with_user_row().await?;
        // The user's row, locked: two adds cannot both see room for one.
        tx.execute(
            "SELECT 1 FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
            &[&channel, &key],
        )
        .await?;
        let waiting: i64 = tx
            .query_one(
                "SELECT count(*) FROM mnemo_reminders WHERE channel = $1 AND user_key = $2 AND state <> 'done'",
                &[&channel, &key],
            )
            .await?
            .get(0);
        if usize::try_from(waiting).unwrap_or(usize::MAX) >= max {
            return Ok(Err(BookError::Full));
        }
        let client: &tokio_postgres::Transaction<'_> = &tx;
        let added = insert(client, &channel, &key, r).await?;
        if added == 0 {
            return Ok(Err(BookError::Taken));
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Cancels the waiting reminder `id`.
    pub async fn cancel_reminder(&mut self, id: &str) -> Result<bool, PgError> {
        let (channel, key) = self.keys();
        let n = self
            .conn()
            .execute(
                "DELETE FROM mnemo_reminders WHERE channel = $1 AND user_key = $2 AND id = $3 AND state <> 'done'",
                &[&channel, &key, &id],
            )
            .await?;
        Ok(n > 0)
    }

    /// The missed times of reminders set in `chat_id`, taken.
    pub async fn take_missed(&mut self, chat_id: &str) -> Result<Vec<Reminder>, PgError> {
        let (channel, key) = self.keys();
        // Asked at every turn, and almost always none: one statement, and
        // a transaction only when there is something to take.
        let any = self
            .conn()
            .query_opt(
                "SELECT 1 FROM mnemo_reminders
                 WHERE channel = $1 AND user_key = $2 AND chat_id = $3 AND missed IS NOT NULL LIMIT 1",
                &[&channel, &key, &chat_id],
            )
            .await?;
        if any.is_none() {
            return Ok(Vec::new());
        }
        let tx = self.conn().transaction().await?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM mnemo_reminders
                     WHERE channel = $1 AND user_key = $2 AND chat_id = $3 AND missed IS NOT NULL FOR UPDATE"
                ),
                &[&channel, &key, &chat_id],
            )
            .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut book = Book {
            timezone: None,
            reminders: rows.iter().map(|row| reminder_of(row, 0)).collect(),
        };
        let ids: Vec<String> = book.reminders.iter().map(|r| r.id.clone()).collect();
        let taken = book.take_missed(chat_id);
        for id in &ids {
            let left = book.reminders.iter().find(|r| &r.id == id);
            put(&tx, &channel, &key, id, left).await?;
        }
        tx.commit().await?;
        Ok(taken)
    }

    /// The user's reminders and timezone as the files hold them (export).
    pub async fn book(&mut self) -> Result<Book, PgError> {
        let (channel, key) = self.keys();
        let client: &tokio_postgres::Client = self.conn();
        read_book(client, &channel, &key).await
    }
}

impl PgChannel {
    /// Claims for `holder` up to `limit` reminders due at `now`; claims a
    /// broker left unfinished for [`CLAIM_SECS`] become missed first.
    pub async fn claim_reminders(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        holder: &str,
    ) -> Result<Vec<Claimed>, PgError> {
        let mut conn = self.store().conn().await?;
        let channel = self.name();
        let stale = now - Duration::seconds(CLAIM_SECS);
        let tx = conn.transaction().await?;
        let abandoned = tx
            .query(
                &format!(
                    "SELECT user_key, {COLUMNS} FROM mnemo_reminders
                     WHERE channel = $1 AND state = 'sending' AND claimed_at <= $2 FOR UPDATE SKIP LOCKED"
                ),
                &[&channel, &stale],
            )
            .await?;
        for row in &abandoned {
            let (key, r): (String, Reminder) = (row.get(0), reminder_of(row, 1));
            let user = crate::logged(&key);
            tracing::warn!(channel, %user, "a reminder's broker died posting it; kept as missed, the user is told");
            let id = r.id.clone();
            put(&tx, channel, &key, &id, r.abandoned().as_ref()).await?;
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = tx
            .query(
                &format!(
                    "UPDATE mnemo_reminders r SET state = 'sending', claimed_at = $2, claimed_by = $4
                     WHERE (r.channel, r.user_key, r.id) IN (
                         SELECT channel, user_key, id FROM mnemo_reminders
                         WHERE channel = $1 AND state = 'active' AND due <= $2
                         ORDER BY due LIMIT $3 FOR UPDATE SKIP LOCKED)
                     RETURNING r.user_key, {}",
                    COLUMNS
                        .split(", ")
                        .map(|c| format!("r.{c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                &[&channel, &now, &limit, &holder],
            )
            .await?;
        tx.commit().await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let key: String = row.get(0);
                Some(Claimed {
                    user: SafeName::from_encoded(&key)?,
                    reminder: reminder_of(row, 1),
                })
            })
            .collect())
    }

    /// Ends `holder`'s claim of `user`'s reminder `id` as `finish`.
    pub async fn finish_reminder(
        &self,
        user: &SafeName,
        id: &str,
        finish: Finish,
        holder: &str,
    ) -> Result<(), PgError> {
        let mut conn = self.store().conn().await?;
        let (channel, key) = (self.name(), user.as_str());
        let tx = conn.transaction().await?;
        let row = tx
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM mnemo_reminders
                     WHERE channel = $1 AND user_key = $2 AND id = $3 AND state = 'sending' AND claimed_by = $4
                     FOR UPDATE"
                ),
                &[&channel, &key, &id, &holder],
            )
            .await?;
        if let Some(row) = row {
            let next = reminder_of(&row, 0).finished(&finish);
            put(&tx, channel, key, id, next.as_ref()).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
