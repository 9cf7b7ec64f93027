//! The file sources of recall — profile, rolling summary, topic notes,
//! daily and weekly summaries, `_shared` operator notes (markdown), and the
//! fact log (one piece per entry, dated, labelled with what it replaced or
//! until when it held; entries of a forgotten fact are left out) — cut
//! into searchable pieces and kept in step with the files by their stamps
//! (modification time and length).
//!
//! Each search first asks [`FileSet::refresh`] to compare stamps: a file
//! that changed is re-read, one that went is removed from the index at
//! once. A folder is listed only when its own stamp moved: adding,
//! removing or renaming a file (all our writes are renames) moves it. A
//! file rewritten in place (an operator editing a `_shared` note) does not
//! move its folder's stamp, only its own: in the `_shared` folder each
//! known file's stamp is compared on every refresh (a `stat` each, no
//! listing), in the user's folders (written only by us) not. A file without frontmatter is all body; one
//! whose frontmatter does not parse is skipped with a warning (once per
//! version of the file), never indexed half-read. Reads only; never writes a file.

use super::bm25::{Bm25, Source};
use crate::facts::{FactEntry, FactOp};
use crate::frontmatter;
use crate::layout::Layout;
use crate::maintenance::digests::Period;
use crate::names::SafeName;
use crate::pieces::pieces;
use crate::profile::normalized;
use crate::stable_key::key_of;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// What kind of file a source is, deciding its label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Profile,
    Rolling,
    Note,
    SharedNote,
    Daily,
    Weekly,
    /// The user's fact log (`ltm/facts/<user>.jsonl`).
    Facts,
    /// The documents the user sent (`ltm/documents/<user>/`).
    Document,
}

/// One file, or a folder of `*.md` files, that feeds an owner's index.
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    /// The state root: nothing below it is read through a link.
    pub root: PathBuf,
    pub path: PathBuf,
    pub is_dir: bool,
    /// Files may be rewritten in place (someone edits them): compare each
    /// known file's stamp even when the folder's did not move.
    pub edited_in_place: bool,
}

/// The sources of one user (never another's: every path is computed for
/// `user`).
pub fn user_specs(layout: &Layout, user: &SafeName) -> Vec<Spec> {
    let root = layout.state_root().to_path_buf();
    let file = |kind, path| Spec {
        kind,
        root: root.clone(),
        path,
        is_dir: false,
        edited_in_place: false,
    };
    let dir = |kind, path| Spec {
        kind,
        root: root.clone(),
        path,
        is_dir: true,
        edited_in_place: false,
    };
    let mut specs = vec![
        file(Kind::Profile, layout.profile_path(user)),
        file(Kind::Facts, layout.facts_path(user)),
        file(Kind::Rolling, layout.summary_path(user)),
        dir(Kind::Daily, layout.daily_dir(user)),
        dir(Kind::Weekly, layout.weekly_dir(user)),
    ];
    specs.extend(layout.user_topics_dir(user).map(|p| dir(Kind::Note, p)));
    specs.push(dir(Kind::Document, layout.documents_dir(user)));
    specs
}

/// The operator's notes, shared by every user of the channel.
pub fn shared_specs(layout: &Layout) -> Vec<Spec> {
    vec![Spec {
        kind: Kind::SharedNote,
        root: layout.state_root().to_path_buf(),
        path: layout.shared_topics_dir(),
        is_dir: true,
        edited_in_place: true,
    }]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    mtime_ns: u128,
    len: u64,
}

/// What of the files is in the index, by path.
#[derive(Debug, Default)]
pub struct FileSet {
    files: HashMap<PathBuf, (Stamp, Vec<u64>)>,
    dirs: HashMap<PathBuf, Option<Stamp>>,
}

impl FileSet {
    /// Brings `index` in line with the files of `specs`.
    pub fn refresh(&mut self, index: &mut Bm25, specs: &[Spec]) {
        for spec in specs {
            if !spec.is_dir {
                self.refresh_file(index, spec, &spec.path);
                continue;
            }
            let stamp = stamp_of(&spec.path);
            let known = self.dirs.get(&spec.path).copied();
            if known == Some(stamp) {
                if !spec.edited_in_place {
                    continue;
                }
                // Same entries: only the known files' own stamps can move.
                let known: Vec<PathBuf> = self
                    .files
                    .keys()
                    .filter(|p| p.parent() == Some(spec.path.as_path()))
                    .cloned()
                    .collect();
                for path in known {
                    self.refresh_file(index, spec, &path);
                }
                continue;
            }
            self.dirs.insert(spec.path.clone(), stamp);
            let present = md_files(&spec.root, &spec.path);
            let gone: Vec<PathBuf> = self
                .files
                .keys()
                .filter(|p| p.parent() == Some(spec.path.as_path()) && !present.contains(p))
                .cloned()
                .collect();
            for path in gone {
                self.forget(index, &path);
            }
            for path in present {
                self.refresh_file(index, spec, &path);
            }
        }
    }

