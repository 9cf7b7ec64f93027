//! `/session export` on Postgres: the user's memory read in one snapshot
//! ([`crate::copy::read_user`], daily and weekly summaries included) and
//! bundled with the file store's own exporter into the channel's exports
//! folder, laid out as the files would hold it — the short-term log as
//! `stm/<user>/messages.jsonl`, the archived messages as one gzip'd JSONL
//! file under `archive/<user>/`, the rolling summary and the profile as
//! markdown, the daily and weekly summaries under `summaries/<user>/` with
//! their frontmatter, the fact log as `ltm/facts/<user>.jsonl`, topic
//! notes under `ltm/topics/<user>/` and the kept versions as records under
//! `ltm/versions/<user>/` (a profile's earlier body given the frontmatter
//! the files would have), reminders and timezone as `reminders/<user>.json`,
//! tokens spent as `usage/<user>.json`
//! — with the same README, so an export reads the
//! same whichever store made it.
//!
//! What it must not do: write anything to the state folder but the bundle.

use crate::PgError;
use crate::copy::UserMemory as Stored;
use chrono::{DateTime, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use mnemo_sessions::export::{self, Export};
use mnemo_sessions::store::StoreError;
use mnemo_sessions::{Layout, Record, SafeName, profile, versions};
use std::io::Write as _;
use std::path::PathBuf;

/// Bundles `user`'s memory of `channel` from the database into
/// `layout`'s exports folder.
pub async fn export(
    store: &crate::PgStore,
    channel: &str,
    layout: &Layout,
    user: &SafeName,
    (book, usage): (&mnemo_sessions::reminders::Book, &[mnemo_sessions::usage::UsageRow]),
    now: DateTime<Utc>,
) -> Result<Export, StoreError> {
    let stored = crate::copy::read_user(store, channel, user.as_str())
        .await
        .map_err(StoreError::storage)?;
    let mut extra = Vec::new();
    if let Some(stored) = &stored {
        extra = files_of(layout, user, stored)?;
        for digest in &stored.digests {
            let path = digest.period.path(layout, user);
            let text = mnemo_sessions::maintenance::digests::render(&path, &digest.meta, &digest.body)
                .map_err(StoreError::storage)?;
            extra.push((relative(layout, path)?, text.into_bytes()));
        }
    }
    if !book.is_empty() {
        let json = serde_json::to_vec_pretty(book).map_err(StoreError::storage)?;
        extra.push((relative(layout, layout.reminders_path(user))?, json));
    }
    if !usage.is_empty() {
        let json = mnemo_sessions::usage::ledger_json(usage);
        extra.push((relative(layout, layout.usage_path(user))?, json));
    }
    let (layout, user) = (layout.clone(), user.clone());
    tokio::task::spawn_blocking(move || export::export_user(&layout, &user, now, &extra))
        .await
        .map_err(StoreError::storage)?
        .map_err(StoreError::storage)
}

/// `path` relative to the channel's sessions folder.
fn relative(layout: &Layout, path: PathBuf) -> Result<PathBuf, StoreError> {
    path.strip_prefix(layout.root())
        .map(|p| p.to_path_buf())
        .map_err(|_| StoreError::storage(PgError::Invalid("a layout path outside its channel".into())))
}

/// The stored memory as files, at the paths the file store uses (relative
/// to the channel's sessions folder).
fn files_of(layout: &Layout, user: &SafeName, stored: &Stored) -> Result<Vec<(PathBuf, Vec<u8>)>, StoreError> {
    let mut files = Vec::new();
    let archived = stored.archived();
    let (old, recent) = stored.messages.split_at(archived.min(stored.messages.len()));
    if !recent.is_empty() {
        files.push((relative(layout, layout.messages_path(user))?, jsonl(recent)?));
    }
    if !old.is_empty() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&jsonl(old)?).map_err(StoreError::storage)?;
        let path = relative(layout, layout.archive_dir(user))?.join("archived.jsonl.gz");
        files.push((path, gz.finish().map_err(StoreError::storage)?));
    }
    if let Some(summary) = &stored.summary {
        files.push((relative(layout, layout.summary_path(user))?, markdown(summary)));
    }
    if let Some(profile) = &stored.profile {
        files.push((relative(layout, layout.profile_path(user))?, markdown(profile)));
    }
    if !stored.facts.is_empty() {
        let mut log = Vec::new();
        for entry in &stored.facts {
            serde_json::to_writer(&mut log, entry).map_err(StoreError::storage)?;
            log.push(b'\n');
        }
        files.push((relative(layout, layout.facts_path(user))?, log));
    }
    for (slug, document) in &stored.topics {
        let Some(slug) = SafeName::from_encoded(slug) else {
            continue; // not a name the files could hold
        };
        if let Some(path) = layout.topic_path(user, &slug) {
            files.push((relative(layout, path)?, document.clone().into_bytes()));
        }
    }
    for doc in &stored.documents {
        if !mnemo_sessions::documents::is_id(&doc.meta.id) {
            continue; // not a name the files could hold
        }
        let path = layout.document_path(user, &doc.meta.id);
        let text = mnemo_sessions::documents::file_text(&path, doc).map_err(StoreError::storage)?;
        files.push((relative(layout, path)?, text.into_bytes()));
    }
    for file in &stored.kept {
        if !mnemo_sessions::documents::is_id(&file.meta.id) {
            continue; // not a name the files could hold
        }
        let meta = serde_json::to_vec_pretty(&file.meta).map_err(StoreError::storage)?;
        let data = layout.kept_path(user, &format!("{}.bin", file.meta.id));
        let record = layout.kept_path(user, &format!("{}.json", file.meta.id));
        files.push((relative(layout, data)?, file.data.clone()));
        files.push((relative(layout, record)?, meta));
    }
    let profile_file = Layout::profile_file(user);
    for version in &stored.versions {
        let mut version = version.clone();
        if version.file == profile_file
            && let Some(body) = &version.before
        {
            version.before =
                Some(profile::document_of_body(layout, user, body, version.ts).map_err(StoreError::storage)?);
        }
        let path = layout.version_record_path(user, &versions::record_name(&version));
        files.push((
            relative(layout, path)?,
            serde_json::to_vec(&version).map_err(StoreError::storage)?,
        ));
    }
    Ok(files)
}

fn jsonl(records: &[Record]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    for record in records {
        serde_json::to_writer(&mut out, record).map_err(StoreError::storage)?;
        out.push(b'\n');
    }
    Ok(out)
}

fn markdown(body: &str) -> Vec<u8> {
    format!("{}\n", body.trim_end()).into_bytes()
}
