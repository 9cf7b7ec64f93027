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
use chrono::Utc;
use mnemo_pg::PgStore;
use mnemo_pg::copy::{self, UserMemory};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::store::files as usage_files;
use mnemo_sessions::store::files::whole;
use mnemo_sessions::usage::UsageRow;
use mnemo_sessions::versions::{self, Author};
use mnemo_sessions::{Layout, SafeName, fsutil, report};

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
    // The versions `clear_copied` kept of what was replaced: after the
    // source's own, so undo still reaches them.
    let replaced: Vec<versions::Version> = versions::history(layout, user)?
        .into_iter()
        .rev()
        .filter(|v| v.by == Author::Operator && v.what == REPLACED)
        .collect();
    whole::write(layout, user, memory, "copied from the database", replaced, Utc::now())
        .context("the user is marked incomplete and the next run writes it again")?;
    fsutil::remove_if_exists(root, &marker)?;
    Ok(note)
}

/// Deletes what a copy writes for `user` in the files (old profile and
/// notes kept as versions) and the recall index (rebuilt from the new
/// files).
fn clear_copied(stm: &Stm, user: &SafeName) -> Result<()> {
    whole::clear(stm.layout(), user, REPLACED, Utc::now())?;
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
