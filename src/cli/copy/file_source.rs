//! The state folder as a copy's source: one user's memory read from the
//! files and assembled as the database keeps it (archive batches oldest
//! first, then the log, each record once; profile and summary bodies; fact
//! log, versions, topic notes, daily and weekly summaries, tokens spent),
//! and a channel's shared notes.
//!
//! Reads only, through the sessions crate; safe while a bot runs on the
//! folder (the module doc of [`super`] says why). What it skipped is
//! counted, never hidden.

use super::note_name;
use anyhow::{Result, bail};
use chrono::Utc;
use mnemo_pg::copy::{Fold, UserMemory};
use mnemo_pg::digests::StoredDigest;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::digests::{self, DigestMeta, Period};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::versions;
use mnemo_sessions::{Layout, Record, SafeName, archive, documents, facts, fsutil, profile, summary, topics};
use std::collections::HashMap;

/// A user's memory read from files, and what reading it skipped.
pub(super) struct FileRead {
    pub(super) memory: UserMemory,
    pub(super) skipped_lines: usize,
    pub(super) duplicates: usize,
}

/// One user's memory from the files: the log first, then the archive
/// batches (see the module doc for why in this order), assembled as the
/// database keeps it — batches oldest first, then the log, each record once.
pub(super) fn read_files(layout: &Layout, user: &SafeName) -> Result<FileRead> {
    let stm = Stm::new(layout.clone(), LockRegistry::new(), false);
    let log = stm.read_all(user)?;
    let mut skipped_lines = log.skipped_lines;
    let mut batches = Vec::new();
    for path in archive::files(layout, user)? {
        let (records, skipped) = archive::read_batch_counted(layout, &path)?;
        skipped_lines += skipped;
        batches.push(records);
    }
    let mut memory = UserMemory::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut duplicates = 0;
    let mut keep = |record: Record, memory: &mut UserMemory| -> Result<bool> {
        if let Some(&at) = seen.get(&record.msg_id) {
            if memory.messages[at] == record {
                duplicates += 1;
                return Ok(false);
            }
            bail!(
                "two different messages carry the msg id {:?} (one in the archive or the log, one later): \
                 the database keys messages by it; fix or remove one of them",
                record.msg_id
            );
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
    memory.reminders = mnemo_sessions::store::files::read_book(layout, user)?;
    for meta in mnemo_sessions::kept::list(layout, user)? {
        if let Some(file) = mnemo_sessions::kept::read(layout, user, &meta.id)? {
            memory.kept.push(file);
        }
    }
    for meta in documents::list(layout, user)? {
        if let Some(doc) = documents::read(layout, user, &meta.id)? {
            memory.documents.push(doc);
        }
    }
    memory.usage = mnemo_sessions::store::files::read_usage(layout, Some(user))?;
    Ok(FileRead {
        memory: memory.as_stored(),
        skipped_lines,
        duplicates,
    })
}

/// The fact log, the versions (oldest first; a profile's `before` as its
/// body, as the database keeps it) and the topic notes (whole files).
fn read_long_term(layout: &Layout, user: &SafeName, memory: &mut UserMemory) -> Result<()> {
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
    memory.digests = read_digests(layout, user)?;
    Ok(())
}

/// The user's daily and weekly summaries (`summaries/<user>/daily|weekly/`),
/// named as mnemo names them; another file there is not one and is left
/// out (said on stderr). A digest whose frontmatter is gone (edited by
/// hand) is copied whole as its body, with frontmatter made for it.
fn read_digests(layout: &Layout, user: &SafeName) -> Result<Vec<StoredDigest>> {
    let root = layout.state_root();
    let mut out = Vec::new();
    for (dir, kind) in [(layout.daily_dir(user), "daily"), (layout.weekly_dir(user), "weekly")] {
        for entry in fsutil::list_dir(root, &dir)? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let period = name.strip_suffix(".md").and_then(|stem| Period::parse(kind, stem));
            let Some(period) = period else {
                eprintln!("  {}: not a summary mnemo writes, not copied", entry.path().display());
                continue;
            };
            let Some((meta, body)) = digests::read_digest(root, &entry.path())? else {
                continue;
            };
            let meta = meta.unwrap_or_else(|| DigestMeta::new(user, period, chrono_tz::UTC, Utc::now(), 0));
            out.push(StoredDigest { period, meta, body });
        }
    }
    Ok(out)
}

/// The operator's shared notes of a channel's folder, `(name, whole
/// file)`, NUL as the database keeps it.
pub(super) fn read_shared_files(layout: &Layout) -> Result<Vec<(String, String)>> {
    let mut notes = Vec::new();
    for note in topics::list_shared(layout)? {
        let slug = note_name(&note.slug)?;
        if let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &layout.shared_topic_path(&slug))? {
            notes.push((slug.as_str().to_string(), mnemo_pg::pg_text(&text).into_owned()));
        }
    }
    Ok(notes)
}
