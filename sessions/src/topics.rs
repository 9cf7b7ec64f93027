//! Topic notes: `ltm/topics/<user>/<slug>.md`, owned by one user, and
//! `ltm/topics/_shared/<slug>.md`, written by the operator and readable by
//! every user. Frontmatter: `title`, `slug`, `owner`, `tags`, `created`,
//! `updated`; the body is markdown.
//!
//! Every slug that comes from outside (a `/session forget` argument, a fact
//! key from the model) is checked or derived here before any file is
//! touched; a refused slug touches nothing. This module never writes to the
//! `_shared` folder and never reaches another user's folder: every path comes
//! from [`Layout::topic_path`] for the caller's own name.

use crate::frontmatter::{self, Document, FrontmatterError};
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::profile::{cap_bullet_lines, normalized, one_line};
use crate::versions::{self, Change, VersionError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Longest slug accepted or derived, in characters.
pub const MAX_SLUG_LEN: usize = 64;

/// Largest topic body [`write`] accepts, in bytes: notes are prompt material,
/// not file storage.
pub const MAX_TOPIC_BYTES: usize = 64 * 1024;

/// A topic note's frontmatter. Fields an operator added are kept (`extra`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub slug: String,
    /// The owner's raw id (`_shared` for operator notes); informational, the
    /// folder decides ownership.
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<DateTime<Utc>>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_yaml_ng::Value>,
}

pub type Topic = Document<TopicMeta>;

/// One line of a topic listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicListing {
    pub slug: String,
    pub title: String,
    pub updated: Option<DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic name {shown} refused: {reason}; use 1–{MAX_SLUG_LEN} of a-z, 0-9, `-`, `_`")]
    InvalidSlug { shown: String, reason: &'static str },
    #[error("no topic note named `{slug}`")]
    NotFound { slug: String },
    #[error("the user name `_shared` is reserved for operator notes; it cannot own topic notes")]
    ReservedOwner,
    #[error("topic `{slug}` is {len} bytes; the limit is {MAX_TOPIC_BYTES}")]
    TooLarge { slug: String, len: usize },
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
    #[error(transparent)]
    Version(#[from] VersionError),
}

/// Checks a slug typed by a person (`/session forget TOEIC`): trimmed, ASCII
/// letters lowered, then only `[a-z0-9_-]`, 1 to [`MAX_SLUG_LEN`] long.
/// Anything else (`../x`, `..%2f`, NUL, empty, huge) is refused, not
/// rewritten, so a command never acts on a topic the person did not name.
pub fn parse_slug(raw: &str) -> Result<SafeName, TopicError> {
    let refuse = |reason| TopicError::InvalidSlug {
        shown: shown(raw),
        reason,
    };
    let slug = raw.trim().to_ascii_lowercase();
    if slug.is_empty() {
        return Err(refuse("it is empty"));
    }
    if slug.chars().count() > MAX_SLUG_LEN {
        return Err(refuse("it is too long"));
    }
    if !slug
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(refuse("it has characters other than a-z, 0-9, `-`, `_`"));
    }
    // The whitelist is inside SafeName's, so this is the identity; it keeps
    // the one-function rule for path components.
    Ok(SafeName::of(&slug))
}

/// The slug for a fact key from the model ("TOEIC 860 prep" → `toeic-860-prep`):
/// lowercase, runs of anything else become one `-`, clipped. A key with no
/// ASCII letter or digit (e.g. Chinese) gets `topic-<hash>`, stable per key.
pub fn slug_for_key(key: &str) -> SafeName {
    let mut slug = String::new();
    for c in key.trim().to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.truncate(MAX_SLUG_LEN);
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        let digest = Sha256::digest(normalized(key).as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        return SafeName::of(&format!("topic-{hex}"));
    }
    SafeName::of(slug)
}

/// A user's topic notes, sorted by slug; empty when there are none.
pub fn list(layout: &Layout, user: &SafeName) -> Result<Vec<TopicListing>, TopicError> {
    match layout.user_topics_dir(user) {
        Some(dir) => list_dir(layout, &dir),
        None => Ok(Vec::new()),
    }
}

/// The operator's shared notes, readable by every user.
pub fn list_shared(layout: &Layout) -> Result<Vec<TopicListing>, TopicError> {
    list_dir(layout, &layout.shared_topics_dir())
}

/// One of the user's own notes; `Ok(None)` when there is none.
pub fn read(layout: &Layout, user: &SafeName, slug: &str) -> Result<Option<Topic>, TopicError> {
    let slug = parse_slug(slug)?;
    let path = layout.topic_path(user, &slug).ok_or(TopicError::ReservedOwner)?;
    read_file(layout, &path)
}

