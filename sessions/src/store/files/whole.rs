//! A user's whole memory ([`Whole`]) read from the files and written into
//! them: what `mnemo store copy` moves between the state folder and the
//! database, and what linking reads and writes when it merges two
//! accounts' memories ([`crate::whole::merge`]).
//!
//! [`read`] only reads, and is safe while a bot runs on the folder: every
//! file it reads is replaced atomically or only appended to, and the log is
//! read before the archive, while a fold writes its archive batch before it
//! cuts the log, so a record folded meanwhile is found in the archive (and
//! read once: a repeat is dropped by msg id), never missed. What it skipped
//! (malformed lines, repeats, files mnemo does not write) is counted or
//! listed, never hidden.
//!
//! [`clear`] and [`write`] change the user's files and must run where no
//! turn of that user can (the copy holds the instance lock; the file
//! store's [`super::FileStore`] holds the user's lock and drops what it
//! keeps in memory of them afterwards). [`write`] reads what it wrote back
//! and compares it with what it was given.

use crate::locks::LockRegistry;
use crate::maintenance::digests::{self, DigestMeta, Period};
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::Stm;
use crate::store::{StoreError, UserMemory as _};
use crate::versions::{self, Author, Change, Version};
use crate::whole::{Fold, StoredDigest, Whole};
use crate::{Layout, archive, documents, facts, fsutil, kept, profile, summary, topics};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::path::PathBuf;

/// What a step of reading or writing failed with.
type Failed = Box<dyn std::error::Error + Send + Sync>;

/// A user's memory read from the files, and what reading it skipped.
pub struct WholeRead {
    pub memory: Whole,
    /// Malformed lines in the log or the archive, left out.
    pub skipped_lines: usize,
    /// The same record twice (a crash between archiving and cutting the
    /// log), read once.
    pub duplicates: usize,
    /// Files in the user's summaries folders mnemo does not write, left out.
    pub not_ours: Vec<PathBuf>,
}

/// One user's memory from the files: the log first, then the archive
/// batches (see the module doc for why in this order), assembled as the
/// database keeps it — batches oldest first, then the log, each record once.
/// Two different records with one msg id are an error (naming the id).
pub fn read(layout: &Layout, user: &SafeName) -> Result<WholeRead, StoreError> {
    read_inner(layout, user).map_err(StoreError::Storage)
}

fn read_inner(layout: &Layout, user: &SafeName) -> Result<WholeRead, Failed> {
    let stm = Stm::new(layout.clone(), LockRegistry::new(), false);
    let log = stm.read_all(user)?;
    let mut skipped_lines = log.skipped_lines;
    let mut batches = Vec::new();
    for path in archive::files(layout, user)? {
        let (records, skipped) = archive::read_batch_counted(layout, &path)?;
        skipped_lines += skipped;
        batches.push(records);
    }
    let mut memory = Whole::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut duplicates = 0;
    let mut keep = |record: Record, memory: &mut Whole| -> Result<bool, Failed> {
        if let Some(&at) = seen.get(&record.msg_id) {
            if memory.messages[at] == record {
                duplicates += 1;
                return Ok(false);
            }
            return Err(format!(
                "two different messages carry the msg id {:?} (one in the archive or the log, one later): \
                 the database keys messages by it; fix or remove one of them",
                record.msg_id
            )
            .into());
        }
        seen.insert(record.msg_id.clone(), memory.messages.len());
        memory.messages.push(record);
        Ok(true)
    };
    for batch in batches {
        let (mut kept, mut at) = (0, None);
        for record in batch {
            let ts = record.ts;
            if keep(record, &mut memory)? {
                kept += 1;
                at = at.max(Some(ts));
            }
        }
        if let Some(at) = at {
            memory.folds.push(Fold {
                messages: kept,
                kind: "summarized".to_string(),
                at,
            });
        }
    }
    for record in log.records {
        keep(record, &mut memory)?;
    }
    if let Some(doc) = summary::read_or_salvage(layout, user)? {
        memory.summary = Some(doc.body.trim().to_string()).filter(|b| !b.is_empty());
        memory.summary_at = doc.meta.last_compacted;
        memory.failures = i32::try_from(doc.meta.failures).unwrap_or(i32::MAX);
    }
    if let Some(doc) = profile::read(layout, user)? {
        memory.profile = Some(doc.body.trim().to_string()).filter(|b| !b.is_empty());
        memory.profile_at = doc.meta.updated;
    }
    read_long_term(layout, user, &mut memory)?;
    let mut not_ours = Vec::new();
    memory.digests = read_digests(layout, user, &mut not_ours)?;
    memory.reminders = super::read_book(layout, user)?;
    for meta in kept::list(layout, user)? {
        if let Some(file) = kept::read(layout, user, &meta.id)? {
            memory.kept.push(file);
        }
    }
    for meta in documents::list(layout, user)? {
        if let Some(doc) = documents::read(layout, user, &meta.id)? {
            memory.documents.push(doc);
        }
    }
    memory.usage = super::read_usage(layout, Some(user))?;
    Ok(WholeRead {
        memory: memory.as_stored(),
        skipped_lines,
        duplicates,
        not_ours,
    })
}

