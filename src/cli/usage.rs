//! `mnemo sessions usage`: model tokens spent, per user and purpose, and
//! each channel's total, from the configured store (the files or the
//! database, named on stderr). Read only, beside a running bot: every
//! usage file is replaced atomically, and the database adds in one
//! statement.

use super::Setup;
use super::store::{channels, database_channels, open_stm};
use anyhow::Result;
use chrono::{NaiveDate, TimeDelta, Utc};
use mnemo_sessions::SafeName;
use mnemo_sessions::store::MemoryStore;
use mnemo_sessions::store::files::FileStore;
use mnemo_sessions::usage::{Purpose, UsageRow};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

/// Days `--since` reaches back when it is not given.
const DEFAULT_DAYS: i64 = 30;

/// Tokens in and out, summed over days.
type Sums = BTreeMap<(Option<String>, Purpose), (u64, u64)>;

pub async fn usage(setup: &Setup, only: Option<&str>, since: Option<NaiveDate>, json: bool) -> Result<ExitCode> {
    let since = since.unwrap_or_else(|| Utc::now().date_naive() - TimeDelta::days(DEFAULT_DAYS));
    let mut found = Vec::new();
    let place = match setup.database().await? {
        Some(store) => {
            let place = setup.database_place();
            eprintln!("mnemo: usage in {place}");
            for name in database_channels(&store, only, &place).await? {
                let (_, config) = open_stm(&setup.state_root, &name)?;
                let channel = mnemo_pg::PgChannel::new(
                    store.clone(),
                    &name,
                    config,
                    Arc::new(mnemo_sessions::summarizer::NoModel),
                );
                let rows = channel.usage_report(since).await?;
                found.push((name, rows));
            }
            serde_json::json!({ "database": place })
        }
        None => {
            eprintln!("mnemo: usage in {}", setup.folder_place());
            for name in channels(&setup.state_root, only)? {
                let (stm, config) = open_stm(&setup.state_root, &name)?;
                let store = FileStore::without_model(stm, config);
                let rows = store.usage_report(since).await?;
                found.push((name, rows));
            }
            serde_json::json!({ "stateDir": setup.state_root })
        }
    };
    let summed: Vec<(String, Sums)> = found.into_iter().map(|(name, rows)| (name, sums(&rows))).collect();
    if json {
        let channels: Vec<serde_json::Value> = summed.iter().map(|(name, s)| channel_json(name, s)).collect();
        let mut doc = place;
        doc["since"] = serde_json::json!(since);
        doc["channels"] = serde_json::json!(channels);
        println!("{doc}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("model tokens since {since}");
    for (name, s) in &summed {
        println!("channel {name}:");
        println!(
            "  {:<32} {:<8} {:>12} {:>12}",
            "user", "purpose", "tokens in", "tokens out"
        );
        for ((user, purpose), (tin, tout)) in s {
            let who = user.as_deref().unwrap_or("(channel total)");
            println!("  {who:<32} {:<8} {tin:>12} {tout:>12}", purpose.as_str());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A user's name as `sessions report` shows it: decoded, else encoded.
fn shown(user: &SafeName) -> String {
    user.decode().unwrap_or_else(|| user.to_string())
}

/// Rows summed over their days, by user (`None`: the channel's total)
/// and purpose (the total sorts first).
fn sums(rows: &[UsageRow]) -> Sums {
    let mut sums = Sums::new();
    for row in rows {
        let key = (row.user.as_ref().map(shown), row.purpose);
        let sum = sums.entry(key).or_default();
        sum.0 = sum.0.saturating_add(row.tokens_in);
        sum.1 = sum.1.saturating_add(row.tokens_out);
    }
    sums
}

fn channel_json(name: &str, sums: &Sums) -> serde_json::Value {
    let entry = |purpose: Purpose, (tin, tout): (u64, u64)| serde_json::json!({ "purpose": purpose.as_str(), "tokensIn": tin, "tokensOut": tout });
    let mut users: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let mut total = Vec::new();
    for ((user, purpose), sum) in sums {
        match user {
            Some(user) => users.entry(user).or_default().push(entry(*purpose, *sum)),
            None => total.push(entry(*purpose, *sum)),
        }
    }
    let users: Vec<serde_json::Value> = users
        .into_iter()
        .map(|(user, purposes)| serde_json::json!({ "user": user, "purposes": purposes }))
        .collect();
    serde_json::json!({ "channel": name, "users": users, "total": total })
}
