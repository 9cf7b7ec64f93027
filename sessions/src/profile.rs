//! A user's long-term profile `ltm/users/<user>.md`: YAML frontmatter
//! (`user_id`, `display_name`, `channel`, `created`, `updated`, `tags`) and a
//! markdown body of `- key: value` bullets under `## Preferences`, `## Facts`,
//! `## Ongoing topics` and `## Notes`.
//!
//! This module reads the profile and merges facts into it (a repeated fact is
//! not added twice, a changed one replaces the old, the size is capped with a
//! visible cut), recording every change in the dated fact log
//! ([`crate::facts`]), of which the profile is the current view. It never
//! overwrites a profile it cannot parse: that file is reported and kept as
//! it is. Topic notes belong to [`crate::topics`];
//! recall notices a write by the file's stamp ([`crate::recall`]).

mod body;

pub(crate) use body::{Body, Merged, cap_bullet_lines, normalized, one_line};
pub use body::{LiveFact, clipped_line};

use crate::facts::{self, FactBy, FactEdit, FactError};
use crate::frontmatter::{self, Document, FrontmatterError};
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::record::Record;
use crate::summarizer::{Fact, FactSection};
use crate::versions::{self, Change, VersionError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The profile's frontmatter. Fields an operator added are kept (`extra`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileMeta {
    /// The user's raw platform id.
    #[serde(default)]
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The channel the profile belongs to (`slack`, `telegram`, …).
    #[serde(default)]
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<DateTime<Utc>>,
    /// Free tags for the index's tag search.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_yaml_ng::Value>,
}

pub type Profile = Document<ProfileMeta>;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    File(#[from] FileError),
    /// The file is kept untouched; facts are not merged into it until a
    /// person fixes (or removes) it.
    #[error("{0} (the profile is kept as it is and no facts are merged into it until it is fixed)")]
    Frontmatter(#[from] FrontmatterError),
    #[error(transparent)]
    Version(#[from] VersionError),
    #[error(transparent)]
    Facts(#[from] FactError),
}

/// Who a new or updated profile belongs to.
#[derive(Clone, Copy, Debug, Default)]
pub struct Owner<'a> {
    /// The name the user goes by on the platform, if known; a newer one
    /// replaces an older one.
    pub display_name: Option<&'a str>,
}

/// What compaction learned: the summarizer's facts and the messages they
/// came from (named in the fact log as each fact's sources).
#[derive(Clone, Copy, Debug)]
pub struct Learned<'a> {
    pub facts: &'a [Fact],
    pub batch: &'a [Record],
}

/// What a merge did, for the log and for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    pub added: usize,
    pub replaced: usize,
    pub unchanged: usize,
    /// Facts with an empty key, skipped.
    pub ignored: usize,
    /// Older bullets dropped by the size cap in this merge.
    pub dropped: usize,
}

/// Merges `facts` into a profile body held outside the file layout (the
/// Postgres store keeps the body in a row): the same rules as
/// [`merge_facts`] — keyed replace, the size cap — without files, versions
/// or the fact log. Returns the new body when something changed, and the
/// bullets the cap dropped (for the store's fact log,
/// [`facts::changes_for`]).
pub fn merge_into_body(
    body: Option<&str>,
    facts: &[Fact],
    max_chars: usize,
) -> (Option<String>, MergeReport, Vec<LiveFact>) {
    let mut parsed = Body::parse(body.unwrap_or(""));
    let mut report = merge_all(&mut parsed, facts);
    let dropped = parsed.cap(max_chars);
    report.dropped = dropped.len();
    if report.added + report.replaced + report.dropped == 0 {
        return (None, report, dropped);
    }
    (Some(parsed.render(max_chars)), report, dropped)
}

/// Merges each fact into `body`, counting what happened to it.
fn merge_all(body: &mut Body, facts: &[Fact]) -> MergeReport {
    let mut report = MergeReport::default();
    for fact in facts {
        match body.merge(fact.section, &fact.key, &fact.value) {
            Some(Merged::Added) => report.added += 1,
            Some(Merged::Replaced) => report.replaced += 1,
            Some(Merged::Unchanged) => report.unchanged += 1,
            None => report.ignored += 1,
        }
    }
    report
}

