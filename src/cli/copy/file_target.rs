//! The state folder as a copy's target: one user's memory written as the
//! files mnemo keeps, under the user's `copy-incomplete` marker, read back
//! and compared before the marker goes; what a `--replace` or an
//! interrupted copy leaves is cleared first (old profile and notes kept as
//! versions); and the channels' shared notes and token totals, each read
//! back.
//!
//! It writes only what a copy moves for that user (never digests it did not
//! bring, never another user's files); the caller holds the instance lock.

use super::CopyArgs;
use super::file_source::read_files;
use super::note_name;
use super::totals::Totals;
use crate::cli::Setup;
use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, Utc};
use mnemo_pg::PgStore;
use mnemo_pg::copy::{self, UserMemory};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::digests;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::store::files as usage_files;
use mnemo_sessions::usage::UsageRow;
use mnemo_sessions::versions::{self, Author, Change};
use mnemo_sessions::{Layout, SafeName, archive, facts, fsutil, profile, report, summary, topics};

/// What a replaced user's earlier profile and notes are kept as.
const REPLACED: &str = "replaced by a copy from the database";

/// Writes `memory` as `user`'s files, verified (see the module doc); the
/// note for the progress line.
pub(super) fn write_files(
    layout: &Layout,
    user: &SafeName,
    memory: &UserMemory,
    replace: bool,
    totals: &mut Totals,
) -> Result<&'static str> {
    let root = layout.state_root();
    let stm = Stm::new(layout.clone(), LockRegistry::new(), true);
    let marker = layout.copy_marker_path(user);
    let mut note = "";
    if marker.exists() {
        clear_copied(&stm, user)?;
        totals.resumed += 1;
        note = " (finished an interrupted copy)";
    } else if report::known_users(layout)?.contains(user)
        // A folder with nothing in it: a copy killed before it marked the
        // user (the marker's folder made, the marker not yet renamed in).
        && let have = read_files(layout, user)?.memory
        && !have.is_empty()
    {
        if have.same_as(memory) {
            totals.already_there += 1;
            return Ok(" (already there)");
        }
        if !replace {
            bail!(
                "user is already in the files with different memory ({}; the copy has {}): not merged; \
                 pass --replace to overwrite it with the copy",
                have.tally(),
                memory.tally()
            );
        }
        clear_copied(&stm, user)?;
        totals.replaced += 1;
        note = " (replaced)";
    }
    if note.is_empty() {
        totals.copied += 1;
    }
    fsutil::replace(
        root,
        &marker,
        b"mnemo store copy is writing this user; an interrupted copy is redone\n",
    )?;
    let mut start = 0;
    for fold in &memory.folds {
        archive::write_batch(layout, user, &memory.messages[start..start + fold.messages])?;
        start += fold.messages;
    }
    let now = Utc::now();
    if memory.summary.is_some() || memory.failures > 0 {
        let mut doc = summary::empty(user);
        doc.meta.last_compacted = memory.summary_at;
        doc.meta.messages_compacted = memory.archived() as u64;
        doc.meta.failures = u32::try_from(memory.failures).unwrap_or(0);
        doc.body = memory.summary.clone().unwrap_or_default();
        summary::write(layout, user, &doc)?;
    }
    if let Some(body) = &memory.profile {
        let mut doc = profile::new_profile(layout, user, memory.profile_at.unwrap_or(now));
        doc.meta.updated = memory.profile_at;
        doc.body = body.clone();
        let change = Change {
            by: Author::Operator,
            what: "copied from the database",
        };
        profile::write(layout, user, &doc, change, now)?;
    }
    write_long_term(layout, user, memory, now)?;
    mnemo_sessions::store::files::write_book(layout, user, &memory.reminders)?;
    for doc in &memory.documents {
        mnemo_sessions::documents::write(layout, user, doc)?;
    }
    for file in &memory.kept {
        mnemo_sessions::kept::keep(layout, user, file)?;
    }
    mnemo_sessions::store::files::write_usage(layout, Some(user), &memory.usage)?;
    let log = &memory.messages[start..];
    if !log.is_empty() {
        let mut bytes = Vec::new();
        for record in log {
            serde_json::to_writer(&mut bytes, record).context("encoding a record")?;
            bytes.push(b'\n');
        }
        fsutil::replace(root, &layout.messages_path(user), &bytes)?;
    }
    let back = read_files(layout, user)?.memory;
    if !back.same_as(memory) || back.usage != memory.usage {
        bail!(
            "verification failed: the database has {}, the files read back {}; the user is marked incomplete \
             and the next run writes it again",
            memory.tally(),
            back.tally()
        );
    }
    fsutil::remove_if_exists(root, &marker)?;
    Ok(note)
}

