//! Model tokens spent, on Postgres ([`mnemo_sessions::usage`]): a user's
//! rows in `mnemo_usage` by their day and purpose, the channel's totals in
//! `mnemo_channel_usage` by its day. An addition is one statement per
//! table (`INSERT … ON CONFLICT DO UPDATE SET tokens = tokens + …`) in one
//! transaction, so brokers adding at once sum and a reader sees both or
//! neither. On the intake pool: the budget is read and spent while a
//! turn holds its connection of the turns' pool, and waiting there for a
//! second one could starve every turn at once.

use crate::{PgChannel, PgError};
use chrono::NaiveDate;
use mnemo_sessions::SafeName;
use mnemo_sessions::usage::{Days, Purpose, Spent, UsageRow};

pub(crate) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl PgChannel {
    /// Adds `spent` to `user`'s row of `days.user` (if a user) and to the
    /// channel's total of `days.channel`.
    pub async fn add_usage(&self, user: Option<&SafeName>, days: Days, spent: Spent) -> Result<(), PgError> {
        let mut conn = self.store().intake_conn().await?;
        let (channel, purpose) = (self.name(), spent.purpose.as_str());
        let (tokens_in, tokens_out) = (signed(spent.tokens_in), signed(spent.tokens_out));
        let tx = conn.transaction().await?;
        if let Some(user) = user {
            tx.execute(
                "INSERT INTO mnemo_usage (channel, user_key, day, purpose, tokens_in, tokens_out)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (channel, user_key, day, purpose) DO UPDATE
                 SET tokens_in = mnemo_usage.tokens_in + EXCLUDED.tokens_in,
                     tokens_out = mnemo_usage.tokens_out + EXCLUDED.tokens_out",
                &[&channel, &user.as_str(), &days.user, &purpose, &tokens_in, &tokens_out],
            )
            .await?;
        }
        tx.execute(
            "INSERT INTO mnemo_channel_usage (channel, day, purpose, tokens_in, tokens_out)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (channel, day, purpose) DO UPDATE
             SET tokens_in = mnemo_channel_usage.tokens_in + EXCLUDED.tokens_in,
                 tokens_out = mnemo_channel_usage.tokens_out + EXCLUDED.tokens_out",
            &[&channel, &days.channel, &purpose, &tokens_in, &tokens_out],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// `user`'s tokens, in + out, on their day `day`.
    pub async fn usage(&self, user: &SafeName, day: NaiveDate) -> Result<u64, PgError> {
        let conn = self.store().intake_conn().await?;
        let row = conn
            .query_one(
                "SELECT COALESCE(sum(tokens_in + tokens_out), 0)::bigint FROM mnemo_usage
                 WHERE channel = $1 AND user_key = $2 AND day = $3",
                &[&self.name(), &user.as_str(), &day],
            )
            .await?;
        Ok(unsigned(row.get(0)))
    }

    /// The channel's tokens, in + out, on its day `day`.
    pub async fn channel_usage(&self, day: NaiveDate) -> Result<u64, PgError> {
        let conn = self.store().intake_conn().await?;
        let row = conn
            .query_one(
                "SELECT COALESCE(sum(tokens_in + tokens_out), 0)::bigint FROM mnemo_channel_usage
                 WHERE channel = $1 AND day = $2",
                &[&self.name(), &day],
            )
            .await?;
        Ok(unsigned(row.get(0)))
    }

    /// Every user's rows and the channel's totals from `since` on, in the
    /// file store's order (users by encoded name, day, purpose).
    pub async fn usage_report(&self, since: NaiveDate) -> Result<Vec<UsageRow>, PgError> {
        let conn = self.store().intake_conn().await?;
        let rows = conn
            .query(
                "SELECT user_key, day, purpose, tokens_in, tokens_out FROM (
                     SELECT user_key, day, purpose, tokens_in, tokens_out, 0 AS part
                       FROM mnemo_usage WHERE channel = $1 AND day >= $2
                     UNION ALL
                     SELECT NULL, day, purpose, tokens_in, tokens_out, 1
                       FROM mnemo_channel_usage WHERE channel = $1 AND day >= $2
                 ) u ORDER BY part, user_key COLLATE \"C\", day,
                   array_position(ARRAY['answer', 'tools', 'summary', 'digest'], purpose)",
                &[&self.name(), &since],
            )
            .await?;
        let mut report = Vec::with_capacity(rows.len());
        for row in rows {
            let user: Option<String> = row.get(0);
            let purpose: String = row.get(2);
            // A purpose this build does not know (written by a newer one) is skipped.
            let Some(purpose) = Purpose::parse(&purpose) else {
                continue;
            };
            report.push(UsageRow {
                user: user.as_deref().and_then(SafeName::from_encoded),
                day: row.get(1),
                purpose,
                tokens_in: unsigned(row.get(3)),
                tokens_out: unsigned(row.get(4)),
            });
        }
        Ok(report)
    }

    /// Every row of `user`, by day and purpose (their export).
    pub async fn user_usage(&self, user: &SafeName) -> Result<Vec<UsageRow>, PgError> {
        let conn = self.store().intake_conn().await?;
        let rows = conn
            .query(
                "SELECT day, purpose, tokens_in, tokens_out FROM mnemo_usage
                 WHERE channel = $1 AND user_key = $2 ORDER BY day, purpose",
                &[&self.name(), &user.as_str()],
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                Some(UsageRow {
                    user: Some(user.clone()),
                    day: row.get(0),
                    purpose: Purpose::parse(&row.get::<_, String>(1))?,
                    tokens_in: unsigned(row.get(2)),
                    tokens_out: unsigned(row.get(3)),
                })
            })
            .collect())
    }

    /// Deletes `user`'s rows (the channel's totals stay).
    pub async fn forget_usage(&self, user: &SafeName) -> Result<(), PgError> {
        let conn = self.store().intake_conn().await?;
        conn.execute(
            "DELETE FROM mnemo_usage WHERE channel = $1 AND user_key = $2",
            &[&self.name(), &user.as_str()],
        )
        .await?;
        Ok(())
    }
}