    /// Whether [`FileSet::refresh`] would leave `index` as it is: the same
    /// `stat`s, nothing changed. Lets readers check under a read lock.
    pub fn is_current(&self, specs: &[Spec]) -> bool {
        specs.iter().all(|spec| {
            if !spec.is_dir {
                return self.file_is_current(&spec.path);
            }
            if self.dirs.get(&spec.path) != Some(&stamp_of(&spec.path)) {
                return false;
            }
            !spec.edited_in_place
                || self
                    .files
                    .keys()
                    .filter(|p| p.parent() == Some(spec.path.as_path()))
                    .all(|p| self.file_is_current(p))
        })
    }

    fn file_is_current(&self, path: &Path) -> bool {
        match stamp_of(path) {
            Some(stamp) => self.files.get(path).is_some_and(|(s, _)| *s == stamp),
            None => !self.files.contains_key(path),
        }
    }

    fn refresh_file(&mut self, index: &mut Bm25, spec: &Spec, path: &Path) {
        let Some(stamp) = stamp_of(path) else {
            self.forget(index, path);
            return;
        };
        if self.files.get(path).is_some_and(|(s, _)| *s == stamp) {
            return;
        }
        self.forget(index, path);
        let keys = match read_pieces(spec.kind, &spec.root, path, stamp) {
            Some(pieces) => pieces
                .into_iter()
                .map(|(at, source, text)| {
                    // The date too: a fact log may say the same words twice.
                    let when = at.timestamp_micros().to_le_bytes();
                    let key = key_of(&[path.to_string_lossy().as_bytes(), &when, text.as_bytes()]);
                    index.add(key, at, source, text);
                    key
                })
                .collect(),
            None => Vec::new(),
        };
        self.files.insert(path.to_path_buf(), (stamp, keys));
    }

    fn forget(&mut self, index: &mut Bm25, path: &Path) {
        if let Some((_, keys)) = self.files.remove(path) {
            for key in keys {
                index.remove(key);
            }
        }
    }
}

/// A file's pieces with their date and source; `None` (warned) if its
/// frontmatter does not parse.
fn read_pieces(kind: Kind, root: &Path, path: &Path, stamp: Stamp) -> Option<Vec<(DateTime<Utc>, Source, String)>> {
    #[derive(serde::Deserialize)]
    struct Loose {
        #[serde(default)]
        updated: Option<DateTime<Utc>>,
    }
    if kind == Kind::Document {
        return document_pieces(root, path);
    }
    if kind == Kind::Facts {
        let bytes = crate::fsutil::read_nofollow(root, path).ok()?;
        let pieces = fact_pieces(&crate::facts::parse(path, &bytes).entries);
        return Some(
            pieces
                .into_iter()
                .map(|(_, at, source, text)| (at, source, text))
                .collect(),
        );
    }
    let text = crate::fsutil::read_to_string_nofollow(root, path).ok()?;
    let doc = match frontmatter::parse::<Loose>(path, &text) {
        Ok(doc) => doc,
        // A plain markdown file (an operator's note) is all body.
        Err(frontmatter::FrontmatterError::Missing { .. }) => frontmatter::Document {
            meta: Loose { updated: None },
            body: text,
        },
        Err(e) => {
            tracing::warn!(error = %e, "not searchable until its frontmatter is fixed");
            return None;
        }
    };
    let stem = path.file_stem()?.to_str()?.to_string();
    let slug = || {
        SafeName::from_encoded(&stem)
            .and_then(|s| s.decode())
            .unwrap_or_else(|| stem.clone())
    };
    let modified = DateTime::<Utc>::from_timestamp_nanos(i64::try_from(stamp.mtime_ns).unwrap_or(i64::MAX));
    let (at, source) = match kind {
        Kind::Profile => (doc.meta.updated.unwrap_or(modified), Source::Profile),
        Kind::Rolling => (doc.meta.updated.unwrap_or(modified), Source::Rolling),
        Kind::Note => (doc.meta.updated.unwrap_or(modified), Source::Note(slug())),
        Kind::SharedNote => (doc.meta.updated.unwrap_or(modified), Source::SharedNote(slug())),
        Kind::Daily | Kind::Weekly => {
            let kind = if kind == Kind::Daily { "daily" } else { "weekly" };
            (Period::parse(kind, &stem)?.noon()?, Source::Summary(stem))
        }
        // Read above, entry by entry, or page by page.
        Kind::Facts | Kind::Document => return None,
    };
    Some(pieces(&doc.body).into_iter().map(|p| (at, source.clone(), p)).collect())
}

/// A document's pieces, each dated by when it was sent and labelled with
/// its name and page; `None` (warned) if the file does not parse.
fn document_pieces(root: &Path, path: &Path) -> Option<Vec<(DateTime<Utc>, Source, String)>> {
    let text = crate::fsutil::read_to_string_nofollow(root, path).ok()?;
    let doc = match frontmatter::parse::<crate::documents::DocumentMeta>(path, &text) {
        Ok(doc) => doc,
        Err(e) => {
            tracing::warn!(error = %e, "a document is not searchable until its file is fixed");
            return None;
        }
    };
    let (name, at) = (doc.meta.name, doc.meta.added);
    Some(
        crate::documents::pieces(&doc.body)
            .into_iter()
            .map(|(page, text)| {
                (
                    at,
                    Source::Document {
                        name: name.clone(),
                        page,
                    },
                    text,
                )
            })
            .collect(),
    )
}

