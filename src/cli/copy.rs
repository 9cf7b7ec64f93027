//! `mnemo store copy --from files --to postgres` (and back): moves what the
//! Postgres store holds — each user's messages (archived batches oldest
//! first, then the short-term log, in that order, as `seq`), the rolling
//! summary's body, the profile's body, the fact log, the kept versions
//! (their `seq` kept; an earlier profile as its body in the database, given
//! new frontmatter back in files), the topic notes, the daily and
//! weekly summaries (frontmatter as columns in the database), the
//! reminders and timezone, and the tokens the user spent by day and purpose
//! (`usage/<user>.json` ↔ `mnemo_usage`) — between the
//! state folder and the database the config's `store.urlEnv` names
//! (whatever `store.kind` says, so a files deployment can be copied before
//! it is switched over) — and each channel's `_shared` operator notes and
//! token totals (not with `--user`; a note of the same name is replaced,
//! others stay; a day's total becomes the larger of the two counts, so a
//! run again counts nothing twice). The
//! recall index is not copied (the broker rebuilds a copied user's on
//! first use), nor are the maintenance watermarks: the target's first
//! maintenance run looks back 7 days and finds the copied summaries there
//! (no model call for them). Each channel's access rules
//! (`access.json` ↔ its database row) are copied too, after the users,
//! unless the copy is limited to one `--user` (`access`: same never-merge
//! rule, `--replace` to overwrite).
//!
//! The file side is read and written only through the sessions crate
//! (`Layout`, `stm`, `archive`, `summary`, `profile`, `fsutil`,
//! `report::known_channels`/`known_users`); users are keyed by their
//! folder's SafeName (`user_key`), never by a raw id. Each archive batch
//! becomes one fold row of kind `summarized`: the files do not record
//! whether a batch was summarized or slid out unsummarized, and the
//! summary body carries what was summarized either way. Back to files,
//! each fold becomes one archive batch (its kind has no place there, and
//! the batches must name themselves in fold order — by their earliest
//! timestamp — or the verification says the order changed).
//!
//! Invariants:
//! - **One user at a time, whole or not at all.** Into Postgres a user is
//!   one transaction ([`mnemo_pg::copy::write_user`]). Into files the
//!   user's `stm/<user>/copy-incomplete` marker is written first and
//!   removed last; a run that finds a marker finishes an interrupted copy
//!   by deleting what the copy writes for that user and writing it again.
//! - **Resumable, never merged.** A user already in the target with the
//!   same memory (counts, checksum, summary and profile) is skipped as
//!   already there; with different memory the copy stops with an error
//!   naming the user, unless `--replace`: the target's copy of what the
//!   copy moves is deleted and written from the source (in files: the STM
//!   folder, the archive, the profile and topic notes — each kept as a
//!   version, numbered after the source's — the fact log, the versions and
//!   the recall index; digests are not touched). So a
//!   copy interrupted by Ctrl-C, a crash or a lost database is finished by
//!   running it again, duplicating nothing.
//! - **Bounded memory.** One user's history is held at a time (both sides
//!   read and compare whole users).
//! - **Verified.** After each user, the target is read back and its counts
//!   and checksum (SHA-256 over ts, role, text and msg id, in order)
//!   compared with the source's; a mismatch is an error naming the user
//!   (into Postgres the transaction then rolls back; into files the marker
//!   stays, so the next run redoes the user). The first failing user stops
//!   the copy; the users before it are done.
//! - **The state folder.** Writing into files takes the instance lock (no
//!   bot may run on that folder). Reading files may happen while a bot
//!   runs on them: every file the copy reads is replaced atomically or only
//!   appended to, and the log is read before the archive, while a fold
//!   writes its archive batch before it cuts the log — so a record folded
//!   meanwhile is found in the archive (and read once: a repeat of a
//!   record is dropped by msg id), never missed. What the bot stores after
//!   a user was read is not in the copy; a later run then finds the user
//!   different and says so.
//! - **Bad input.** Malformed lines in a log or an archive batch are
//!   skipped as the sessions readers do (and counted in the report); the
//!   same record twice (a crash between archiving and cutting the log) is
//!   copied once; two different records with one msg id stop the copy for
//!   that user. NUL in text becomes U+2400 (the database cannot hold NUL;
//!   a copy back to files keeps U+2400). A folder whose name is not a
//!   SafeName is not a user and is left alone; a database user key that
//!   is not one is refused, not turned into a path.
//!
//! Here: the command and its two directions, user by user. The files as a
//! source are read in [`file_source`], as a target written in
//! [`file_target`]; the database side is `mnemo_pg::copy`; access rules are
//! [`access`]'s; what a run reports is [`totals`]'s.

mod access;
mod file_source;
mod file_target;
mod totals;

