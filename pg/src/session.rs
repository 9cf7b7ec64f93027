//! What the `/session` commands read and delete of one user on Postgres
//! (status, profile, clear, clear all), on the turn's connection: inside
//! the user's lock, and without a second connection (a flood of commands
//! cannot exhaust the pool waiting for one). The replies are above the
//! seam (`mnemo_sessions::commands`).

use crate::PgError;
use crate::turn::PgTurn;
use chrono::{DateTime, Utc};
use mnemo_sessions::profile;
use mnemo_sessions::store::{Cleared, Held, Status};

/// Unit of [`Held`] on the database: what `clear all` counts.
const UNIT: &str = "stored item";

impl PgTurn {
    /// The numbers `/session status` shows, in one statement.
    pub async fn status(&mut self) -> Result<Status, PgError> {
        let (channel, key) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let row = self
            .conn()
            .query_opt(
                "SELECT count(*) FILTER (WHERE m.fold IS NULL), count(m.seq), u.summary_at, u.profile,
                        (SELECT count(*) FROM mnemo_topics t
                         WHERE t.channel = $1 AND t.user_key = $2),
                        u.timezone,
                        (SELECT count(*) FROM mnemo_reminders r
                         WHERE r.channel = $1 AND r.user_key = $2 AND r.state <> 'done'),
                        (SELECT count(*) FROM mnemo_documents d
                         WHERE d.channel = $1 AND d.user_key = $2),
                        (SELECT count(*) FROM mnemo_kept_files k
                         WHERE k.channel = $1 AND k.user_key = $2)
                 FROM mnemo_users u LEFT JOIN mnemo_messages m USING (channel, user_key)
                 WHERE u.channel = $1 AND u.user_key = $2 GROUP BY u.summary_at, u.profile, u.timezone",
                &[&channel, &key],
            )
            .await?;
        let Some(row) = row else {
            return Ok(Status {
                profile_entries: Some(0),
                ..Status::default()
            });
        };
        let (short, all): (i64, i64) = (row.get(0), row.get(1));
        let summary_at: Option<DateTime<Utc>> = row.get(2);
        let profile: Option<String> = row.get(3);
        let notes: i64 = row.get(4);
        let reminders: i64 = row.get(6);
        let documents: i64 = row.get(7);
        let kept_files: i64 = row.get(8);
        Ok(Status {
            stm_messages: count(short),
            archived_messages: count(all - short),
            summary_at,
            profile_entries: Some(profile.as_deref().map_or(0, profile::entries_of_body)),
            topic_notes: count(notes),
            storage: None,
            timezone: row.get(5),
            reminders: count(reminders),
            documents: count(documents),
            kept_files: count(kept_files),
        })
    }

    /// The profile's body as stored.
    pub async fn profile(&mut self) -> Result<Option<String>, PgError> {
        let (channel, key) = (self.channel_name().to_string(), self.user().as_str().to_string());
        Ok(self
            .conn()
            .query_opt(
                "SELECT profile FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                &[&channel, &key],
            )
            .await?
            .and_then(|row| row.get(0)))
    }

    /// Deletes short-term memory (the unfolded messages) and the rolling
    /// summary, in one transaction.
    pub async fn clear(&mut self) -> Result<Cleared, PgError> {
        let (channel, key) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let tx = self.conn().transaction().await?;
        let messages = tx
            .execute(
                "DELETE FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND fold IS NULL",
                &[&channel, &key],
            )
            .await?;
        let summary = tx
            .execute(
                "UPDATE mnemo_users SET summary = NULL, summary_at = NULL
                 WHERE channel = $1 AND user_key = $2 AND summary IS NOT NULL",
                &[&channel, &key],
            )
            .await?;
        tx.commit().await?;
        Ok(Cleared {
            messages: usize::try_from(messages).unwrap_or(usize::MAX),
            had_summary: summary > 0,
        })
    }

    /// What `clear all` would delete, counted as items: each message
    /// (short-term and archived), topic note, daily or weekly summary,
    /// reminder, document and kept file, and the profile, rolling summary and timezone if there are.
    pub async fn held(&mut self) -> Result<Held, PgError> {
        let (channel, key) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let n: i64 = self
            .conn()
            .query_opt(
                "SELECT (SELECT count(*) FROM mnemo_messages WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_topics WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_digests WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_reminders WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_usage WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_documents WHERE channel = $1 AND user_key = $2)
                      + (SELECT count(*) FROM mnemo_kept_files WHERE channel = $1 AND user_key = $2)
                      + (u.profile IS NOT NULL)::int + (u.summary IS NOT NULL)::int
                      + (u.timezone IS NOT NULL)::int
                 FROM mnemo_users u WHERE u.channel = $1 AND u.user_key = $2",
                &[&channel, &key],
            )
            .await?
            .map_or(0, |row| row.get(0));
        Ok(Held {
            count: count(n),
            unit: UNIT,
        })
    }

    /// Deletes everything stored about the user (the user's row; the rest
    /// goes with it).
    pub async fn clear_all(&mut self) -> Result<Held, PgError> {
        let held = self.held().await?;
        let (channel, key) = (self.channel_name().to_string(), self.user().as_str().to_string());
        self.conn()
            .execute(
                "DELETE FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                &[&channel, &key],
            )
            .await?;
        Ok(held)
    }
}

fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}