/// The fact log, the versions (oldest first; a profile's `before` as its
/// body, as the database keeps it) and the topic notes (whole files).
fn read_long_term(layout: &Layout, user: &SafeName, memory: &mut Whole) -> Result<(), Failed> {
    memory.facts = facts::read(layout, user)?.entries;
    let profile_file = Layout::profile_file(user);
    let mut kept = versions::history(layout, user)?;
    kept.reverse();
    for version in &mut kept {
        if version.file == profile_file {
            version.before = version.before.as_deref().map(profile::body_of_document);
        }
    }
    memory.versions = kept;
    for note in topics::list(layout, user)? {
        let slug = note_name(&note.slug)?;
        let Some(path) = layout.topic_path(user, &slug) else {
            continue;
        };
        if let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &path)? {
            memory.topics.push((slug.as_str().to_string(), text));
        }
    }
    Ok(())
}

/// The user's daily and weekly summaries (`summaries/<user>/daily|weekly/`),
/// named as mnemo names them; another file there is not one and is left
/// out (in `not_ours`). A digest whose frontmatter is gone (edited by
/// hand) is read whole as its body, with frontmatter made for it (made at
/// noon of its period: when it was written is not known).
fn read_digests(layout: &Layout, user: &SafeName, not_ours: &mut Vec<PathBuf>) -> Result<Vec<StoredDigest>, Failed> {
    let root = layout.state_root();
    let mut out = Vec::new();
    for (dir, kind) in [(layout.daily_dir(user), "daily"), (layout.weekly_dir(user), "weekly")] {
        for entry in fsutil::list_dir(root, &dir)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let period = name.strip_suffix(".md").and_then(|stem| Period::parse(kind, stem));
            let Some(period) = period else {
                not_ours.push(entry.path());
                continue;
            };
            let Some((meta, body)) = digests::read_digest(root, &entry.path())? else {
                continue;
            };
            let made = period.noon().unwrap_or_default();
            let meta = meta.unwrap_or_else(|| DigestMeta::new(user, period, chrono_tz::UTC, made, 0));
            out.push(StoredDigest { period, meta, body });
        }
    }
    Ok(out)
}

/// Deletes what [`write`] writes for `user` — the STM folder (log,
/// summary, a copy's marker), the archive, the profile and topic notes
/// (through `versions`, so the old ones are kept as versions, by the
/// operator, saying `what`), the fact log, the daily and weekly summaries,
/// reminders, documents, kept files and usage — and nothing else. The
/// recall index is the caller's to drop.
pub fn clear(layout: &Layout, user: &SafeName, what: &'static str, now: DateTime<Utc>) -> Result<(), StoreError> {
    clear_inner(layout, user, what, now).map_err(StoreError::Storage)
}

