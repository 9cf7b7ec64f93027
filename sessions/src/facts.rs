//! The fact log `ltm/facts/<user>.jsonl`: every change to the facts of a
//! user's profile, dated and appended — who set a fact, when, from which
//! messages, what it replaced (the old entry stays: when it was true is not
//! erased), and when the profile's size cap dropped it from view (still
//! true, only not shown). Forgetting is the one rewrite: a fact the user
//! (or a tool, or an operator's edit) deletes leaves the log with every
//! entry of it, so its text survives only in the profile's versions kept
//! for undo ([`crate::versions`]), as before the log.
//! The profile (`ltm/users/<user>.md`) is the current view of this log: after
//! every write of mnemo's, the bullets of its known sections are exactly
//! the log's live facts ([`live`]).
//!
//! Writers keep the two in step in three moves: [`sync`] before an edit
//! (bullets an operator changed by hand, or a profile that has no log yet,
//! become entries by `operator` / `import`, dated at the file's mtime), the
//! profile write itself ([`crate::profile`], [`crate::edits`], which keep
//! versions), then [`commit`] with what the profile now says. A crash
//! between the profile write and [`commit`] leaves the change in the profile
//! only; the next [`sync`] records it (as `operator`), so nothing is lost.
//!
//! The log is read like the short-term log: a malformed line or a torn last
//! line is skipped with a warning naming file and line (never its text),
//! and an append after a torn line starts on a new line. Files only, through
//! [`crate::fsutil`]; the caller holds the user's lock; `now` is a parameter.
//!
//! What a change does to the log is decided as data in [`changes`] (the
//! Postgres store applies the same [`LogChanges`] to its rows); the log
//! file's bytes are written in [`file`].

mod changes;
mod file;

pub use crate::profile::LiveFact;
pub use changes::{FactEdit, LogChanges, changes_for, sync_changes};
pub use file::put_all;

use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::profile::{Body, normalized};
use crate::summarizer::FactSection;
use crate::versions::Author;
use changes::{bullets, diff, sync_plan};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What an entry does to its fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactOp {
    /// The fact is (now) `value`.
    Set,
    /// The profile's size cap dropped the fact from view: still true and
    /// still recalled, only not shown in the profile.
    Drop,
}

/// Who wrote an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactBy {
    /// The summarizer's facts, merged when old messages were folded.
    Compaction,
    /// A memory tool the model called.
    Tool,
    /// A `/session` command of the user (remember, forget, undo).
    Command,
    /// Found in the profile file but not in the log: a hand edit.
    Operator,
    /// A profile that existed before its log, taken as the first entries.
    Import,
}

impl From<Author> for FactBy {
    fn from(author: Author) -> FactBy {
        match author {
            Author::Compaction => FactBy::Compaction,
            Author::Tool => FactBy::Tool,
            Author::Command => FactBy::Command,
            Author::Operator => FactBy::Operator,
        }
    }
}

/// One line of the log (contract: add fields, never rename).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactEntry {
    #[serde(serialize_with = "rfc3339")]
    pub ts: DateTime<Utc>,
    pub op: FactOp,
    pub section: FactSection,
    pub key: String,
    /// The fact's text.
    pub value: String,
    /// Ids of the messages it came from (compaction only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The value this `set` replaced, if the fact had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<String>,
    pub by: FactBy,
}