/// One shared note; `Ok(None)` when there is none.
pub fn read_shared(layout: &Layout, slug: &str) -> Result<Option<Topic>, TopicError> {
    let slug = parse_slug(slug)?;
    read_file(layout, &layout.shared_topic_path(&slug))
}

/// What [`write`] puts in a note.
#[derive(Clone, Debug, Default)]
pub struct TopicWrite<'a> {
    pub title: &'a str,
    pub tags: &'a [String],
    pub body: &'a str,
}

/// Creates or replaces one of the user's notes (keeping its `created`).
pub fn write(
    layout: &Layout,
    user: &SafeName,
    slug: &str,
    note: TopicWrite<'_>,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<(), TopicError> {
    let slug = parse_slug(slug)?;
    let path = layout.topic_path(user, &slug).ok_or(TopicError::ReservedOwner)?;
    if note.body.len() > MAX_TOPIC_BYTES {
        return Err(TopicError::TooLarge {
            slug: slug.to_string(),
            len: note.body.len(),
        });
    }
    let mut topic = read_file(layout, &path)?.unwrap_or_else(|| new_topic(user, &slug, note.title, now));
    topic.meta.title = one_line(note.title);
    topic.meta.tags = note
        .tags
        .iter()
        .map(|t| one_line(t))
        .filter(|t| !t.is_empty())
        .collect();
    topic.meta.updated = Some(now);
    topic.body = note.body.to_string();
    write_file(layout, user, &path, &topic, change, now)
}