fn clear_inner(layout: &Layout, user: &SafeName, what: &'static str, now: DateTime<Utc>) -> Result<(), Failed> {
    let root = layout.state_root();
    fsutil::remove_if_exists(root, &layout.stm_dir(user))?;
    fsutil::remove_if_exists(root, &layout.archive_dir(user))?;
    let change = Change {
        by: Author::Operator,
        what,
    };
    versions::replace(layout, user, &layout.profile_path(user), None, change, now)?;
    for note in topics::list(layout, user)? {
        let slug = note_name(&note.slug)?;
        if let Some(path) = layout.topic_path(user, &slug) {
            versions::replace(layout, user, &path, None, change, now)?;
        }
    }
    for path in [
        layout.facts_path(user),
        layout.daily_dir(user),
        layout.weekly_dir(user),
        layout.reminders_path(user),
        layout.documents_dir(user),
        layout.kept_dir(user),
        layout.usage_path(user),
    ] {
        fsutil::remove_if_exists(root, &path)?;
    }
    Ok(())
}

/// Writes `memory` as `user`'s files (where [`clear`] left nothing of
/// theirs), then reads them back and compares: a difference is an error
/// naming both tallies. `what` is what the profile's and notes' versions
/// say wrote them; `kept_after` are versions appended after `memory`'s own
/// (renumbered after them), e.g. the ones [`clear`] made of what was there.
pub fn write(
    layout: &Layout,
    user: &SafeName,
    memory: &Whole,
    what: &'static str,
    kept_after: Vec<Version>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    write_inner(layout, user, memory, what, kept_after, now).map_err(StoreError::Storage)
}

fn write_inner(
    layout: &Layout,
    user: &SafeName,
    memory: &Whole,
    what: &'static str,
    kept_after: Vec<Version>,
    now: DateTime<Utc>,
) -> Result<(), Failed> {
    let start = write_batches(layout, user, memory)?;
    if memory.summary.is_some() || memory.failures > 0 {
        let mut doc = summary::empty(user);
        doc.meta.last_compacted = memory.summary_at;
        doc.meta.messages_compacted = memory.archived() as u64;
        doc.meta.failures = u32::try_from(memory.failures).unwrap_or(0);
        doc.body = memory.summary.clone().unwrap_or_default();
        summary::write(layout, user, &doc)?;
    }
    let change = Change {
        by: Author::Operator,
        what,
    };
    if let Some(body) = &memory.profile {
        let mut doc = profile::new_profile(layout, user, memory.profile_at.unwrap_or(now));
        doc.meta.updated = memory.profile_at;
        doc.body = body.clone();
        profile::write(layout, user, &doc, change, now)?;
    }
    write_long_term(layout, user, memory, change, kept_after, now)?;
    super::write_book(layout, user, &memory.reminders)?;
    for doc in &memory.documents {
        documents::write(layout, user, doc)?;
    }
    for file in &memory.kept {
        kept::keep(layout, user, file)?;
    }
    super::write_usage(layout, Some(user), &memory.usage)?;
    write_log(layout, user, &memory.messages[start..])?;
    verify(layout, user, memory, true)
}

/// Writes an archive batch for each of `memory`'s folds (the same records
/// make the same file); where its short-term messages start.
fn write_batches(layout: &Layout, user: &SafeName, memory: &Whole) -> Result<usize, Failed> {
    let mut start = 0;
    for fold in &memory.folds {
        archive::write_batch(layout, user, &memory.messages[start..start + fold.messages])?;
        start += fold.messages;
    }
    Ok(start)
}

