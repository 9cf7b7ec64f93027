//! One user's whole memory as one value ([`Whole`]): every message in
//! order (the archived ones grouped into folds), the summary and profile
//! bodies, the fact log, the versions, the topic notes, the daily and
//! weekly summaries, the reminders and timezone, the documents and kept
//! files, the tokens spent. Both stores read and write it
//! (`store::files::whole`, `mnemo_pg::copy`): `mnemo store copy` moves a
//! user between them with it, and linking merges two people's accounts
//! with it ([`merge`]).
//!
//! Two copies of a user are compared by [`Tally`] (counts and a SHA-256
//! over ts, role, text and msg id of every message, in order) and
//! [`Whole::same_as`]; [`Whole::as_stored`] puts a value in the form both
//! stores keep (timestamps to the microsecond, NUL as U+2400, as the
//! database must).

pub mod merge;

use crate::Record;
use crate::facts::FactEntry;
use crate::maintenance::digests::{DigestMeta, Period};
use crate::record::Role;
use crate::versions::{Author, Version};
use chrono::{DateTime, Timelike, Utc};
use sha2::{Digest, Sha256};
use std::borrow::Cow;

/// A stored daily or weekly summary, for export, copy and recall.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDigest {
    pub period: Period,
    pub meta: DigestMeta,
    pub body: String,
}

/// One user's whole memory, as one value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Whole {
    /// Every message, oldest first: first the archived ones, fold by fold
    /// (as [`Whole::folds`] cuts them), then the short-term ones.
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
    pub digests: Vec<StoredDigest>,
    /// Reminders (by id) and the user's timezone.
    pub reminders: crate::reminders::Book,
    /// Documents the user sent, oldest first.
    pub documents: Vec<crate::documents::Document>,
    /// Files kept as they were sent, oldest first.
    pub kept: Vec<crate::kept::KeptFile>,
    /// Model tokens the user spent, by their day and purpose, in that
    /// order. Not part of [`Whole::same_as`]: a user already there
    /// keeps the target's count; a user written gets exactly these rows.
    pub usage: Vec<crate::usage::UsageRow>,
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

impl Whole {
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
            for field in [
                ts.as_str(),
                role_name(r.role),
                &stored_text(&r.text),
                &stored_text(&r.msg_id),
            ] {
                h.update((field.len() as u64).to_le_bytes());
                h.update(field.as_bytes());
            }
        }
        Tally {
            messages: self.messages.len() as u64,
            archived: self.archived() as u64,
            sha256: h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The same memory: messages (by tally), summary and profile bodies,
    /// fact log, versions and topic notes.
    pub fn same_as(&self, other: &Whole) -> bool {
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
    pub fn as_stored(mut self) -> Whole {
        self.folds.retain(|f| f.messages > 0);
        for r in &mut self.messages {
            r.ts = micros(r.ts);
            for s in [&mut r.text, &mut r.msg_id] {
                if s.contains('\0') {
                    *s = stored_text(s).into_owned();
                }
            }
            for s in [&mut r.thread_id, &mut r.chat_id, &mut r.user_name]
                .into_iter()
                .flatten()
            {
                if s.contains('\0') {
                    *s = stored_text(s).into_owned();
                }
            }
        }
        for t in [&mut self.summary, &mut self.profile].into_iter().flatten() {
            if t.contains('\0') {
                *t = stored_text(t).into_owned();
            }
        }
        self.summary_at = self.summary_at.map(micros);
        self.profile_at = self.profile_at.map(micros);
        let stored = |s: &mut String| {
            if s.contains('\0') {
                *s = stored_text(s).into_owned();
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
fn same_digests(a: &[StoredDigest], b: &[StoredDigest]) -> bool {
    let key = |d: &StoredDigest| (d.period, d.body.trim().to_string(), d.meta.messages);
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
pub fn sort_usage(rows: &mut [crate::usage::UsageRow]) {
    rows.sort_by_key(|r| (r.day, r.purpose));
}

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(t.nanosecond() / 1000 * 1000).unwrap_or(t)
}

fn blank_none(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

/// Text as the database keeps it: NUL, which it cannot hold, as U+2400.
pub fn stored_text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{2400}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// A role's name as the database and the tally spell it.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}
