//! `mnemo store copy --from files --to postgres` (and back): moves what the
//! Postgres store holds — each user's messages (archived batches oldest
//! first, then the short-term log, in that order, as `seq`), the rolling
//! summary's body, the profile's body, the fact log, the kept versions
//! (their `seq` kept; an earlier profile as its body in the database, given
//! new frontmatter back in files), the topic notes and the daily and
//! weekly summaries (frontmatter as columns in the database) — between the
//! state folder and the database the config's `store.urlEnv` names
//! (whatever `store.kind` says, so a files deployment can be copied before
//! it is switched over) — and each channel's `_shared` operator notes (not
//! with `--user`; a note of the same name is replaced, others stay). The
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

mod access;

use super::Setup;
use crate::instance::{InstanceError, InstanceLock};
use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, Utc};
use mnemo_pg::copy::{self, Fold, UserMemory, Written};
use mnemo_pg::digests::StoredDigest;
use mnemo_pg::{PgStore, migrate};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::digests::{self, DigestMeta, Period};
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::versions::{self, Author, Change};
use mnemo_sessions::{Layout, Record, SafeName, archive, facts, fsutil, profile, report, summary, topics};
use std::collections::HashMap;
use std::process::ExitCode;

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

/// What a run did, for the summary.
#[derive(Default)]
struct Totals {
    users: usize,
    copied: usize,
    already_there: usize,
    replaced: usize,
    resumed: usize,
    /// Users with files but nothing the database keeps (exports only…).
    nothing: usize,
    messages: u64,
    archived: u64,
    folds: u64,
    summaries: usize,
    profiles: usize,
    facts: usize,
    versions: usize,
    topic_notes: usize,
    digests: usize,
    shared_notes: usize,
    skipped_lines: usize,
    duplicates: usize,
    access: access::AccessTotals,
}

pub async fn run(setup: &Setup, args: CopyArgs) -> Result<ExitCode> {
    if args.from == args.to {
        bail!("--from and --to are the same store: copy from files to postgres or from postgres to files");
    }
    let store = setup.config.store.connect(&super::setup::env)?;
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

/// A user's memory read from files, and what reading it skipped.
struct FileRead {
    memory: UserMemory,
    skipped_lines: usize,
    duplicates: usize,
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
        };
        progress(i + 1, total, &shown, &read, note);
    }
    if args.user.is_none() {
        access::postgres_to_files(root, store, args.channel.as_deref(), args.replace, &mut totals.access).await?;
    }
    shared_to_files(setup, store, args, totals).await
}

/// The operator's shared notes of a channel's folder, `(name, whole
/// file)`, NUL as the database keeps it.
fn read_shared_files(layout: &Layout) -> Result<Vec<(String, String)>> {
    let mut notes = Vec::new();
    for note in topics::list_shared(layout)? {
        let slug = note_name(&note.slug)?;
        if let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &layout.shared_topic_path(&slug))? {
            notes.push((slug.as_str().to_string(), mnemo_pg::pg_text(&text).into_owned()));
        }
    }
    Ok(notes)
}