/// Replaces the short-term log with `records` (none: nothing written).
fn write_log(layout: &Layout, user: &SafeName, records: &[Record]) -> Result<(), Failed> {
    if records.is_empty() {
        return Ok(());
    }
    let mut bytes = Vec::new();
    for record in records {
        serde_json::to_writer(&mut bytes, record)?;
        bytes.push(b'\n');
    }
    fsutil::replace(layout.state_root(), &layout.messages_path(user), &bytes)?;
    Ok(())
}

/// Reads `user`'s files back and compares them with `memory` (its
/// reminders only with `reminders`): a difference names both tallies.
fn verify(layout: &Layout, user: &SafeName, memory: &Whole, reminders: bool) -> Result<(), Failed> {
    let mut back = read_inner(layout, user)?.memory;
    if !reminders {
        back.reminders = memory.reminders.clone();
    }
    if !back.same_as(memory) || back.usage != memory.usage {
        return Err(format!(
            "verification failed: {} was to be written, the files read back {}",
            memory.tally(),
            back.tally()
        )
        .into());
    }
    Ok(())
}

/// Writes the fact log, the topic notes, the daily and weekly summaries
/// and then the versions: `memory`'s, then `kept_after` (numbered after
/// them, so undo still reaches them); the versions this write's own
/// changes made are not kept.
fn write_long_term(
    layout: &Layout,
    user: &SafeName,
    memory: &Whole,
    change: Change<'_>,
    kept_after: Vec<Version>,
    now: DateTime<Utc>,
) -> Result<(), Failed> {
    facts::put_all(layout, user, &memory.facts)?;
    for (slug, document) in &memory.topics {
        let slug = note_name(slug)?;
        let path = layout
            .topic_path(user, &slug)
            .ok_or("the user `_shared` cannot own topic notes")?;
        versions::replace(layout, user, &path, Some(document.as_bytes()), change, now)?;
    }
    for digest in &memory.digests {
        let path = digest.period.path(layout, user);
        let text = digests::render(&path, &digest.meta, &digest.body)?;
        fsutil::replace(layout.state_root(), &path, text.as_bytes())?;
    }
    let profile_file = Layout::profile_file(user);
    let mut kept = memory.versions.clone();
    for version in &mut kept {
        if version.file == profile_file
            && let Some(body) = &version.before
        {
            version.before = Some(profile::document_of_body(layout, user, body, version.ts)?);
        }
    }
    let mut seq = kept.last().map_or(0, |v| v.seq);
    for mut version in kept_after {
        seq += 1;
        version.seq = seq;
        kept.push(version);
    }
    versions::put_all(layout, user, &kept)?;
    Ok(())
}

/// A note's name as stored (its file name without `.md`, a SafeName):
/// anything else is refused, never turned into a path.
pub fn note_name(stored: &str) -> Result<SafeName, StoreError> {
    SafeName::from_encoded(stored).ok_or_else(|| {
        StoreError::Storage(
            format!("the topic note name {stored:?} is not a file name mnemo writes (a SafeName)").into(),
        )
    })
}

/// Writes `merged` over `user`'s files, where `merged` holds everything
/// they hold now and more (a [`crate::whole::merge`] of their memory read
/// under the lock the caller holds): every file is replaced atomically by
/// one that holds more, or added, and the versions are written before the
/// files they describe, so a crash at any point leaves the memory as it
/// was or with part of the merge, never with less. Reminders and the
/// timezone are not written here (the caller adds them through the store,
/// beside their delivery). Read back and compared with `merged`.
pub fn write_over(layout: &Layout, user: &SafeName, merged: &Whole, now: DateTime<Utc>) -> Result<(), StoreError> {
    write_over_inner(layout, user, merged, now).map_err(StoreError::Storage)
}