use super::Setup;
use crate::instance::{InstanceError, InstanceLock};
use anyhow::{Context as _, Result, bail};
use file_source::{FileRead, read_files, read_shared_files};
use file_target::{channel_usage_to_files, shared_to_files, write_files};
use mnemo_pg::copy::{self, UserMemory, Written};
use mnemo_pg::{PgStore, migrate};
use mnemo_sessions::{Layout, SafeName, report};
use std::process::ExitCode;
use totals::{Totals, count, print_summary, progress};

/// `mnemo store copy`'s arguments.
#[derive(Debug, clap::Args)]
pub struct CopyArgs {
    /// Where memory is copied from.
    #[arg(long, value_enum)]
    pub from: Side,
    /// Where it is copied to.
    #[arg(long, value_enum)]
    pub to: Side,
    /// Only this channel.
    #[arg(long)]
    pub channel: Option<String>,
    /// Only this user (their platform id, as `sessions forget` takes it).
    #[arg(long)]
    pub user: Option<String>,
    /// A user already in the target with different memory is replaced there
    /// by the copy (without it, the copy stops at that user). Into files,
    /// only what the copy writes is replaced: log, summary, archive,
    /// profile and topic notes (their old versions kept), fact log,
    /// versions; digests stay.
    #[arg(long)]
    pub replace: bool,
    /// The summary as one JSON document on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Files,
    Postgres,
}

pub async fn run(setup: &Setup, args: CopyArgs) -> Result<ExitCode> {
    if args.from == args.to {
        bail!("--from and --to are the same store: copy from files to postgres or from postgres to files");
    }
    let store = setup.config.store.connect(&super::setup::env)?;
    let (folder, database) = (setup.folder_place(), setup.database_place());
    match args.from {
        Side::Files => eprintln!("mnemo: copying from {folder} to {database}"),
        Side::Postgres => eprintln!("mnemo: copying from {database} to {folder}"),
    }
    migrate::check(&store)
        .await
        .context("the database is not ready for a copy")?;
    let mut totals = Totals::default();
    let result = match args.from {
        Side::Files => files_to_postgres(setup, &store, &args, &mut totals).await,
        Side::Postgres => postgres_to_files(setup, &store, &args, &mut totals).await,
    };
    if let Err(e) = result {
        eprintln!(
            "stopped after {} user(s) done; run the same command again to resume (users done are skipped)",
            totals.users
        );
        return Err(e);
    }
    print_summary(&args, &totals);
    Ok(ExitCode::SUCCESS)
}

async fn files_to_postgres(setup: &Setup, store: &PgStore, args: &CopyArgs, totals: &mut Totals) -> Result<()> {
    let root = &setup.state_root;
    if !root.is_dir() {
        bail!("there is no state folder at {} to copy from", root.display());
    }
    // Held if we get it, so no bot starts on the folder meanwhile; a bot
    // already running is fine for reading (see the module doc).
    let _lock = match InstanceLock::acquire(root) {
        Ok(lock) => Some(lock),
        Err(InstanceError::Busy { .. }) => {
            eprintln!(
                "note: a mnemo process is running on {}; copying what it has stored when each user is read",
                root.display()
            );
            None
        }
        Err(e) => return Err(e.into()),
    };
    let mut work = Vec::new();
    for channel in file_channels(setup, args.channel.as_deref())? {
        let layout = Layout::new(root, &channel);
        for user in report::known_users(&layout)? {
            if args.user.as_ref().is_none_or(|u| SafeName::of(u) == user) {
                work.push((channel.clone(), user));
            }
        }
    }
    only_user_found(args, work.is_empty())?;
    let total = work.len();
    for (i, (channel, user)) in work.into_iter().enumerate() {
        let layout = Layout::new(root, &channel);
        let shown = shown(&channel, &user);
        let read = read_files(&layout, &user).with_context(|| format!("reading user {shown}"))?;
        if read.memory == UserMemory::default() {
            // Only exports or crash leftovers: nothing the database keeps.
            totals.nothing += 1;
            progress(i + 1, total, &shown, &read, " (nothing the database keeps: skipped)");
            continue;
        }
        let written = copy::write_user(store, &channel, user.as_str(), &read.memory, args.replace)
            .await
            .with_context(|| format!("copying user {shown} into the database"))?;
        let note = match &written {
            Written::Copied(_) => {
                totals.copied += 1;
                ""
            }
            Written::Replaced(_) => {
                totals.replaced += 1;
                " (replaced)"
            }
            Written::AlreadyThere(_) => {
                totals.already_there += 1;
                " (already there)"
            }
        };
        count(totals, &read.memory, read.skipped_lines, read.duplicates);
        progress(i + 1, total, &shown, &read, note);
    }
    if args.user.is_none() {
        for channel in file_channels(setup, args.channel.as_deref())? {
            let layout = Layout::new(root, &channel);
            let notes = read_shared_files(&layout)?;
            if notes.is_empty() {
                continue;
            }
            totals.shared_notes += copy::write_shared(store, &channel, &notes)
                .await
                .with_context(|| format!("copying the shared notes of {channel} into the database"))?;
            eprintln!("{channel}: {} shared note(s)", notes.len());
        }
        for channel in file_channels(setup, args.channel.as_deref())? {
            let layout = Layout::new(root, &channel);
            let rows = mnemo_sessions::store::files::read_usage(&layout, None)?;
            if rows.is_empty() {
                continue;
            }
            let copied = copy::write_channel_usage(store, &channel, &rows)
                .await
                .with_context(|| format!("copying the token totals of {channel} into the database"))?;
            totals.channel_usage_rows += copied;
            eprintln!("{channel}: {copied} row(s) of channel token totals");
        }
    }
    if totals.copied + totals.replaced > 0 {
        // A bulk load leaves the planner's statistics behind the tables;
        // until autovacuum catches up, recall could scan every message.
        eprintln!("updating the database's statistics (ANALYZE)");
        store.analyze().await.context("updating the database's statistics")?;
    }
    if args.user.is_none() {
        let channels = file_channels(setup, args.channel.as_deref())?;
        access::files_to_postgres(root, store, &channels, args.replace, &mut totals.access).await?;
    }
    Ok(())
}