/// Reads the profile; `Ok(None)` when the user has none.
pub fn read(layout: &Layout, user: &SafeName) -> Result<Option<Profile>, ProfileError> {
    let path = layout.profile_path(user);
    let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &path)? else {
        return Ok(None);
    };
    Ok(Some(frontmatter::parse(&path, &text)?))
}

/// The profile text for the context builder and `/session profile`: `None`
/// when there is no profile or its body is blank. A profile whose
/// frontmatter is broken is an error (logged here); the broker carries on
/// without it.
pub fn read_body(layout: &Layout, user: &SafeName) -> Result<Option<String>, ProfileError> {
    match read(layout, user) {
        Ok(doc) => Ok(doc.map(|d| d.body.trim().to_string()).filter(|b| !b.is_empty())),
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "profile unreadable");
            Err(e)
        }
    }
}

/// Merges the learned facts into the user's profile, creating it if
/// needed, and caps it at `max_chars` characters of body. Facts of section
/// `Topics` land under `## Ongoing topics` here; their topic notes are
/// [`crate::topics`]'s job. Writes (atomically, keeping the previous
/// version) only if something changed, then appends what changed to the
/// fact log (hand edits of the profile found first are recorded before).
pub fn merge_facts(
    layout: &Layout,
    user: &SafeName,
    owner: Owner<'_>,
    learned: Learned<'_>,
    max_chars: usize,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<MergeReport, ProfileError> {
    let existing = read(layout, user).inspect_err(|e| {
        tracing::warn!(user = %user.log_id(), error = %e, "profile not updated: facts from this compaction are skipped");
    })?;
    let existed = existing.is_some();
    let mut profile = existing.unwrap_or_else(|| new_profile(layout, user, now));
    let mut body = Body::parse(&profile.body);
    facts::sync(layout, user, &body, FactBy::Operator, now)?;
    let mut report = merge_all(&mut body, learned.facts);
    let dropped = body.cap(max_chars);
    report.dropped = dropped.len();
    if report.dropped > 0 {
        tracing::info!(user = %user.log_id(), dropped = report.dropped, max_chars, "profile capped: oldest entries dropped");
    }
    let name_changed = match owner.display_name.map(one_line).filter(|n| !n.is_empty()) {
        Some(name) if profile.meta.display_name.as_deref() != Some(name.as_str()) => {
            profile.meta.display_name = Some(name);
            true
        }
        _ => false,
    };
    // No file for a user we know nothing about yet; no rewrite for nothing.
    let nothing_new = report.added + report.replaced + report.dropped == 0;
    if (!existed && report.added == 0) || (existed && nothing_new && !name_changed) {
        return Ok(report);
    }
    profile.body = body.render(max_chars);
    profile.meta.updated = Some(now);
    write(layout, user, &profile, change, now)?;
    let edit = FactEdit {
        by: change.by.into(),
        batch: learned.batch,
        now,
    };
    record_in_log(layout, user, &body, &dropped, edit);
    Ok(report)
}

/// Appends what the profile now says to the fact log. A failure is logged,
/// not returned: the profile is written, and the next edit's
/// [`facts::sync`] records what the log missed.
pub(crate) fn record_in_log(layout: &Layout, user: &SafeName, body: &Body, dropped: &[LiveFact], edit: FactEdit<'_>) {
    if let Err(e) = facts::commit(layout, user, body, dropped, edit) {
        tracing::warn!(user = %user.log_id(), error = %e, "fact log not updated; the next edit of the profile records it");
    }
}

/// Replaces the profile atomically, keeping the previous version
/// ([`crate::versions`]).
pub fn write(
    layout: &Layout,
    user: &SafeName,
    profile: &Profile,
    change: Change<'_>,
    now: DateTime<Utc>,
) -> Result<(), ProfileError> {
    let path = layout.profile_path(user);
    let text = frontmatter::render(&path, &profile.meta, &profile.body)?;
    versions::replace(layout, user, &path, Some(text.as_bytes()), change, now)?;
    Ok(())
}

/// Bullets of one section of the profile, as `(key, value)`: for reports and
/// tests that need the structure rather than the text.
pub fn bullets(profile: &Profile, section: FactSection) -> Vec<(String, String)> {
    Body::parse(&profile.body)
        .bullets(section)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The body of a profile document (a whole file, as a version keeps it):
/// what a store without files holds; the text itself if it does not parse.
pub fn body_of_document(text: &str) -> String {
    match frontmatter::parse::<ProfileMeta>(std::path::Path::new("profile"), text) {
        Ok(doc) => doc.body,
        Err(_) => text.to_string(),
    }
}

/// A profile document (new frontmatter, `body`), as the files keep one:
/// how a body from a store without files becomes a file again.
pub fn document_of_body(
    layout: &Layout,
    user: &SafeName,
    body: &str,
    now: DateTime<Utc>,
) -> Result<String, ProfileError> {
    let mut doc = new_profile(layout, user, now);
    doc.meta.updated = Some(now);
    Ok(frontmatter::render(&layout.profile_path(user), &doc.meta, body)?)
}

/// A new, empty profile for `user` (written only once something is in it).
pub fn new_profile(layout: &Layout, user: &SafeName, now: DateTime<Utc>) -> Profile {
    let meta = ProfileMeta {
        user_id: user.decode().unwrap_or_else(|| user.to_string()),
        channel: layout
            .channel()
            .decode()
            .unwrap_or_else(|| layout.channel().to_string()),
        created: Some(now),
        ..ProfileMeta::default()
    };
    Document {
        meta,
        body: String::new(),
    }
}

/// How many facts a profile body holds (its bullets in every section), as
/// `/session status` counts them on any store.
pub fn entries_of_body(body: &str) -> usize {
    let parsed = Body::parse(body);
    [
        FactSection::Preferences,
        FactSection::Facts,
        FactSection::Topics,
        FactSection::Notes,
    ]
    .into_iter()
    .map(|section| parsed.bullets(section).len())
    .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn fact(section: FactSection, key: &str, value: &str) -> Fact {
        Fact {
            section,
            key: key.into(),
            value: value.into(),
        }
    }

    const TEST_CHANGE: Change<'static> = Change {
        by: versions::Author::Compaction,
        what: "test",
    };

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap()
    }

    #[test]
    fn first_merge_creates_a_profile_with_frontmatter() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let facts = [fact(FactSection::Preferences, "language", "English")];
        let report = merge_facts(
            &layout,
            &user,
            Owner {
                display_name: Some("Kevin"),
            },
            Learned {
                facts: &facts,
                batch: &[],
            },
            4000,
            TEST_CHANGE,
            at(1),
        )
        .unwrap();
        assert_eq!(report.added, 1);
        let profile = read(&layout, &user).unwrap().unwrap();
        assert_eq!(profile.meta.user_id, "U1");
        assert_eq!(profile.meta.channel, "slack");
        assert_eq!(profile.meta.display_name.as_deref(), Some("Kevin"));
        assert_eq!((profile.meta.created, profile.meta.updated), (Some(at(1)), Some(at(1))));
        assert_eq!(
            read_body(&layout, &user).unwrap().as_deref(),
            Some("## Preferences\n- language: English")
        );
    }

    #[test]
    fn a_merge_that_changes_nothing_does_not_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let facts = [fact(FactSection::Facts, "job", "teacher")];
        let learned = Learned {
            facts: &facts,
            batch: &[],
        };
        merge_facts(&layout, &user, Owner::default(), learned, 4000, TEST_CHANGE, at(1)).unwrap();
        let report = merge_facts(&layout, &user, Owner::default(), learned, 4000, TEST_CHANGE, at(2)).unwrap();
        assert_eq!(
            report,
            MergeReport {
                unchanged: 1,
                ..MergeReport::default()
            }
        );
        assert_eq!(read(&layout, &user).unwrap().unwrap().meta.updated, Some(at(1)));
    }

    #[test]
    fn no_profile_is_created_for_a_user_we_learned_nothing_about() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let owner = Owner {
            display_name: Some("Kevin"),
        };
        let learned = Learned { facts: &[], batch: &[] };
        merge_facts(&layout, &user, owner, learned, 4000, TEST_CHANGE, at(1)).unwrap();
        assert!(read(&layout, &user).unwrap().is_none());
    }
}
