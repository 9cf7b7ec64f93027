//! The database side of `mnemo store copy`: one user's memory as the
//! Postgres store keeps it ([`UserMemory`]: messages in order, the
//! archived ones grouped into folds, the summary and profile bodies, the
//! fact log, the versions, the topic notes, the daily and weekly
//! summaries, the reminders and timezone, the documents and kept files,
//! the tokens spent),
//! written in **one transaction per user** ([`write_user`]) and read back
//! in one snapshot ([`read_user`]), with the [`Tally`] (counts and a
//! SHA-256 over ts, role, text and msg id of every message, in order) that
//! both sides of a copy are compared by.
//!
//! Invariants:
//! - A user is written whole or not at all: the messages, the fold rows,
//!   the user row (summary, profile, counters) commit together, after the
//!   rows were read back inside the same transaction and their tally found
//!   equal to the source's (a mismatch rolls everything back). A copy
//!   interrupted anywhere (Ctrl-C, a crash, the database going away)
//!   leaves each user either fully copied or absent, so running it again
//!   finishes the job without duplicating anything.
//! - A user already in the database is never merged into: the same memory
//!   is [`Written::AlreadyThere`] (a re-run), different memory is
//!   [`CopyError::Differs`] unless the caller asked to replace it (then it
//!   is deleted and written again, in the same transaction).
//! - The write holds the user's turn and fold locks (transaction-scoped
//!   advisory locks on the keys a broker uses), so a broker serving the
//!   same database sees the user before or after the copy, never half.
//! - Text is stored as the store always does ([`crate::pg_text`]: NUL as
//!   U+2400), and timestamps to the microsecond (the database's
//!   precision); the tally is computed over those forms on both sides.
//!
//! Here: what a user's memory is and how two are compared. Reading it back
//! is in [`read`], writing it in [`write`], the list of users and channels
//! a copy walks in [`census`].

mod census;
mod read;
mod write;

pub use census::{shared_channels, usage_channels, users};
pub use read::{read_channel_usage, read_shared, read_user};
pub use write::{write_channel_usage, write_shared, write_user};

use crate::turn::role_name;
use crate::{PgError, pg_text};
use chrono::{DateTime, Timelike, Utc};
use mnemo_sessions::Record;
use mnemo_sessions::facts::FactEntry;
use mnemo_sessions::versions::{Author, Version};
use sha2::{Digest, Sha256};

/// One user's memory as the Postgres store holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserMemory {
    /// Every message, oldest first: first the archived ones, fold by fold
    /// (as [`UserMemory::folds`] cuts them), then the short-term ones.
    pub messages: Vec<Record>,
    /// The archived batches, oldest first.
    pub folds: Vec<Fold>,
    /// The rolling summary's body (trimmed; `None` when blank).
    pub summary: Option<String>,
    pub summary_at: Option<DateTime<Utc>>,
    /// The profile's body (trimmed; `None` when blank).
    pub profile: Option<String>,
    pub profile_at: Option<DateTime<Utc>>,
    /// Summarizer failures in a row.
    pub failures: i32,
    /// The dated fact log, in order.
    pub facts: Vec<FactEntry>,
    /// The kept versions, oldest first; a profile's `before` is its body
    /// (the files' records hold the whole file: the file side converts).
    pub versions: Vec<Version>,
    /// Topic notes as `(slug, whole document)`, by slug.
    pub topics: Vec<(String, String)>,
    /// Daily and weekly summaries, dailies then weeklies, oldest first.
    pub digests: Vec<crate::digests::StoredDigest>,
    /// Reminders (by id) and the user's timezone.
    pub reminders: mnemo_sessions::reminders::Book,
    /// Documents the user sent, oldest first.
    pub documents: Vec<mnemo_sessions::documents::Document>,
    /// Files kept as they were sent, oldest first.
    pub kept: Vec<mnemo_sessions::kept::KeptFile>,
    /// Model tokens the user spent, by their day and purpose, in that
    /// order. Not part of [`UserMemory::same_as`]: a user already there
    /// keeps the target's count; a user written gets exactly these rows.
    pub usage: Vec<mnemo_sessions::usage::UsageRow>,
}

