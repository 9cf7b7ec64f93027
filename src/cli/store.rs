//! `mnemo sessions report|export|maintain|reindex|usage`: the operator's
//! view of stored memory. `report`, `export` and `usage` (model tokens
//! spent, per user and purpose) only read (every file they read is
//! replaced atomically, so a running bot cannot show them half a file);
//! `maintain` and `reindex` write, so they take the instance lock and
//! refuse while a bot runs on the same folder (whose own scheduler does the
//! same work).

use super::{GlobalArgs, SessionsCommand, Setup};
use anyhow::{Context as _, Result, bail};
use chrono::{NaiveDate, TimeDelta, Utc};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::{Failure, Maintenance};
use mnemo_sessions::recall::Recall;
use mnemo_sessions::report::{self, human_bytes};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::store::MemoryStore;
use mnemo_sessions::store::files::FileStore;
use mnemo_sessions::usage::{Purpose, UsageRow};
use mnemo_sessions::{Layout, SafeName, commands};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub async fn run(global: &GlobalArgs, command: SessionsCommand) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    match command {
        SessionsCommand::Report { channel, json } => report(&setup, channel.as_deref(), json).await,
        SessionsCommand::Export { channel, user, out } => export(&setup, &channel, &user, &out).await,
        SessionsCommand::Maintain { channel, json } => maintain(&setup, channel.as_deref(), json).await,
        SessionsCommand::Forget { channel, user, yes } => super::keep::forget(&setup, &channel, &user, yes).await,
        SessionsCommand::Reindex { channel } => reindex(&setup, channel.as_deref()).await,
        SessionsCommand::Usage { channel, since, json } => usage(&setup, channel.as_deref(), since, json).await,
    }
}

/// The channels with a sessions folder, by their on-disk (encoded) name,
/// or just `only` when given (which must exist).
fn channels(state_root: &Path, only: Option<&str>) -> Result<Vec<String>> {
    if let Some(name) = only {
        let layout = Layout::new(state_root, name);
        if !layout.root().is_dir() {
            bail!("no stored memory for channel `{name}` under {}", state_root.display());
        }
        return Ok(vec![name.to_string()]);
    }
    Ok(report::known_channels(state_root)?)
}

fn open_stm(state_root: &Path, channel: &str) -> Result<(Stm, SessionConfig)> {
    let layout = Layout::new(state_root, channel);
    let config = SessionConfig::load(&layout.config_path())?;
    Ok((Stm::new(layout, LockRegistry::new(), config.stm.fsync), config))
}

