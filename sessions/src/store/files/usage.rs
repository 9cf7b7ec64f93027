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

use crate::blocking::off_workers;
use crate::fsutil::{self, remove_if_exists};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::store::StoreError;
use crate::usage::{Days, Purpose, Spent, UsageRow};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tokio::sync::Mutex;

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
    layout: Layout,
    ledgers: Mutex<Option<Ledgers>>,
}

impl FileUsage {
    pub(super) fn new(layout: Layout) -> FileUsage {
        FileUsage {
            layout,
            ledgers: Mutex::new(None),
        }
    }

    /// Runs `f` on the ledgers, read first if this is the first use.
    async fn with<T>(&self, f: impl FnOnce(&mut Ledgers, &Layout) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut guard = self.ledgers.lock().await;
        if guard.is_none() {
            let layout = self.layout.clone();
            let read = off_workers(move || read_all(&layout))
                .await
                .ok_or_else(|| storage("shutting down"))?;
            *guard = Some(read?);
        }
        let ledgers = guard.as_mut().ok_or_else(|| storage("not read"))?;
        f(ledgers, &self.layout)
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
        let path = self.layout.usage_path(user);
        remove_if_exists(self.layout.state_root(), &path).map_err(storage)?;
        if let Some(ledgers) = self.ledgers.lock().await.as_mut() {
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
        Some(bytes) => serde_json::from_slice(&bytes).map_err(storage),
        None => Ok(Ledger::new()),
    }
}

/// Every file under `usage/`.
fn read_all(layout: &Layout) -> Result<Ledgers, StoreError> {
    let mut ledgers = Ledgers::default();
    for entry in fsutil::list_dir(layout.state_root(), &layout.usage_root()).map_err(storage)? {
        let name = entry.file_name();
        let Some(user) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(SafeName::from_encoded)
        else {
            continue;
        };
        let ledger = read(layout, &layout.usage_path(&user))?;
        ledgers.users.insert(user, ledger);
    }
    ledgers.channel = read(layout, &layout.channel_usage_path())?;
    Ok(ledgers)
}