/// One archived batch: the next `messages` messages of the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    pub messages: usize,
    /// `summarized` or `slid` (see the schema).
    pub kind: String,
    pub at: DateTime<Utc>,
}

/// What two copies of a user are compared by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    pub messages: u64,
    pub archived: u64,
    /// SHA-256 (hex) over every message's ts, role, text and msg id, in
    /// order, each field length-prefixed.
    pub sha256: String,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages ({} archived), sha256 {}",
            self.messages,
            self.archived,
            &self.sha256[..16]
        )
    }
}

impl UserMemory {
    /// Whether nothing is stored: no message, summary, profile, fact,
    /// version, topic note or digest.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
            && blank_none(&self.summary).is_none()
            && blank_none(&self.profile).is_none()
            && self.facts.is_empty()
            && self.versions.is_empty()
            && self.topics.is_empty()
            && self.digests.is_empty()
            && self.reminders.is_empty()
            && self.documents.is_empty()
            && self.kept.is_empty()
    }

    /// How many of the messages are archived (the folds' total).
    pub fn archived(&self) -> usize {
        self.folds.iter().map(|f| f.messages).sum()
    }

    pub fn tally(&self) -> Tally {
        let mut h = Sha256::new();
        for r in &self.messages {
            let ts = r.ts.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            for field in [ts.as_str(), role_name(r.role), &pg_text(&r.text), &pg_text(&r.msg_id)] {
                h.update((field.len() as u64).to_le_bytes());
                h.update(field.as_bytes());
            }
        }
        Tally {
            messages: self.messages.len() as u64,
            archived: self.archived() as u64,
            sha256: hex::encode(h.finalize()),
        }
    }

    /// The same memory: messages (by tally), summary and profile bodies,
    /// fact log, versions and topic notes.
    pub fn same_as(&self, other: &UserMemory) -> bool {
        self.tally() == other.tally()
            && blank_none(&self.summary) == blank_none(&other.summary)
            && blank_none(&self.profile) == blank_none(&other.profile)
            && self.facts == other.facts
            && same_versions(&self.versions, &other.versions)
            && self.topics == other.topics
            && same_digests(&self.digests, &other.digests)
            && self.reminders == other.reminders
            && self.documents == other.documents
            && self.kept == other.kept
    }

    /// Timestamps cut to the microsecond, text as the database keeps it
    /// (NUL as U+2400): what a copy into the database stores, so the two
    /// sides compare equal.
    pub fn as_stored(mut self) -> UserMemory {
        self.folds.retain(|f| f.messages > 0);
        for r in &mut self.messages {
            r.ts = micros(r.ts);
            for s in [&mut r.text, &mut r.msg_id] {
                if s.contains('\0') {
                    *s = pg_text(s).into_owned();
                }
            }
            for s in [&mut r.thread_id, &mut r.chat_id, &mut r.user_name]
                .into_iter()
                .flatten()
            {
                if s.contains('\0') {
                    *s = pg_text(s).into_owned();
                }
            }
        }
        for t in [&mut self.summary, &mut self.profile].into_iter().flatten() {
            if t.contains('\0') {
                *t = pg_text(t).into_owned();
            }
        }
        self.summary_at = self.summary_at.map(micros);
        self.profile_at = self.profile_at.map(micros);
        let stored = |s: &mut String| {
            if s.contains('\0') {
                *s = pg_text(s).into_owned();
            }
        };
        for e in &mut self.facts {
            e.ts = micros(e.ts);
            for s in [&mut e.key, &mut e.value]
                .into_iter()
                .chain(&mut e.sources)
                .chain(&mut e.supersedes)
            {
                stored(s);
            }
        }
        for v in &mut self.versions {
            v.ts = micros(v.ts);
            for s in [&mut v.what, &mut v.file].into_iter().chain(&mut v.before) {
                stored(s);
            }
        }
        for (_, document) in &mut self.topics {
            stored(document);
        }
        self.topics.sort();
        for d in &mut self.digests {
            d.meta.generated = micros(d.meta.generated);
            stored(&mut d.body);
        }
        self.digests.sort_by_key(|d| d.period);
        for f in &mut self.folds {
            f.at = micros(f.at);
        }
        for r in &mut self.reminders.reminders {
            for t in [&mut r.at, &mut r.due, &mut r.created]
                .into_iter()
                .chain(&mut r.claimed_at)
                .chain(&mut r.missed)
            {
                *t = micros(*t);
            }
        }
        self.reminders.reminders.sort_by(|a, b| a.id.cmp(&b.id));
        for d in &mut self.documents {
            d.meta.added = micros(d.meta.added);
            stored(&mut d.meta.name);
            stored(&mut d.text);
        }
        self.documents
            .sort_by(|a, b| a.meta.added.cmp(&b.meta.added).then_with(|| a.meta.id.cmp(&b.meta.id)));
        for f in &mut self.kept {
            f.meta.added = micros(f.meta.added);
            stored(&mut f.meta.name);
        }
        self.kept
            .sort_by(|a, b| a.meta.added.cmp(&b.meta.added).then_with(|| a.meta.id.cmp(&b.meta.id)));
        sort_usage(&mut self.usage);
        self
    }
}