/// Writes the fact log, the topic notes, the daily and weekly summaries
/// and then the versions: the
/// source's, then the versions a `--replace` kept of what it replaced
/// (numbered after the source's, `by: operator`, so undo still reaches
/// them); the versions the copy's own writes made are not kept.
fn write_long_term(layout: &Layout, user: &SafeName, memory: &UserMemory, now: DateTime<Utc>) -> Result<()> {
    let replaced: Vec<versions::Version> = versions::history(layout, user)?
        .into_iter()
        .rev()
        .filter(|v| v.by == Author::Operator && v.what == REPLACED)
        .collect();
    facts::put_all(layout, user, &memory.facts)?;
    for (slug, document) in &memory.topics {
        let slug = note_name(slug)?;
        let path = layout
            .topic_path(user, &slug)
            .context("the user `_shared` cannot own topic notes")?;
        let change = Change {
            by: Author::Operator,
            what: "copied from the database",
        };
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
    for mut version in replaced {
        seq += 1;
        version.seq = seq;
        kept.push(version);
    }
    versions::put_all(layout, user, &kept)?;
    Ok(())
}

/// Deletes what a copy writes for `user` in the files — the STM folder
/// (log, summary, marker), the archive, the profile and topic notes
/// (through `versions`, so the old ones are kept as versions), the fact
/// log, the daily and weekly summaries and the recall index (rebuilt from
/// the new files) — and nothing else.
fn clear_copied(stm: &Stm, user: &SafeName) -> Result<()> {
    let layout = stm.layout();
    let root = layout.state_root();
    fsutil::remove_if_exists(root, &layout.stm_dir(user))?;
    fsutil::remove_if_exists(root, &layout.archive_dir(user))?;
    let change = Change {
        by: Author::Operator,
        what: REPLACED,
    };
    let now = Utc::now();
    versions::replace(layout, user, &layout.profile_path(user), None, change, now)?;
    for note in topics::list(layout, user)? {
        let slug = note_name(&note.slug)?;
        if let Some(path) = layout.topic_path(user, &slug) {
            versions::replace(layout, user, &path, None, change, now)?;
        }
    }
    fsutil::remove_if_exists(root, &layout.facts_path(user))?;
    fsutil::remove_if_exists(root, &layout.daily_dir(user))?;
    fsutil::remove_if_exists(root, &layout.weekly_dir(user))?;
    fsutil::remove_if_exists(root, &layout.reminders_path(user))?;
    fsutil::remove_if_exists(root, &layout.documents_dir(user))?;
    fsutil::remove_if_exists(root, &layout.kept_dir(user))?;
    fsutil::remove_if_exists(root, &layout.usage_path(user))?;
    Recall::of(stm).forget(user)?;
    Ok(())
}

/// Writes the database's shared notes of every channel (or `--channel`'s)
/// into the state folder, each read back; `--user` copies none (they are
/// no user's).
pub(super) async fn shared_to_files(
    setup: &Setup,
    store: &PgStore,
    args: &CopyArgs,
    totals: &mut Totals,
) -> Result<()> {
    if args.user.is_some() {
        return Ok(());
    }
    let root = &setup.state_root;
    for channel in copy::shared_channels(store).await? {
        if args.channel.as_ref().is_some_and(|c| *c != channel) {
            continue;
        }
        let layout = Layout::new(root, &channel);
        let notes = copy::read_shared(store, &channel).await?;
        for (slug, document) in &notes {
            let path = layout.shared_topic_path(&note_name(slug)?);
            fsutil::replace(root, &path, document.as_bytes())?;
            if fsutil::read_string_if_exists(root, &path)?.as_deref() != Some(document.as_str()) {
                bail!("verification failed for the shared note {slug:?} of {channel}: the file reads back different");
            }
        }
        totals.shared_notes += notes.len();
        eprintln!("{channel}: {} shared note(s)", notes.len());
    }
    Ok(())
}

/// Adds the database's channel token totals (every channel's, or
/// `--channel`'s) to the state folder's, each day and purpose the larger
/// of the two counts (as [`copy::write_channel_usage`] does the other
/// way), read back; `--user` copies none (they are no user's).
pub(super) async fn channel_usage_to_files(
    setup: &Setup,
    store: &PgStore,
    args: &CopyArgs,
    totals: &mut Totals,
) -> Result<()> {
    if args.user.is_some() {
        return Ok(());
    }
    for channel in copy::usage_channels(store).await? {
        if args.channel.as_ref().is_some_and(|c| *c != channel) {
            continue;
        }
        let layout = Layout::new(&setup.state_root, &channel);
        let from = copy::read_channel_usage(store, &channel).await?;
        let merged = larger_counts(usage_files::read_usage(&layout, None)?, &from);
        usage_files::write_usage(&layout, None, &merged)?;
        if usage_files::read_usage(&layout, None)? != merged {
            bail!("verification failed for the token totals of {channel}: the file reads back different");
        }
        totals.channel_usage_rows += from.len();
        eprintln!("{channel}: {} row(s) of channel token totals", from.len());
    }
    Ok(())
}

/// `have` with each day and purpose of `from` set to the larger count.
fn larger_counts(mut have: Vec<UsageRow>, from: &[UsageRow]) -> Vec<UsageRow> {
    for r in from {
        match have.iter_mut().find(|h| h.day == r.day && h.purpose == r.purpose) {
            Some(h) => {
                h.tokens_in = h.tokens_in.max(r.tokens_in);
                h.tokens_out = h.tokens_out.max(r.tokens_out);
            }
            None => have.push(r.clone()),
        }
    }
    copy::sort_usage(&mut have);
    have
}