async fn postgres_to_files(setup: &Setup, store: &PgStore, args: &CopyArgs, totals: &mut Totals) -> Result<()> {
    let root = &setup.state_root;
    let _lock = match InstanceLock::acquire(root) {
        Ok(lock) => lock,
        Err(InstanceError::Busy { .. }) => bail!(
            "a mnemo process is running on {}; stop it before copying memory into that folder",
            root.display()
        ),
        Err(e) => return Err(e.into()),
    };
    let user_key = args.user.as_deref().map(SafeName::of);
    let work = copy::users(store, args.channel.as_deref(), user_key.as_ref().map(SafeName::as_str))
        .await
        .context("listing the database's users")?;
    only_user_found(args, work.is_empty())?;
    let total = work.len();
    for (i, (channel, key)) in work.into_iter().enumerate() {
        let Some(user) = SafeName::from_encoded(&key) else {
            bail!(
                "the database holds user key {key:?} in channel {channel:?}, which is not a folder name mnemo writes \
                 (a SafeName): refusing to turn it into a path"
            );
        };
        let shown = shown(&channel, &user);
        let memory = copy::read_user(store, &channel, &key)
            .await
            .with_context(|| format!("reading user {shown} from the database"))?
            .with_context(|| format!("user {shown} left the database while being copied; run the copy again"))?;
        let layout = Layout::new(root, &channel);
        let note = write_files(&layout, &user, &memory, args.replace, totals)
            .with_context(|| format!("copying user {shown} into {}", root.display()))?;
        count(totals, &memory, 0, 0);
        let read = FileRead {
            memory,
            skipped_lines: 0,
            duplicates: 0,
            not_ours: Vec::new(),
        };
        progress(i + 1, total, &shown, &read, note);
    }
    if args.user.is_none() {
        access::postgres_to_files(root, store, args.channel.as_deref(), args.replace, &mut totals.access).await?;
    }
    shared_to_files(setup, store, args, totals).await?;
    channel_usage_to_files(setup, store, args, totals).await
}

/// `--user U` that matched nobody is an error, not an empty copy.
fn only_user_found(args: &CopyArgs, none: bool) -> Result<()> {
    if let (Some(user), true) = (&args.user, none) {
        let channel = args
            .channel
            .as_deref()
            .map_or(String::new(), |c| format!(" in channel `{c}`"));
        bail!("nothing is stored about user `{user}`{channel} in the source");
    }
    Ok(())
}

/// The channels to read from files: `only` (which must exist), or all.
fn file_channels(setup: &Setup, only: Option<&str>) -> Result<Vec<String>> {
    if let Some(name) = only {
        if !Layout::new(&setup.state_root, name).root().is_dir() {
            bail!(
                "no stored memory for channel `{name}` under {}",
                setup.state_root.display()
            );
        }
        return Ok(vec![name.to_string()]);
    }
    Ok(report::known_channels(&setup.state_root)?)
}

/// How a user is named in progress and errors: the channel's and the
/// user's folder names (encoded, so nothing hostile reaches the terminal).
fn shown(channel: &str, user: &SafeName) -> String {
    format!("{}/{}", SafeName::of(channel), user)
}

/// A note's name as stored (its file name without `.md`, a SafeName):
/// anything else is refused, never turned into a path.
fn note_name(stored: &str) -> Result<SafeName> {
    Ok(mnemo_sessions::store::files::whole::note_name(stored)?)
}