async fn report(setup: &Setup, only: Option<&str>, json: bool) -> Result<ExitCode> {
    eprintln!("mnemo: stored memory in {}", setup.folder_place());
    if setup.config.store.kind == crate::config::StoreKind::Postgres {
        eprintln!(
            "mnemo: note: store.kind is postgres, so memory is kept in {}; this report covers the files only \
             (`mnemo store status` counts the database)",
            setup.database_place()
        );
    }
    let names = channels(&setup.state_root, only)?;
    let mut storages = Vec::new();
    for name in names {
        let (stm, _) = open_stm(&setup.state_root, &name)?;
        storages.push((name, report::channel_storage(&stm)?));
    }
    // Linked identities (in the database when the store is Postgres).
    let database = setup.database().await?;
    let links = crate::people::People::open(&setup.state_root, database.as_ref())
        .all()
        .await
        .context("reading the linked accounts")?;
    let shown = |a: &mnemo_sessions::people::Account| {
        format!(
            "{} {}",
            a.channel,
            a.user.decode().unwrap_or_else(|| a.user.to_string())
        )
    };
    if json {
        let channels: Vec<serde_json::Value> = storages.iter().map(|(name, s)| storage_json(name, s)).collect();
        let links: Vec<serde_json::Value> = links
            .iter()
            .map(|l| serde_json::json!({ "account": shown(&l.account), "memoryOf": shown(&l.home), "since": l.at }))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "stateDir": setup.state_root, "channels": channels, "links": links })
        );
        return Ok(ExitCode::SUCCESS);
    }
    for link in &links {
        println!(
            "linked: {} uses the memory of {} (since {})",
            shown(&link.account),
            shown(&link.home),
            link.at.format("%Y-%m-%d %H:%M UTC")
        );
    }
    if storages.is_empty() {
        println!("no stored memory under {}", setup.state_root.display());
    }
    for (name, storage) in storages {
        println!(
            "channel {name}: {} user(s), {} file(s), {}",
            storage.users.len(),
            storage.total_files(),
            human_bytes(storage.total_bytes())
        );
        println!(
            "  {:<32} {:>6} {:>10} {:>8} {:>9}  last activity",
            "user", "files", "bytes", "stm", "archived"
        );
        for u in &storage.users {
            let who = u.user.decode().unwrap_or_else(|| u.user.to_string());
            let last = u
                .last_activity
                .map_or_else(|| "-".to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
            println!(
                "  {who:<32} {:>6} {:>10} {:>8} {:>9}  {last}",
                u.files,
                human_bytes(u.bytes),
                u.stm_messages,
                u.archived_messages
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One channel of `sessions report --json`; byte counts exact.
fn storage_json(name: &str, s: &report::ChannelStorage) -> serde_json::Value {
    let users: Vec<serde_json::Value> = s
        .users
        .iter()
        .map(|u| {
            serde_json::json!({
                "user": u.user.decode().unwrap_or_else(|| u.user.to_string()),
                "files": u.files,
                "bytes": u.bytes,
                "stmMessages": u.stm_messages,
                "archivedMessages": u.archived_messages,
                "lastActivity": u.last_activity,
            })
        })
        .collect();
    serde_json::json!({
        "channel": name,
        "files": s.total_files(),
        "bytes": s.total_bytes(),
        "users": users,
    })
}

/// The same bundle `/session export` gives the user, written to `out`.
async fn export(setup: &Setup, channel: &str, user: &str, out: &Path) -> Result<ExitCode> {
    let database = setup.database().await?;
    let memory = crate::ops::keep::memory_for(&setup.state_root, channel, database.as_ref(), None)?;
    let reply =
        crate::ops::keep::as_user(&memory, channel, user, &commands::SessionCommand::Export, "exporting").await?;
    let Some(bundle) = reply.export else {
        bail!("the export produced no bundle: {}", reply.text)
    };
    std::fs::copy(&bundle, out).with_context(|| format!("cannot write {}", out.display()))?;
    std::fs::remove_file(&bundle).ok();
    println!(
        "{}\nfrom {}, written to {}",
        reply.text,
        memory.store.place(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn maintain(setup: &Setup, only: Option<&str>, json: bool) -> Result<ExitCode> {
    let parts = setup.parts(None)?;
    if let Some(store) = &parts.store {
        return maintain_database(setup, &parts, store, only, json).await;
    }
    eprintln!("mnemo: maintaining {}", setup.folder_place());
    let _instance = crate::instance::InstanceLock::acquire(&setup.state_root)?;
    let names = channels(&setup.state_root, only)?;
    let mut failed = false;
    let mut reports = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (stm, config) = open_stm(&setup.state_root, name)?;
        let maintenance = Maintenance::new(stm, config, parts.tz, Arc::clone(&parts.summarizer)).rotating_logs(i == 0);
        // With --json, stdout carries only the document.
        let say = |line: String| if json { eprintln!("{line}") } else { println!("{line}") };
        say(format!("channel {name}:"));
        let report = maintenance.run(Utc::now(), &mut |step| say(format!("  {step}"))).await;
        if !json {
            println!("  done: {report}");
        }
        failed |= print_failures(&report.failures);
        reports.push(maintenance_json(name, &report));
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "stateDir": setup.state_root, "channels": reports, "ok": !failed })
        );
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `sessions reindex` on the Postgres store: full-text recall needs no
/// index of ours there (the database keeps it), so this computes the
/// message vectors that are missing — a copied history, a changed
/// embeddings model — for every user of each channel with
/// `recall.embeddings`, with progress; beside running brokers (a user a
/// broker is filling right then is left to it).
async fn reindex_database(
    setup: &Setup,
    parts: &crate::parts::AppParts,
    store: &mnemo_pg::PgStore,
    only: Option<&str>,
) -> Result<ExitCode> {
    let place = setup.database_place();
    eprintln!("mnemo: reindexing {place}");
    mnemo_pg::migrate::check(store).await?;
    let started = std::time::Instant::now();
    let names = database_channels(store, only, &place).await?;
    let (mut users_done, mut vectors) = (0usize, 0usize);
    for name in &names {
        let (stm, config) = open_stm(&setup.state_root, name)?;
        let embedder = crate::model::embeddings::recall_embedder(config.recall.embeddings.as_ref(), &super::setup::env)
            .with_context(|| format!("the session config {} is refused", stm.layout().config_path().display()))?;
        let Some((embedder, _)) = embedder else {
            eprintln!("{name}: recall.embeddings is not set; full-text recall needs no index on Postgres");
            continue;
        };
        let channel = mnemo_pg::PgChannel::new(store.clone(), name, config, Arc::clone(&parts.summarizer));
        if !channel.vectors_in_use().await {
            bail!(
                "channel `{name}` has recall.embeddings, but pgvector is not set up in the database ({}): \
                 install pgvector on the server and run `mnemo store migrate`",
                store.vectors().await?
            );
        }
        let users = mnemo_pg::copy::users(store, Some(name), None).await?;
        for (i, (_, key)) in users.iter().enumerate() {
            let Some(user) = mnemo_sessions::SafeName::from_encoded(key) else {
                continue;
            };
            let mut stored = 0;
            loop {
                let n = mnemo_pg::vectors::fill(&channel, &user, embedder.as_ref())
                    .await
                    .with_context(|| format!("computing the vectors of user `{user}` of channel `{name}` (run reindex again once the embeddings endpoint works; what was stored stays)"))?;
                if n == 0 {
                    break;
                }
                stored += n;
                eprintln!("  {name}: user {}/{}: {stored} vectors so far", i + 1, users.len());
            }
            eprintln!("{name}: user {}/{} done: {stored} vectors", i + 1, users.len());
            vectors += stored;
            users_done += 1;
        }
    }
    println!(
        "computed {vectors} missing vectors of {users_done} user(s) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// `sessions maintain` on the Postgres store: the database's maintenance
/// (daily and weekly summaries, the fold sweep, expiry) of each channel
/// with users in it, under the channel's lease like a broker's run — a
/// channel whose lease a running broker holds is skipped and said so. No
/// instance lock: the database is shared by design.
async fn maintain_database(
    setup: &Setup,
    parts: &crate::parts::AppParts,
    store: &mnemo_pg::PgStore,
    only: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let place = setup.database_place();
    eprintln!("mnemo: maintaining {place}");
    mnemo_pg::migrate::check(store).await?;
    let names = database_channels(store, only, &place).await?;
    let holder = format!("mnemo sessions maintain/{}", std::process::id());
    let (mut failed, mut reports) = (false, Vec::new());
    for name in &names {
        let (_, config) = open_stm(&setup.state_root, name)?;
        let channel =
            mnemo_pg::PgChannel::new(store.clone(), name, config, Arc::clone(&parts.summarizer)).with_tz(parts.tz);
        let say = |line: String| if json { eprintln!("{line}") } else { println!("{line}") };
        say(format!("channel {name} (postgres):"));
        let report = mnemo_pg::maintain::run(&channel, &holder, Utc::now())
            .await
            .with_context(|| format!("maintaining channel `{name}` in the database"))?;
        say(format!("  done: {report}"));
        failed |= print_failures(&report.digest_failures);
        if report.failed > 0 {
            failed = true;
            eprintln!(
                "  failed: {} user(s)' fold or expiry (see the log; retried next run)",
                report.failed
            );
        }
        reports.push(serde_json::json!({
            "channel": name,
            "heldBy": report.held_by,
            "dailiesWritten": report.dailies,
            "weekliesWritten": report.weeklies,
            "summariesDeferred": report.digests_deferred,
            "folded": report.folded,
            "archivedUsers": report.expired,
            "failures": failures_json(&report.digest_failures),
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "database": place, "channels": reports, "ok": !failed })
        );
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The channels a database command covers: `only` (which must have users
/// in the database, `place`), or every channel with users there.
pub(super) async fn database_channels(
    store: &mnemo_pg::PgStore,
    only: Option<&str>,
    place: &str,
) -> Result<Vec<String>> {
    let known = store.channels().await?;
    match only {
        Some(name) if !known.iter().any(|c| c == name) => {
            bail!("no stored memory for channel `{name}` in {place}")
        }
        Some(name) => Ok(vec![name.to_string()]),
        None => Ok(known),
    }
}

/// Each failure of a maintenance run on stderr; whether there was one.
fn print_failures(failures: &[Failure]) -> bool {
    for f in failures {
        let who = f.user.as_ref().map(|u| format!(" ({u})")).unwrap_or_default();
        eprintln!("  failed: {}{who}: {}", f.task, f.reason);
    }
    !failures.is_empty()
}

/// The failures of a maintenance run as `sessions maintain --json` lists them.
fn failures_json(failures: &[Failure]) -> Vec<serde_json::Value> {
    failures
        .iter()
        .map(|f| serde_json::json!({ "task": f.task, "user": f.user.as_ref().map(|u| u.to_string()), "reason": f.reason }))
        .collect()
}

/// One channel of `sessions maintain --json`: counts, and each failure.
fn maintenance_json(name: &str, r: &mnemo_sessions::maintenance::MaintenanceReport) -> serde_json::Value {
    serde_json::json!({
        "channel": name,
        "dailiesWritten": r.dailies_written.len(),
        "weekliesWritten": r.weeklies_written.len(),
        "summariesDeferred": r.summaries_deferred,
        "archivedUsers": r.archived_users.len(),
        "expiryDeferred": r.expiry_deferred.len(),
        "rotatedLogs": r.rotated_logs.len(),
        "prunedDirs": r.pruned_dirs.len(),
        "removedTempFiles": r.removed_temp_files.len(),
        "removedExports": r.removed_exports.len(),
        "removedPastKeepTime": r.removed_expired.len(),
        "failures": failures_json(&r.failures),
    })
}

/// Rebuilds the recall index of every user, one user at a time (memory
/// holds one archive batch and the keys of one user's messages), printing
/// progress to stderr and a summary to stdout. A channel with
/// `recall.embeddings` also gets every user's vectors computed again.
async fn reindex(setup: &Setup, only: Option<&str>) -> Result<ExitCode> {
    if setup.config.store.kind == crate::config::StoreKind::Postgres {
        let parts = setup.parts(None)?;
        if let Some(store) = &parts.store {
            return reindex_database(setup, &parts, store, only).await;
        }
    }
    eprintln!("mnemo: reindexing {}", setup.folder_place());
    let _instance = crate::instance::InstanceLock::acquire(&setup.state_root)?;
    let started = std::time::Instant::now();
    let (mut users_done, mut messages, mut vectors) = (0usize, 0u64, 0u64);
    for name in channels(&setup.state_root, only)? {
        let (stm, config) = open_stm(&setup.state_root, &name)?;
        let recall = Recall::of(&stm);
        let embedder = crate::model::embeddings::recall_embedder(config.recall.embeddings.as_ref(), &super::setup::env)
            .with_context(|| format!("the session config {} is refused", stm.layout().config_path().display()))?;
        let embeddings = embedder.is_some();
        recall.use_embedder(embedder);
        let users = recall.users();
        for (i, user) in users.iter().enumerate() {
            let mut last_shown = 0u64;
            let count = recall
                .reindex(user, &mut |so_far| {
                    if so_far >= last_shown + 100_000 {
                        last_shown = so_far;
                        eprintln!("  {name}: user {}/{}: {so_far} messages so far", i + 1, users.len());
                    }
                })
                .with_context(|| format!("reindexing user `{user}` of channel `{name}`"))?;
            eprintln!("{name}: user {}/{} done: {count} messages", i + 1, users.len());
            if embeddings {
                let mut last_shown = 0u64;
                let (total, of) = (users.len(), i + 1);
                let channel = name.clone();
                let embedded = recall
                    .reindex_vectors(user, &mut move |so_far| {
                        if so_far >= last_shown + 10_000 {
                            last_shown = so_far;
                            eprintln!("  {channel}: user {of}/{total}: {so_far} vectors so far");
                        }
                    })
                    .await
                    .with_context(|| {
                        format!("computing the recall vectors of user `{user}` of channel `{name}` (its BM25 index is rebuilt; run reindex again once the embeddings endpoint works)")
                    })?;
                eprintln!("{name}: user {}/{} vectors: {embedded}", i + 1, users.len());
                vectors += embedded;
            }
            users_done += 1;
            messages += count;
        }
    }
    let vectors = if vectors > 0 {
        format!(" and {vectors} vectors")
    } else {
        String::new()
    };
    println!(
        "reindexed {messages} messages{vectors} of {users_done} user(s) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// Days `--since` reaches back when it is not given.
const DEFAULT_DAYS: i64 = 30;

/// Tokens in and out, summed over days.
type Sums = BTreeMap<(Option<String>, Purpose), (u64, u64)>;

/// `sessions usage`: model tokens spent per user and purpose, and each
/// channel's total, from the configured store (named on stderr); read
/// only, beside a running bot.
async fn usage(setup: &Setup, only: Option<&str>, since: Option<NaiveDate>, json: bool) -> Result<ExitCode> {
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