fn rfc3339<S: serde::Serializer>(ts: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

#[derive(Debug, thiserror::Error)]
pub enum FactError {
    #[error(transparent)]
    File(#[from] FileError),
}

/// The log as read: its valid entries in order, and whether the file exists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FactLog {
    pub entries: Vec<FactEntry>,
    pub exists: bool,
    /// Lines that could not be read (warned, skipped).
    pub skipped_lines: usize,
}

/// Reads the user's log; a missing file is an empty log.
pub fn read(layout: &Layout, user: &SafeName) -> Result<FactLog, FactError> {
    let path = layout.facts_path(user);
    match fsutil::read_if_exists(layout.state_root(), &path)? {
        Some(bytes) => Ok(parse(&path, &bytes)),
        None => Ok(FactLog::default()),
    }
}

/// Every valid entry of the log bytes read from `path` (named in warnings).
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> FactLog {
    let mut log = FactLog {
        exists: true,
        ..FactLog::default()
    };
    for (number, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<FactEntry>(line) {
            Ok(entry) => log.entries.push(entry),
            Err(e) => {
                log.skipped_lines += 1;
                tracing::warn!(file = %path.display(), line = number + 1, column = e.column(), "malformed line in the fact log; skipped");
            }
        }
    }
    log
}

/// The facts `entries` leave standing, in the order they were last set.
pub fn live(entries: &[FactEntry]) -> Vec<LiveFact> {
    let mut out: Vec<LiveFact> = Vec::new();
    for entry in entries {
        let wanted = normalized(&entry.key);
        out.retain(|f| !(f.section == entry.section && normalized(&f.key) == wanted));
        if entry.op == FactOp::Set {
            out.push(LiveFact {
                section: entry.section,
                key: entry.key.clone(),
                value: entry.value.clone(),
            });
        }
    }
    out
}

/// Records what changed between the log's live facts and `after` (the
/// profile's body as just written): a `set` for each new or changed bullet,
/// a `drop` for each in `dropped` (cut by the size cap); any other fact
/// that went is forgotten (its entries leave the log). Returns how many
/// facts changed.
pub(crate) fn commit(
    layout: &Layout,
    user: &SafeName,
    after: &Body,
    dropped: &[LiveFact],
    edit: FactEdit<'_>,
) -> Result<usize, FactError> {
    let log = read(layout, user)?;
    file::apply(layout, user, &diff(&live(&log.entries), &bullets(after), dropped, edit))
}

/// Brings the log in line with the profile as it is on disk before an
/// edit: bullets it does not know become `set` entries — by `import` if
/// there was no log yet, else by `by` (normally [`FactBy::Operator`]),
/// dated at the profile's mtime (or `now`) — and facts the file no longer
/// shows are forgotten. Returns how many facts changed.
pub(crate) fn sync(
    layout: &Layout,
    user: &SafeName,
    body: &Body,
    by: FactBy,
    now: DateTime<Utc>,
) -> Result<usize, FactError> {
    let log = read(layout, user)?;
    let on_disk = bullets(body);
    if !log.exists && on_disk.is_empty() {
        return Ok(0);
    }
    let path = layout.profile_path(user);
    let at = std::fs::symlink_metadata(&path)
        .and_then(|m| m.modified())
        .map(DateTime::<Utc>::from)
        .unwrap_or(now);
    let (by, changes) = sync_plan(&log.entries, log.exists, &on_disk, by, at);
    let changed = file::apply(layout, user, &changes)?;
    if changed > 0 {
        tracing::info!(user = %user.log_id(), changed, by = ?by, "profile and fact log differed; the profile's facts recorded");
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;
    use chrono::TimeZone;
    use std::io::Write;

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap()
    }

    fn folder() -> (tempfile::TempDir, Layout, SafeName) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        (dir, layout, SafeName::of("U1"))
    }

    fn body(text: &str) -> Body {
        Body::parse(text)
    }

    fn edit(day: u32) -> FactEdit<'static> {
        FactEdit {
            by: FactBy::Compaction,
            batch: &[],
            now: at(day),
        }
    }

    #[test]
    fn a_changed_fact_supersedes_the_old_one_and_both_stay_dated() {
        let (_dir, layout, user) = folder();
        commit(&layout, &user, &body("## Facts\n- city: Paris\n"), &[], edit(1)).unwrap();
        commit(&layout, &user, &body("## Facts\n- city: Paris\n"), &[], edit(2)).unwrap();
        commit(&layout, &user, &body("## Facts\n- City: Berlin\n"), &[], edit(3)).unwrap();
        let log = read(&layout, &user).unwrap();
        assert_eq!(log.entries.len(), 2, "a repeat adds nothing: {:?}", log.entries);
        assert_eq!((log.entries[0].ts, log.entries[0].value.as_str()), (at(1), "Paris"));
        assert_eq!(log.entries[1].supersedes.as_deref(), Some("Paris"));
        assert_eq!(log.entries[1].ts, at(3));
        assert_eq!(
            live(&log.entries),
            vec![LiveFact {
                section: FactSection::Facts,
                key: "City".into(),
                value: "Berlin".into()
            }]
        );
    }

    #[test]
    fn a_fact_that_went_is_erased_from_the_log_unless_the_cap_dropped_it() {
        let (_dir, layout, user) = folder();
        commit(&layout, &user, &body("## Facts\n- a: 1\n- b: 2\n"), &[], edit(1)).unwrap();
        commit(&layout, &user, &body("## Facts\n- a: 1\n- b: 3\n"), &[], edit(2)).unwrap();
        let path = layout.facts_path(&user);
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"kept: not json\n").unwrap();
        let dropped = [LiveFact {
            section: FactSection::Facts,
            key: "a".into(),
            value: "1".into(),
        }];
        commit(&layout, &user, &body("## Facts\n"), &dropped, edit(3)).unwrap();
        let log = read(&layout, &user).unwrap();
        let ops: Vec<(FactOp, &str, &str)> = log
            .entries
            .iter()
            .map(|e| (e.op, e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            ops,
            vec![(FactOp::Set, "a", "1"), (FactOp::Drop, "a", "1")],
            "b and both its values are gone; a is still true"
        );
        assert!(live(&log.entries).is_empty());
        assert_eq!(
            log.skipped_lines, 1,
            "a line that does not parse is not lost by the rewrite"
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_torn_or_malformed_line_is_skipped_and_the_next_append_starts_a_new_line() {
        let (_dir, layout, user) = folder();
        commit(&layout, &user, &body("## Facts\n- a: 1\n"), &[], edit(1)).unwrap();
        let path = layout.facts_path(&user);
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"not json\n{\"ts\":\"2026-03-0").unwrap();
        commit(&layout, &user, &body("## Facts\n- a: 1\n- b: 2\n"), &[], edit(2)).unwrap();
        let log = read(&layout, &user).unwrap();
        assert_eq!(log.skipped_lines, 2);
        assert_eq!(log.entries.len(), 2);
        assert_eq!(live(&log.entries).len(), 2);
    }

    #[test]
    fn the_log_is_private_and_a_link_in_its_place_is_refused_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, layout, user) = folder();
        commit(&layout, &user, &body("## Facts\n- a: 1\n"), &[], edit(1)).unwrap();
        let path = layout.facts_path(&user);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(&layout.facts_dir())), (0o600, 0o700));

        let elsewhere = dir.path().join("elsewhere.jsonl");
        std::fs::write(&elsewhere, "untouched\n").unwrap();
        let other = SafeName::of("U2");
        std::os::unix::fs::symlink(&elsewhere, layout.facts_path(&other)).unwrap();
        let refused = commit(&layout, &other, &body("## Facts\n- b: 2\n"), &[], edit(2));
        assert!(
            matches!(refused, Err(FactError::File(ref e)) if e.is_link_refused()),
            "{refused:?}"
        );
        assert!(matches!(read(&layout, &other), Err(FactError::File(e)) if e.is_link_refused()));
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched\n");
    }

    #[test]
    fn an_existing_profile_without_a_log_is_imported_at_its_mtime() {
        let (_dir, layout, user) = folder();
        let profile = body("Prose.\n## Preferences\n- language: English\n## Notes\n- likes tea\n");
        assert_eq!(sync(&layout, &user, &profile, FactBy::Operator, at(5)).unwrap(), 2);
        let log = read(&layout, &user).unwrap();
        assert!(log.entries.iter().all(|e| e.by == FactBy::Import && e.ts == at(5)));
        assert_eq!(sync(&layout, &user, &profile, FactBy::Operator, at(6)).unwrap(), 0);
    }
}