/// The same daily and weekly summaries: period, body and message count
/// (when one was generated, and its zone, are not the memory).
fn same_digests(a: &[crate::digests::StoredDigest], b: &[crate::digests::StoredDigest]) -> bool {
    let key = |d: &crate::digests::StoredDigest| (d.period, d.body.trim().to_string(), d.meta.messages);
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y))
}

/// The same kept versions, but for an operator's own trailing ones (what
/// a `--replace` kept of the memory it replaced): those are the target's
/// backups, not a difference.
fn same_versions(a: &[Version], b: &[Version]) -> bool {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    long.starts_with(short) && long[short.len()..].iter().all(|v| v.by == Author::Operator)
}

/// Usage rows in the one order both sides compare them in: by day, then
/// purpose (answer, tools, summary, digest).
pub fn sort_usage(rows: &mut [mnemo_sessions::usage::UsageRow]) {
    rows.sort_by_key(|r| (r.day, r.purpose));
}

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(t.nanosecond() / 1000 * 1000).unwrap_or(t)
}

fn blank_none(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

/// Why a user could not be copied. Names the user, never a message's text.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(
        "user {channel}/{user} is already in the database with different memory ({have}; the copy has {want}): \
         not merged; pass --replace to overwrite it with the copy"
    )]
    Differs {
        channel: String,
        user: String,
        have: Tally,
        want: Tally,
    },
    #[error(
        "verification failed for user {channel}/{user}: the source has {source_tally}, the database read back {target}; nothing of this user was committed"
    )]
    Mismatch {
        channel: String,
        user: String,
        source_tally: Tally,
        target: Tally,
    },
    #[error(
        "verification failed for the shared note {slug:?} of channel {channel}: nothing of the channel's shared notes was committed"
    )]
    SharedMismatch { channel: String, slug: String },
    #[error(
        "verification failed for the token usage of {channel}/{user}: the database read back other rows; nothing of this user was committed"
    )]
    UsageMismatch { channel: String, user: String },
}

impl From<tokio_postgres::Error> for CopyError {
    fn from(e: tokio_postgres::Error) -> Self {
        CopyError::Pg(PgError::Db(e))
    }
}

/// What [`write_user`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Written (the user was absent).
    Copied(Tally),
    /// The user was there with different memory, and was replaced.
    Replaced(Tally),
    /// The user was there with this very memory (a copy run again): nothing
    /// written.
    AlreadyThere(Tally),
}

impl Written {
    pub fn tally(&self) -> &Tally {
        match self {
            Written::Copied(t) | Written::Replaced(t) | Written::AlreadyThere(t) => t,
        }
    }
}