fn write_over_inner(layout: &Layout, user: &SafeName, merged: &Whole, now: DateTime<Utc>) -> Result<(), Failed> {
    let root = layout.state_root();
    let profile_file = Layout::profile_file(user);
    for version in &merged.versions {
        let mut version = version.clone();
        let path = layout.version_record_path(user, &versions::record_name(&version));
        if fsutil::read_string_if_exists(root, &path)?.is_some() {
            continue;
        }
        if version.file == profile_file
            && let Some(body) = &version.before
        {
            version.before = Some(profile::document_of_body(layout, user, body, version.ts)?);
        }
        versions::owned_path(layout, user, &layout.ltm_file(&version.file))?;
        fsutil::replace(root, &path, &serde_json::to_vec(&version)?)?;
    }
    let start = write_batches(layout, user, merged)?;
    for digest in &merged.digests {
        let path = digest.period.path(layout, user);
        fsutil::replace(
            root,
            &path,
            digests::render(&path, &digest.meta, &digest.body)?.as_bytes(),
        )?;
    }
    for doc in &merged.documents {
        documents::write(layout, user, doc)?;
    }
    for file in &merged.kept {
        kept::keep(layout, user, file)?;
    }
    for (slug, document) in &merged.topics {
        let path = layout
            .topic_path(user, &note_name(slug)?)
            .ok_or("the user `_shared` cannot own topic notes")?;
        if fsutil::read_string_if_exists(root, &path)?.as_deref() != Some(document.as_str()) {
            fsutil::replace(root, &path, document.as_bytes())?;
        }
    }
    facts::put_all(layout, user, &merged.facts)?;
    let mut doc = summary::read_or_salvage(layout, user)?.unwrap_or_else(|| summary::empty(user));
    if doc.body.trim() != merged.summary.as_deref().unwrap_or("").trim() {
        doc.meta.last_compacted = merged.summary_at;
        doc.meta.messages_compacted = merged.archived() as u64;
        doc.body = merged.summary.clone().unwrap_or_default();
        summary::write(layout, user, &doc)?;
    }
    if let Some(body) = &merged.profile {
        let mut doc = profile::read(layout, user)?.unwrap_or_else(|| profile::new_profile(layout, user, now));
        if doc.body.trim() != body.trim() {
            doc.meta.updated = merged.profile_at;
            doc.body = body.clone();
            let path = layout.profile_path(user);
            fsutil::replace(
                root,
                &path,
                crate::frontmatter::render(&path, &doc.meta, &doc.body)?.as_bytes(),
            )?;
        }
    }
    super::write_usage(layout, Some(user), &merged.usage)?;
    // Holds the log there was and more (none: there was none).
    write_log(layout, user, &merged.messages[start..])?;
    verify(layout, user, merged, false)
}

/// [`crate::store::UserMemory::merge_in`] on the files. Under the user's
/// lock: read, merged, written over ([`write_over`]); then what is held in
/// memory of the user is dropped (the index after the files, as
/// `clear_all` does), and the other's reminders and timezone are added
/// through the reminders' own path, beside their delivery.
pub(super) async fn merge_in(
    mine: &mut super::FileUser,
    other: &Whole,
    sides: crate::whole::merge::Sides<'_>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (stm, user, inner) = (mine.stm(), &mine.user, &mine.store.inner);
    let guard = stm.lock(user).await;
    let held = read(stm.layout(), user)?.memory;
    let book = held.reminders.clone();
    let merged = crate::whole::merge::merge(held, other.clone(), sides, now);
    let written = write_over(stm.layout(), user, &merged, now);
    inner.recall.forget(user).map_err(StoreError::storage)?;
    drop(guard);
    inner.sessions.forget(user).await;
    inner.usage.forget(user).await?;
    written?;
    let added = merged
        .reminders
        .reminders
        .iter()
        .filter(|r| !book.reminders.contains(r));
    for reminder in added {
        mine.add_reminder(reminder, usize::MAX).await?;
    }
    match (&book.timezone, &merged.reminders.timezone) {
        (None, Some(zone)) => mine.set_timezone(zone).await,
        _ => Ok(()),
    }
}