/// `/session forget <topic>`: deletes one of the caller's own notes,
/// keeping it as a version (undoable). Shared notes and other users' notes
/// are out of reach by construction; `NotFound` when the caller has no such
/// note.
pub fn delete(
    layout: &Layout,
    user: &SafeName,
    slug: &str,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<(), TopicError> {
    let slug = parse_slug(slug)?;
    let path = layout.topic_path(user, &slug).ok_or(TopicError::ReservedOwner)?;
    if versions::replace(layout, user, &path, None, change, now)? {
        Ok(())
    } else {
        Err(TopicError::NotFound { slug: slug.to_string() })
    }
}

/// Records an ongoing topic the summarizer found: creates the note named
/// after `key` if needed and adds `value` as a dated bullet unless the same
/// value is already there. The body is capped at `max_chars` by dropping the
/// oldest bullets, with a visible marker. Returns the slug and whether the
/// file changed.
pub fn merge_fact(
    layout: &Layout,
    user: &SafeName,
    key: &str,
    value: &str,
    max_chars: usize,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<(SafeName, bool), TopicError> {
    let slug = slug_for_key(key);
    let path = layout.topic_path(user, &slug).ok_or(TopicError::ReservedOwner)?;
    let existing = read_file(layout, &path)?;
    let Some(topic) = merged_note(existing, user, &slug, key, value, max_chars, now) else {
        return Ok((slug, false));
    };
    write_file(layout, user, &path, &topic, change, now)?;
    Ok((slug, true))
}

/// [`merge_fact`] on a note held as text outside the files (the Postgres
/// store's row): `existing` is the whole document (frontmatter and body)
/// of the note [`slug_for_key`] names, `path` only names it in errors.
/// Returns the new document, `None` when nothing changed.
#[allow(clippy::too_many_arguments)]
pub fn merge_fact_text(
    path: &Path,
    existing: Option<&str>,
    user: &SafeName,
    key: &str,
    value: &str,
    max_chars: usize,
    now: DateTime<Utc>,
) -> Result<Option<String>, TopicError> {
    if user.as_str() == crate::layout::SHARED_TOPICS {
        return Err(TopicError::ReservedOwner);
    }
    let slug = slug_for_key(key);
    let existing = existing.map(|text| frontmatter::parse(path, text)).transpose()?;
    match merged_note(existing, user, &slug, key, value, max_chars, now) {
        Some(topic) => Ok(Some(frontmatter::render(path, &topic.meta, &topic.body)?)),
        None => Ok(None),
    }
}

/// The note with `value` added as a dated bullet (capped), `None` when it
/// is already there.
fn merged_note(
    existing: Option<Topic>,
    user: &SafeName,
    slug: &SafeName,
    key: &str,
    value: &str,
    max_chars: usize,
    now: DateTime<Utc>,
) -> Option<Topic> {
    let created = existing.is_none();
    let mut topic = existing.unwrap_or_else(|| new_topic(user, slug, key, now));
    let value = one_line(value);
    let already = value.is_empty()
        || topic.body.lines().any(|l| {
            l.strip_prefix("- ")
                .is_some_and(|b| normalized(strip_date(b)) == normalized(&value))
        });
    if already && !created {
        return None;
    }
    if !already {
        let mut body = topic.body.trim_end().to_string();
        if !body.is_empty() {
            body.push('\n');
        }
        body.push_str(&format!("- {}: {value}\n", now.format("%Y-%m-%d")));
        topic.body = cap_bullet_lines(&body, max_chars);
    }
    topic.meta.updated = Some(now);
    Some(topic)
}

/// `- 2026-03-01: text` → `text`.
fn strip_date(bullet: &str) -> &str {
    match bullet.split_once(": ") {
        Some((date, rest)) if chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok() => rest,
        _ => bullet,
    }
}

fn new_topic(user: &SafeName, slug: &SafeName, title: &str, now: DateTime<Utc>) -> Topic {
    let meta = TopicMeta {
        title: one_line(title),
        slug: slug.to_string(),
        owner: user.decode().unwrap_or_else(|| user.to_string()),
        tags: vec![slug.to_string()],
        created: Some(now),
        updated: Some(now),
        extra: BTreeMap::new(),
    };
    Document {
        meta,
        body: String::new(),
    }
}

fn read_file(layout: &Layout, path: &Path) -> Result<Option<Topic>, TopicError> {
    match fsutil::read_string_if_exists(layout.state_root(), path)? {
        Some(text) => Ok(Some(frontmatter::parse(path, &text)?)),
        None => Ok(None),
    }
}

/// Replaces a note atomically, keeping its previous version.
fn write_file(
    layout: &Layout,
    user: &SafeName,
    path: &Path,
    topic: &Topic,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<(), TopicError> {
    let text = frontmatter::render(path, &topic.meta, &topic.body)?;
    versions::replace(layout, user, path, Some(text.as_bytes()), change, now)?;
    Ok(())
}

/// Notes in one folder. A note whose frontmatter is broken is still listed
/// (under its slug, with a warning) so the user can see and forget it.
fn list_dir(layout: &Layout, dir: &Path) -> Result<Vec<TopicListing>, TopicError> {
    let mut out = Vec::new();
    for entry in fsutil::list_dir(layout.state_root(), dir)? {
        let name = entry.file_name();
        let Some(slug) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".md"))
            .and_then(SafeName::from_encoded)
        else {
            continue; // temp files, strays an operator left
        };
        let listing = match read_file(layout, &entry.path()) {
            Ok(Some(topic)) => TopicListing {
                slug: slug.to_string(),
                title: if topic.meta.title.is_empty() {
                    slug.to_string()
                } else {
                    topic.meta.title
                },
                updated: topic.meta.updated,
            },
            Ok(None) => continue, // deleted meanwhile
            Err(e) => {
                tracing::warn!(error = %e, "topic note unreadable; listed under its file name");
                TopicListing {
                    slug: slug.to_string(),
                    title: slug.to_string(),
                    updated: None,
                }
            }
        };
        out.push(listing);
    }
    out.sort_by(|a, b| a.slug.cmp(&b.slug));
    Ok(out)
}

/// Raw input as shown in an error: escaped and clipped, so NUL or a
/// megabyte of text does not end up in a chat reply or a log line.
fn shown(raw: &str) -> String {
    let clipped: String = raw.chars().take(40).collect();
    let more = if raw.chars().count() > 40 { "…" } else { "" };
    format!("{clipped:?}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_from_fact_keys_are_lowercase_dashed_and_bounded() {
        assert_eq!(slug_for_key("TOEIC 860 prep!").as_str(), "toeic-860-prep");
        assert_eq!(slug_for_key("../../etc/passwd").as_str(), "etc-passwd");
        assert!(slug_for_key(&"ab ".repeat(100)).as_str().len() <= MAX_SLUG_LEN);
        let chinese = slug_for_key("多益考試");
        assert!(chinese.as_str().starts_with("topic-") && chinese == slug_for_key(" 多益考試 "));
    }

    #[test]
    fn person_typed_slugs_are_checked_not_rewritten() {
        assert_eq!(parse_slug(" TOEIC ").unwrap().as_str(), "toeic");
        assert_eq!(parse_slug("my_topic-2").unwrap().as_str(), "my_topic-2");
        for bad in [
            "",
            "  ",
            "../x",
            "..%2f",
            "a\0b",
            "a/b",
            ".",
            "..",
            "ü",
            &"x".repeat(65),
        ] {
            assert!(
                matches!(parse_slug(bad), Err(TopicError::InvalidSlug { .. })),
                "{bad:?}"
            );
        }
        let err = parse_slug(&"\0".repeat(10_000)).unwrap_err().to_string();
        assert!(err.len() < 400 && !err.contains('\0'), "{err}");
    }

    #[test]
    fn topic_bullets_are_capped_oldest_first_with_a_marker() {
        let body: String = (0..50).map(|i| format!("- 2026-03-01: value number {i}\n")).collect();
        let capped = cap_bullet_lines(&body, 300);
        assert!(capped.chars().count() <= 300);
        assert!(
            capped.starts_with("> mnemo: ") && capped.contains("value number 49") && !capped.contains("number 0\n")
        );
    }
}
