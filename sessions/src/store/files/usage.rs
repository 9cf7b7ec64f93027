//! The file store's usage ([`crate::usage`]): one `usage/<user>.json` per
//! user (tokens per day of theirs and purpose) and the channel's
//! `usage/channel.total` (per day of the channel's), each written whole
//! and atomically, the user's file first. Every file is read once, at the
//! first use, and kept in memory: one broker owns a state folder, so the
//! budget check before each answer reads no file.
//!
//! A file that does not parse is left as it is: usage on this channel
//! then fails with a storage error (logged; answers go on unmetered)
//! until an operator fixes or removes it; nothing overwrites it.

use super::loaded::{Loaded, json_users};
use crate::fsutil::{self, remove_if_exists};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::store::StoreError;
use crate::usage::{Days, Purpose, Spent, UsageRow};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Tokens in and out of one purpose on one day.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Tokens {
    #[serde(rename = "in")]
    tokens_in: u64,
    #[serde(rename = "out")]
    tokens_out: u64,
}

/// One file: day → purpose → tokens.
type Ledger = BTreeMap<NaiveDate, BTreeMap<Purpose, Tokens>>;

#[derive(Default)]
struct Ledgers {
    users: HashMap<SafeName, Ledger>,
    channel: Ledger,
}

/// A usage file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("usage file: {0}")]
struct UsageFileError(String);

fn storage(e: impl std::fmt::Display) -> StoreError {
    StoreError::storage(UsageFileError(e.to_string()))
}

/// Every user's usage, and the channel's, in one channel's folder.
pub(super) struct FileUsage {
    ledgers: Loaded<Ledgers>,
}

impl FileUsage {
    pub(super) fn new(layout: Layout) -> FileUsage {
        FileUsage {
            ledgers: Loaded::new(layout, read_all),
        }
    }

    /// Runs `f` on the ledgers, read first if this is the first use.
    async fn with<T>(&self, f: impl FnOnce(&mut Ledgers, &Layout) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut ledgers = self.ledgers.lock().await?;
        f(&mut ledgers, self.ledgers.layout())
    }

    pub(super) async fn add(&self, user: Option<&SafeName>, days: Days, spent: Spent) -> Result<(), StoreError> {
        self.with(|ledgers, layout| {
            if let Some(user) = user {
                let mut ledger = ledgers.users.get(user).cloned().unwrap_or_default();
                add_to(&mut ledger, days.user, spent);
                write(layout, &layout.usage_path(user), &ledger)?;
                ledgers.users.insert(user.clone(), ledger);
            }
            let mut channel = ledgers.channel.clone();
            add_to(&mut channel, days.channel, spent);
            write(layout, &layout.channel_usage_path(), &channel)?;
            ledgers.channel = channel;
            Ok(())
        })
        .await
    }

    pub(super) async fn of_user(&self, user: &SafeName, day: NaiveDate) -> Result<u64, StoreError> {
        self.with(|ledgers, _| Ok(ledgers.users.get(user).map_or(0, |l| total(l, day))))
            .await
    }

    pub(super) async fn of_channel(&self, day: NaiveDate) -> Result<u64, StoreError> {
        self.with(|ledgers, _| Ok(total(&ledgers.channel, day))).await
    }

    pub(super) async fn report(&self, since: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        self.with(|ledgers, _| {
            let mut rows = Vec::new();
            let mut users: Vec<_> = ledgers.users.iter().collect();
            users.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            for (user, ledger) in users {
                rows_of(&mut rows, Some(user), ledger, since);
            }
            rows_of(&mut rows, None, &ledgers.channel, since);
            Ok(rows)
        })
        .await
    }

    /// Deletes `user`'s file (at `/session clear all`); the channel's
    /// totals stay.
    pub(super) async fn forget(&self, user: &SafeName) -> Result<(), StoreError> {
        let layout = self.ledgers.layout();
        remove_if_exists(layout.state_root(), &layout.usage_path(user)).map_err(storage)?;
        if let Some(ledgers) = self.ledgers.if_read().await.as_mut() {
            ledgers.users.remove(user);
        }
        Ok(())
    }
}

fn add_to(ledger: &mut Ledger, day: NaiveDate, spent: Spent) {
    let tokens = ledger.entry(day).or_default().entry(spent.purpose).or_default();
    tokens.tokens_in = tokens.tokens_in.saturating_add(spent.tokens_in);
    tokens.tokens_out = tokens.tokens_out.saturating_add(spent.tokens_out);
}

fn total(ledger: &Ledger, day: NaiveDate) -> u64 {
    ledger.get(&day).map_or(0, |purposes| {
        purposes.values().fold(0u64, |sum, t| {
            sum.saturating_add(t.tokens_in).saturating_add(t.tokens_out)
        })
    })
}

fn rows_of(rows: &mut Vec<UsageRow>, user: Option<&SafeName>, ledger: &Ledger, since: NaiveDate) {
    for (day, purposes) in ledger.range(since..) {
        for (purpose, t) in purposes {
            rows.push(UsageRow {
                user: user.cloned(),
                day: *day,
                purpose: *purpose,
                tokens_in: t.tokens_in,
                tokens_out: t.tokens_out,
            });
        }
    }
}

fn write(layout: &Layout, path: &Path, ledger: &Ledger) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(ledger).map_err(storage)?;
    fsutil::replace(layout.state_root(), path, &bytes).map_err(storage)
}

fn read(layout: &Layout, path: &Path) -> Result<Ledger, StoreError> {
    match fsutil::read_if_exists(layout.state_root(), path).map_err(storage)? {
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| storage(format!("{}: {e}", path.display()))),
        None => Ok(Ledger::new()),
    }
}

/// `user`'s rows (`user: None`: the channel's totals) as the files hold
/// them, by day and purpose; none without a file. For `mnemo store copy`,
/// which runs without a bot.
pub fn read_usage(layout: &Layout, user: Option<&SafeName>) -> Result<Vec<UsageRow>, StoreError> {
    let ledger = read(layout, &path_of(layout, user))?;
    let mut rows = Vec::new();
    rows_of(&mut rows, user, &ledger, NaiveDate::MIN);
    Ok(rows)
}

/// Writes `user`'s file (`None`: the channel's) holding exactly `rows`,
/// whole and atomically; removes it when there are none. Nothing else may
/// write it meanwhile: `mnemo store copy` holds the instance lock.
pub fn write_usage(layout: &Layout, user: Option<&SafeName>, rows: &[UsageRow]) -> Result<(), StoreError> {
    let path = path_of(layout, user);
    if rows.is_empty() {
        return remove_if_exists(layout.state_root(), &path)
            .map(|_| ())
            .map_err(storage);
    }
    let mut ledger = Ledger::new();
    for r in rows {
        let spent = Spent {
            purpose: r.purpose,
            tokens_in: r.tokens_in,
            tokens_out: r.tokens_out,
        };
        add_to(&mut ledger, r.day, spent);
    }
    write(layout, &path, &ledger)
}

fn path_of(layout: &Layout, user: Option<&SafeName>) -> std::path::PathBuf {
    match user {
        Some(user) => layout.usage_path(user),
        None => layout.channel_usage_path(),
    }
}

/// Every file under `usage/`.
fn read_all(layout: &Layout) -> Result<Ledgers, StoreError> {
    let mut ledgers = Ledgers::default();
    for user in json_users(layout, &layout.usage_root()).map_err(storage)? {
        let ledger = read(layout, &layout.usage_path(&user))?;
        ledgers.users.insert(user, ledger);
    }
    ledgers.channel = read(layout, &layout.channel_usage_path())?;
    Ok(ledgers)
}