/// Writes the database's shared notes of every channel (or `--channel`'s)
/// into the state folder, each read back; `--user` copies none (they are
/// no user's).
async fn shared_to_files(setup: &Setup, store: &PgStore, args: &CopyArgs, totals: &mut Totals) -> Result<()> {
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

/// One user's memory from the files: the log first, then the archive
/// batches (see the module doc for why in this order), assembled as the
/// database keeps it — batches oldest first, then the log, each record once.
fn read_files(layout: &Layout, user: &SafeName) -> Result<FileRead> {
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

/// A note's name as stored (its file name without `.md`, a SafeName):
/// anything else is refused, never turned into a path.
fn note_name(stored: &str) -> Result<SafeName> {
    SafeName::from_encoded(stored)
        .with_context(|| format!("the topic note name {stored:?} is not a file name mnemo writes (a SafeName)"))
}

/// What a replaced user's earlier profile and notes are kept as.
const REPLACED: &str = "replaced by a copy from the database";

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

/// Writes `memory` as `user`'s files, verified (see the module doc); the
/// note for the progress line.
fn write_files(
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
    } else if report::known_users(layout)?.contains(user) {
        let have = read_files(layout, user)?.memory;
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
    if !back.same_as(memory) {
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
    Recall::of(stm).forget(user)?;
    Ok(())
}

fn count(totals: &mut Totals, memory: &UserMemory, skipped_lines: usize, duplicates: usize) {
    totals.users += 1;
    totals.messages += memory.messages.len() as u64;
    totals.archived += memory.archived() as u64;
    totals.folds += memory.folds.len() as u64;
    totals.summaries += usize::from(memory.summary.is_some());
    totals.profiles += usize::from(memory.profile.is_some());
    totals.facts += memory.facts.len();
    totals.versions += memory.versions.len();
    totals.topic_notes += memory.topics.len();
    totals.digests += memory.digests.len();
    totals.skipped_lines += skipped_lines;
    totals.duplicates += duplicates;
}

/// `[3/120] telegram/4242: 1,234 messages` on stderr.
fn progress(i: usize, total: usize, shown: &str, read: &FileRead, note: &str) {
    let mut extra = String::new();
    if read.skipped_lines > 0 {
        extra.push_str(&format!(", {} malformed line(s) skipped", read.skipped_lines));
    }
    if read.duplicates > 0 {
        extra.push_str(&format!(", {} repeated record(s) copied once", read.duplicates));
    }
    eprintln!(
        "[{i}/{total}] {shown}: {} messages{extra}{note}",
        thousands(read.memory.messages.len() as u64)
    );
}

fn print_summary(args: &CopyArgs, t: &Totals) {
    let side = |s: Side| match s {
        Side::Files => "files",
        Side::Postgres => "postgres",
    };
    if args.json {
        let doc = serde_json::json!({
            "from": side(args.from),
            "to": side(args.to),
            "users": t.users,
            "copied": t.copied,
            "alreadyThere": t.already_there,
            "replaced": t.replaced,
            "resumed": t.resumed,
            "nothingToCopy": t.nothing,
            "messages": t.messages,
            "archived": t.archived,
            "folds": t.folds,
            "summaries": t.summaries,
            "profiles": t.profiles,
            "facts": t.facts,
            "versions": t.versions,
            "topicNotes": t.topic_notes,
            "dailyWeeklySummaries": t.digests,
            "sharedNotes": t.shared_notes,
            "malformedLinesSkipped": t.skipped_lines,
            "repeatedRecords": t.duplicates,
            "verified": { "users": t.users, "messages": t.messages },
            "accessRules": {
                "copied": t.access.copied,
                "alreadyThere": t.access.already_there,
                "replaced": t.access.replaced,
            },
        });
        println!("{doc}");
        return;
    }
    println!(
        "copied {} to {}: {} user(s) ({} new, {} already there, {} replaced, {} finished after an interruption)",
        side(args.from),
        side(args.to),
        t.users,
        t.copied,
        t.already_there,
        t.replaced,
        t.resumed
    );
    if t.nothing > 0 {
        println!(
            "  {} user(s) skipped: nothing the database keeps (only exports)",
            t.nothing
        );
    }
    println!(
        "  {} messages ({} archived in {} folds), {} summaries, {} profiles",
        thousands(t.messages),
        thousands(t.archived),
        thousands(t.folds),
        t.summaries,
        t.profiles
    );
    println!(
        "  {} fact log entries, {} kept versions, {} topic notes, {} daily/weekly summaries, {} shared notes",
        thousands(t.facts as u64),
        thousands(t.versions as u64),
        t.topic_notes,
        t.digests,
        t.shared_notes
    );
    if t.skipped_lines + t.duplicates > 0 {
        println!(
            "  {} malformed line(s) skipped, {} repeated record(s) copied once",
            t.skipped_lines, t.duplicates
        );
    }
    println!(
        "verified {} users / {} messages",
        thousands(t.users as u64),
        thousands(t.messages)
    );
    if t.access.channels() > 0 {
        println!(
            "access rules of {} channel(s): {} copied, {} already there, {} replaced",
            t.access.channels(),
            t.access.copied,
            t.access.already_there,
            t.access.replaced
        );
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1_234), "1,234");
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }
}
