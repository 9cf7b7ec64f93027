//! Links on Postgres (migration 10): `mnemo_links` (each linked account
//! and its home), `mnemo_link_codes` (one code per account, by its
//! SHA-256; taken by `DELETE … RETURNING`, so of two brokers one gets it)
//! and `mnemo_link_failures` (wrong codes, counted within the lock
//! window). The rules are the broker's (`mnemo_sessions::people`). What
//! intake reads (whose memory a message is) goes through the intake pool,
//! so a message is stored even while every turn's connection is busy.

use crate::{PgError, PgStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mnemo_sessions::SafeName;
use mnemo_sessions::people::{Account, KEEP_FAILURES, Link, LinkStore};
use mnemo_sessions::store::StoreError;

/// The links of every channel in one database.
#[derive(Clone)]
pub struct PgLinks {
    store: PgStore,
}

impl PgLinks {
    pub fn new(store: PgStore) -> PgLinks {
        PgLinks { store }
    }
}

fn failed(e: PgError) -> StoreError {
    StoreError::storage(e)
}

/// A query's failure, as the seam says it.
fn db(e: tokio_postgres::Error) -> StoreError {
    failed(PgError::from(e))
}

fn account(channel: String, user: String) -> Option<Account> {
    Some(Account {
        channel,
        user: SafeName::from_encoded(&user)?,
    })
}

#[async_trait]
impl LinkStore for PgLinks {
    async fn put_code(
        &self,
        hash: &str,
        who: &Account,
        now: DateTime<Utc>,
        expires: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut conn = self.store.conn().await.map_err(failed)?;
        let tx = conn.transaction().await.map_err(db)?;
        let (channel, user) = (&who.channel, who.user.as_str());
        tx.execute(
            "DELETE FROM mnemo_link_codes WHERE (channel = $1 AND user_key = $2) OR expires_at <= $3",
            &[channel, &user, &now],
        )
        .await
        .map_err(db)?;
        tx.execute(
            "INSERT INTO mnemo_link_codes (sha256, channel, user_key, expires_at) VALUES ($1, $2, $3, $4)",
            &[&hash, channel, &user, &expires],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn take_code(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<Account>, StoreError> {
        let conn = self.store.conn().await.map_err(failed)?;
        let row = conn
            .query_opt(
                "DELETE FROM mnemo_link_codes WHERE sha256 = $1 RETURNING channel, user_key, expires_at",
                &[&hash],
            )
            .await
            .map_err(db)?;
        Ok(row.and_then(|row| {
            let expires: DateTime<Utc> = row.get(2);
            (expires > now).then(|| account(row.get(0), row.get(1))).flatten()
        }))
    }

    async fn failed(&self, who: &Account, now: DateTime<Utc>) -> Result<(), StoreError> {
        let conn = self.store.conn().await.map_err(failed)?;
        let (channel, user, since) = (&who.channel, who.user.as_str(), now - KEEP_FAILURES);
        conn.execute(
            "DELETE FROM mnemo_link_failures WHERE channel = $1 AND user_key = $2 AND at <= $3",
            &[channel, &user, &since],
        )
        .await
        .map_err(db)?;
        conn.execute(
            "INSERT INTO mnemo_link_failures (channel, user_key, at) VALUES ($1, $2, $3)",
            &[channel, &user, &now],
        )
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn failures(&self, who: &Account, since: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, StoreError> {
        let conn = self.store.conn().await.map_err(failed)?;
        let rows = conn
            .query(
                "SELECT at FROM mnemo_link_failures WHERE channel = $1 AND user_key = $2 AND at >= $3 ORDER BY at",
                &[&who.channel, &who.user.as_str(), &since],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn link(&self, who: &Account, home: &Account, at: DateTime<Utc>) -> Result<(), StoreError> {
        let conn = self.store.conn().await.map_err(failed)?;
        conn.execute(
            "INSERT INTO mnemo_links (channel, user_key, home_channel, home_user, linked_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (channel, user_key) DO UPDATE SET home_channel = $3, home_user = $4, linked_at = $5",
            &[&who.channel, &who.user.as_str(), &home.channel, &home.user.as_str(), &at],
        )
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn unlink(&self, who: &Account) -> Result<bool, StoreError> {
        let conn = self.store.conn().await.map_err(failed)?;
        let n = conn
            .execute(
                "DELETE FROM mnemo_links WHERE channel = $1 AND user_key = $2",
                &[&who.channel, &who.user.as_str()],
            )
            .await
            .map_err(db)?;
        Ok(n > 0)
    }

    async fn home_of(&self, who: &Account) -> Result<Option<Account>, StoreError> {
        // Asked on intake: on the intake pool, never behind the turns'.
        let conn = self.store.intake_conn().await.map_err(failed)?;
        let row = conn
            .query_opt(
                "SELECT home_channel, home_user FROM mnemo_links WHERE channel = $1 AND user_key = $2",
                &[&who.channel, &who.user.as_str()],
            )
            .await
            .map_err(db)?;
        Ok(row.and_then(|row| account(row.get(0), row.get(1))))
    }

    async fn linked_to(&self, home: &Account) -> Result<Vec<Link>, StoreError> {
        Ok(self.all().await?.into_iter().filter(|l| l.home == *home).collect())
    }

    async fn all(&self) -> Result<Vec<Link>, StoreError> {
        // Read for intake (whose memory a message is): on the intake pool.
        let conn = self.store.intake_conn().await.map_err(failed)?;
        let rows = conn
            .query(
                "SELECT channel, user_key, home_channel, home_user, linked_at FROM mnemo_links ORDER BY linked_at, channel, user_key",
                &[],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                Some(Link {
                    account: account(row.get(0), row.get(1))?,
                    home: account(row.get(2), row.get(3))?,
                    at: row.get(4),
                })
            })
            .collect())
    }
}