/// What recall shows of a fact log held outside the files (the Postgres
/// store's rows): [`fact_pieces`] as items, each with the index of its
/// entry, leaving out what the profile already shows as it is.
pub fn fact_items(entries: &[FactEntry]) -> Vec<(usize, super::Item)> {
    fact_pieces(entries)
        .into_iter()
        .filter(|(_, _, source, _)| !source.always_in_context())
        .map(|(i, at, source, text)| (i, super::Item::from_source(at, &source, &text)))
        .collect()
}

/// One piece per `set` entry of the fact log (with the entry's index),
/// `key: value`, labelled by what became of it: replaced (until the day it
/// was), dropped from the profile by the cap (still true), or standing; a
/// re-set of the same value counts once.
fn fact_pieces(entries: &[FactEntry]) -> Vec<(usize, DateTime<Utc>, Source, String)> {
    // The entry after each one of the same fact, walking backwards.
    let mut after: HashMap<_, usize> = HashMap::new();
    let mut next: Vec<Option<usize>> = vec![None; entries.len()];
    for (i, entry) in entries.iter().enumerate().rev() {
        next[i] = after.insert((entry.section, normalized(&entry.key)), i);
    }
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if entry.op != FactOp::Set {
            continue;
        }
        let (until, in_profile) = match next[i].map(|j| &entries[j]) {
            None => (None, true),
            Some(later) if later.op == FactOp::Drop => (None, false),
            Some(later) if normalized(&later.value) == normalized(&entry.value) => continue,
            Some(later) => (Some(later.ts.date_naive()), false),
        };
        let source = Source::Fact {
            was: entry.supersedes.clone(),
            until,
            in_profile,
        };
        let text = if entry.value.is_empty() {
            entry.key.clone()
        } else {
            format!("{}: {}", entry.key, entry.value)
        };
        out.push((i, entry.ts, source, text));
    }
    out
}

/// `None` for a missing file and for a link (never read through; the
/// readers that show it to the user log the refusal).
fn stamp_of(path: &Path) -> Option<Stamp> {
    let meta = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| !m.file_type().is_symlink())?;
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Some(Stamp {
        mtime_ns,
        len: meta.len(),
    })
}

/// `*.md` files of a folder whose stem is a valid encoded name (temp files
/// and strays are skipped); symbolic links are not followed.
fn md_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = crate::fsutil::read_dir_nofollow(root, dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".md"))
                .is_some_and(|stem| SafeName::from_encoded(stem).is_some())
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn fact_entries_are_dated_and_say_what_they_replaced_or_until_when_they_held() {
        let day = |d: u32| chrono::NaiveDate::from_ymd_opt(2026, 3, d).unwrap();
        let line = |d: u32, op: &str, key: &str, value: &str, was: Option<&str>| {
            let mut entry = serde_json::json!({"ts": format!("2026-03-{d:02}T09:00:00Z"), "op": op,
                "section": "facts", "key": key, "value": value, "by": "compaction"});
            if let Some(w) = was {
                entry["supersedes"] = w.into();
            }
            entry.to_string()
        };
        let log = [
            line(1, "set", "city", "Paris", None),
            line(7, "set", "City", "Berlin", Some("Paris")),
            line(2, "set", "cat", "Miso", None),
            line(3, "set", "cat", "miso", None),
            line(4, "set", "dog", "Pixel", None),
            line(5, "drop", "dog", "Pixel", None),
        ]
        .join("\n");
        let entries = crate::facts::parse(Path::new("f.jsonl"), log.as_bytes()).entries;
        let pieces = fact_pieces(&entries);
        let shown: Vec<(NaiveDate, &str, &Source)> = pieces
            .iter()
            .map(|(_, at, s, t)| (at.date_naive(), t.as_str(), s))
            .collect();
        assert_eq!(shown.len(), 4, "a repeated value counts once: {shown:?}");
        assert_eq!((shown[0].0, shown[0].1), (day(1), "city: Paris"));
        assert_eq!(
            shown[0].2,
            &Source::Fact {
                was: None,
                until: Some(day(7)),
                in_profile: false
            }
        );
        assert!(matches!(shown[1].2, Source::Fact { was: Some(w), in_profile: true, .. } if w == "Paris"));
        assert!(
            !shown[1].2.always_in_context(),
            "the earlier value is news to the model"
        );
        assert_eq!((shown[2].0, shown[2].1), (day(3), "cat: miso"));
        assert!(shown[2].2.always_in_context(), "the profile shows it as it is");
        assert_eq!(shown[3].1, "dog: Pixel");
        assert!(!shown[3].2.always_in_context(), "dropped from the profile, still true");
    }
}
