//! `/session` commands on the Postgres store. Most are answered by the
//! database on the turn's own connection (`mnemo_pg::PgChannel::command`).
//! `export` reads the user's memory in one snapshot
//! (`mnemo_pg::copy::read_user`, daily and weekly summaries included) and
//! bundles it with the file store's own
//! exporter into the channel's exports folder, laid out as the files would
//! hold it — the short-term log as `stm/<user>/messages.jsonl`, the archived
//! messages as one gzip'd JSONL file under `archive/<user>/`, the rolling
//! summary and the profile as markdown, the daily and weekly summaries
//! under `summaries/<user>/` with their frontmatter, the fact log as
//! `ltm/facts/<user>.jsonl`, topic notes under `ltm/topics/<user>/` and the
//! kept versions as records under `ltm/versions/<user>/` (a profile's
//! earlier body given the frontmatter the files would have) — with the
//! same README, so an export reads the same whichever store made it.
//! Nothing is written to the state folder but the bundle. A failure is
//! logged and the user gets the
//! same apology as on the files.

use crate::app::ChannelMemory;
use anyhow::{Context as _, Result};
use chrono::{DateTime, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use mnemo_pg::PgTurn;
use mnemo_sessions::commands::{Reply, STORAGE_PROBLEM, SessionCommand, exported};
use mnemo_sessions::{Layout, Record, SafeName, export, profile, versions};
use std::io::Write as _;
use std::path::PathBuf;

/// The reply to `command` for the user of `turn`.
pub async fn answer(memory: &ChannelMemory, turn: &mut PgTurn, command: &SessionCommand, now: DateTime<Utc>) -> Reply {
    let user = turn.user().clone();
    let answered = match (&memory.pg, command) {
        (Some(_), SessionCommand::Export) => export(memory, &user, now).await,
        (Some(channel), _) => channel
            .command(turn, command, now)
            .await
            .map(|text| Reply { text, export: None })
            .map_err(anyhow::Error::from),
        (None, _) => Err(anyhow::anyhow!("the channel is not on the Postgres store")),
    };
    answered.unwrap_or_else(|e| {
        tracing::warn!(user = %user, command = ?command, error = %e, "session command failed");
        Reply {
            text: STORAGE_PROBLEM.into(),
            export: None,
        }
    })
}

/// Bundles `user`'s memory from the database; the reply names the file.
async fn export(memory: &ChannelMemory, user: &SafeName, now: DateTime<Utc>) -> Result<Reply> {
    let pg = memory.pg.as_ref().context("the channel is not on the Postgres store")?;
    let stored = mnemo_pg::copy::read_user(pg.store(), pg.name(), user.as_str()).await?;
    let layout = memory.layout.clone();
    let user = user.clone();
    let mut extra = Vec::new();
    if let Some(stored) = &stored {
        extra = files_of(&layout, &user, stored)?;
        for digest in &stored.digests {
            let path = digest.period.path(&layout, &user);
            let text = mnemo_sessions::maintenance::digests::render(&path, &digest.meta, &digest.body)?;
            let relative = path
                .strip_prefix(layout.root())
                .context("a layout path outside its channel")?;
            extra.push((relative.to_path_buf(), text.into_bytes()));
        }
    }
    let bundle = tokio::task::spawn_blocking(move || export::export_user(&layout, &user, now, &extra))
        .await
        .context("the export task stopped")??;
    Ok(exported(bundle))
}

/// The stored memory as files, at the paths the file store uses (relative
/// to the channel's sessions folder).
fn files_of(layout: &Layout, user: &SafeName, stored: &mnemo_pg::copy::UserMemory) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let relative = |path: PathBuf| -> Result<PathBuf> {
        Ok(path
            .strip_prefix(layout.root())
            .context("a layout path outside its channel")?
            .to_path_buf())
    };
    let mut files = Vec::new();
    let archived = stored.archived();
    let (old, recent) = stored.messages.split_at(archived.min(stored.messages.len()));
    if !recent.is_empty() {
        files.push((relative(layout.messages_path(user))?, jsonl(recent)?));
    }
    if !old.is_empty() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&jsonl(old)?)?;
        let path = relative(layout.archive_dir(user))?.join("archived.jsonl.gz");
        files.push((path, gz.finish()?));
    }
    if let Some(summary) = &stored.summary {
        files.push((relative(layout.summary_path(user))?, markdown(summary)));
    }
    if let Some(profile) = &stored.profile {
        files.push((relative(layout.profile_path(user))?, markdown(profile)));
    }
    if !stored.facts.is_empty() {
        let mut log = Vec::new();
        for entry in &stored.facts {
            serde_json::to_writer(&mut log, entry)?;
            log.push(b'\n');
        }
        files.push((relative(layout.facts_path(user))?, log));
    }
    for (slug, document) in &stored.topics {
        let Some(slug) = SafeName::from_encoded(slug) else {
            continue; // not a name the files could hold
        };
        if let Some(path) = layout.topic_path(user, &slug) {
            files.push((relative(path)?, document.clone().into_bytes()));
        }
    }
    let profile_file = Layout::profile_file(user);
    for version in &stored.versions {
        let mut version = version.clone();
        if version.file == profile_file
            && let Some(body) = &version.before
        {
            version.before = Some(profile::document_of_body(layout, user, body, version.ts)?);
        }
        let path = layout.version_record_path(user, &versions::record_name(&version));
        files.push((relative(path)?, serde_json::to_vec(&version)?));
    }
    Ok(files)
}

fn jsonl(records: &[Record]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for record in records {
        serde_json::to_writer(&mut out, record)?;
        out.push(b'\n');
    }
    Ok(out)
}

fn markdown(body: &str) -> Vec<u8> {
    format!("{}\n", body.trim_end()).into_bytes()
}
