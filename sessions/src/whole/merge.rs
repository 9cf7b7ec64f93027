//! Two accounts' memories made one (issue 37): what linking does when both
//! accounts a person links already have memory. [`merge`] is a pure
//! function of the two [`Whole`]s; the store writes its result as the
//! home's memory and the other account's memory is then deleted.
//!
//! The rules, each losing nothing:
//! - **Messages by time.** The short-term logs interleave by timestamp (the
//!   home's first at the same instant); the archived batches are kept
//!   whole, ordered by their first message. A message of the other account
//!   whose id the home already uses for another message gets the other
//!   platform's name in its id (its answer's id follows, so a question and
//!   its answer stay paired); one the home holds already, the same in
//!   every field, is not added twice — so merging again adds nothing.
//! - **Summaries, topic notes, daily and weekly summaries:** the home's
//!   text, then the other's under a line naming its platform (not again if
//!   the home's text holds it already).
//! - **Profile:** the other's facts join the home's sections; a fact with
//!   the same name and another value is kept beside the home's, its name
//!   saying which platform it came from. What is not a fact (prose, a
//!   heading mnemo does not know) is kept under its own heading.
//! - **Undo:** the merge is recorded as versions of the home's profile and
//!   of each note it changed, the home's text before it as their `before`,
//!   the profile last: `/session undo` takes back the profile, and each
//!   further undo one note. The other account's own versions are kept in
//!   the history, marked undone (they describe files that no longer exist).
//! - **The rest:** reminders (an id the home uses gets a new one), the
//!   documents and kept files (by id; the same file once), the timezone
//!   (the home's, else the other's), the tokens spent (added by day and
//!   purpose).

use super::{Fold, Whole};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::pending;
use crate::profile::{Body, normalized};
use crate::record::Record;
use crate::versions::{Author, Version};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// The two sides of a merge: whose memory is kept and whose joins it.
#[derive(Clone, Copy, Debug)]
pub struct Sides<'a> {
    /// The account whose memory is kept (its user name in its store).
    pub home: &'a SafeName,
    /// The account whose memory joins it.
    pub other: &'a SafeName,
    /// The other account's platform (its channel's name), shown where its
    /// text is kept beside the home's.
    pub from: &'a str,
}

/// What each versioned change of the merge says it was.
pub const MERGED: &str = "merged with the memory of a linked account";

/// `home` with `other` merged in at `at` (the module doc says how).
pub fn merge(mut home: Whole, other: Whole, sides: Sides<'_>, at: DateTime<Utc>) -> Whole {
    let other = other.as_stored();
    merge_messages(&mut home, &other, sides.from);
    let heading = format!("From your {} account:", sides.from);
    home.summary = joined(home.summary.take(), other.summary.as_deref(), &heading);
    home.summary_at = home.summary_at.max(other.summary_at);
    let profile_before = home.profile.clone();
    if let Some(theirs) = other.profile.as_deref().filter(|t| !t.trim().is_empty()) {
        let merged = merged_profile(home.profile.as_deref().unwrap_or(""), theirs, sides.from);
        if home.profile.as_deref().map(str::trim) != Some(merged.trim()) {
            home.profile = Some(merged);
            home.profile_at = Some(at);
        }
    }
    let mut facts = std::mem::take(&mut home.facts);
    for fact in &other.facts {
        if !facts.contains(fact) {
            facts.push(fact.clone());
        }
    }
    facts.sort_by_key(|f| f.ts);
    home.facts = facts;
    let mut changed_notes = Vec::new();
    for (slug, theirs) in &other.topics {
        match home.topics.iter_mut().find(|(s, _)| s == slug) {
            Some((_, mine)) => {
                let body = crate::profile::body_of_document(theirs);
                if let Some(both) = joined(Some(mine.clone()), Some(&body), &heading)
                    && both != *mine
                {
                    changed_notes.push((slug.clone(), Some(std::mem::replace(mine, both))));
                }
            }
            None => {
                home.topics.push((slug.clone(), theirs.clone()));
                changed_notes.push((slug.clone(), None));
            }
        }
    }
    home.topics.sort();
    merge_digests(&mut home, &other, &heading);
    merge_rest(&mut home, &other, sides.home);
    record_versions(&mut home, &other, sides, (profile_before, changed_notes), at);
    home.as_stored()
}

/// The messages by time; ids the home uses already made the other
/// platform's own.
fn merge_messages(home: &mut Whole, other: &Whole, from: &str) {
    let archived = home.archived();
    let mine: HashMap<&str, &Record> = home.messages.iter().map(|r| (r.msg_id.as_str(), r)).collect();
    // Held already: the same record, or the same under the id a merge
    // before gave it.
    let held = |r: &Record| {
        mine.get(r.msg_id.as_str()).is_some_and(|m| *m == r)
            || mine.get(renamed(&r.msg_id, from).as_str()).is_some_and(|m| {
                let mut r = r.clone();
                r.msg_id = m.msg_id.clone();
                **m == r
            })
    };
    let taken: HashSet<String> = other
        .messages
        .iter()
        .filter(|r| mine.contains_key(r.msg_id.as_str()) && !held(r))
        .map(|r| base_id(&r.msg_id).to_string())
        .collect();
    let adopt = |records: &[Record]| -> Vec<Record> {
        records
            .iter()
            .filter(|r| !held(r))
            .map(|r| {
                let mut r = r.clone();
                if taken.contains(base_id(&r.msg_id)) {
                    r.msg_id = renamed(&r.msg_id, from);
                }
                r
            })
            .collect()
    };
    // Archived batches, each whole, ordered by their first message; a
    // batch of repeats only is gone.
    let mut batches: Vec<(Fold, Vec<Record>)> = Vec::new();
    let mut start = 0;
    for fold in &home.folds {
        batches.push((fold.clone(), home.messages[start..start + fold.messages].to_vec()));
        start += fold.messages;
    }
    let mut start = 0;
    for fold in &other.folds {
        let records = adopt(&other.messages[start..start + fold.messages]);
        start += fold.messages;
        if !records.is_empty() {
            let fold = Fold {
                messages: records.len(),
                ..fold.clone()
            };
            batches.push((fold, records));
        }
    }
    let their_log = adopt(&other.messages[start..]);
    batches.sort_by_key(|(_, records)| records.iter().map(|r| r.ts).min());
    let mut log: Vec<Record> = home.messages[archived..].to_vec();
    log.extend(their_log);
    log.sort_by_key(|r| r.ts);
    home.folds = batches.iter().map(|(f, _)| f.clone()).collect();
    home.messages = batches
        .into_iter()
        .flat_map(|(_, records)| records)
        .chain(log)
        .collect();
}

/// The question's id behind an answer's or an observed message's.
fn base_id(msg_id: &str) -> &str {
    let answer = pending::reply_id("");
    let seen = pending::observed_id("");
    msg_id
        .strip_prefix(answer.as_str())
        .or_else(|| msg_id.strip_prefix(seen.as_str()))
        .unwrap_or(msg_id)
}

/// `msg_id` with its question's id prefixed by the platform.
fn renamed(msg_id: &str, from: &str) -> String {
    let base = base_id(msg_id);
    let prefix = &msg_id[..msg_id.len() - base.len()];
    format!("{prefix}{from}:{base}")
}

/// The home's text, then the other's under `heading`; the home's alone
/// when it holds the other's already.
fn joined(mine: Option<String>, theirs: Option<&str>, heading: &str) -> Option<String> {
    let theirs = theirs.map(str::trim).filter(|t| !t.is_empty());
    match (mine.filter(|m| !m.trim().is_empty()), theirs) {
        (Some(mine), Some(theirs)) if mine.contains(theirs) => Some(mine),
        (Some(mine), Some(theirs)) => Some(format!("{}\n\n{heading}\n\n{theirs}", mine.trim_end())),
        (None, Some(theirs)) => Some(theirs.to_string()),
        (mine, None) => mine,
    }
}

/// The home's profile body with the other's facts and text added.
fn merged_profile(mine: &str, theirs: &str, from: &str) -> String {
    let mut body = Body::parse(mine);
    let other = Body::parse(theirs);
    let mut moved = Vec::new();
    for (section, key, value) in other.all_bullets() {
        let clash = body
            .bullets(section)
            .iter()
            .any(|(k, v)| normalized(k) == normalized(key) && normalized(v) != normalized(value));
        let key_here = if clash {
            format!("{key} (from {from})")
        } else {
            key.to_string()
        };
        if body.merge(section, &key_here, value).is_some() {
            moved.push(key.to_string());
        }
    }
    body.dropped += other.dropped;
    let mut rest = Body::parse(theirs);
    let keys: Vec<&str> = moved.iter().map(String::as_str).collect();
    rest.remove_keys(&keys);
    rest.dropped = 0;
    let mut out = body.render(usize::MAX);
    let rest = rest.render(usize::MAX);
    if !rest.trim().is_empty() && !out.contains(rest.trim()) {
        out = format!("{}\n\n## From your {from} account\n\n{}", out.trim_end(), rest.trim());
    }
    out
}

/// Daily and weekly summaries: one per period, both texts where both had one.
fn merge_digests(home: &mut Whole, other: &Whole, heading: &str) {
    for theirs in &other.digests {
        match home.digests.iter_mut().find(|d| d.period == theirs.period) {
            Some(mine) => {
                if let Some(both) = joined(Some(mine.body.clone()), Some(&theirs.body), heading)
                    && both != mine.body
                {
                    mine.body = both;
                    mine.meta.messages += theirs.meta.messages;
                }
            }
            None => home.digests.push(theirs.clone()),
        }
    }
}

/// Reminders, timezone, documents, kept files and tokens spent.
fn merge_rest(home: &mut Whole, other: &Whole, home_user: &SafeName) {
    if home.reminders.timezone.is_none() {
        home.reminders.timezone = other.reminders.timezone.clone();
    }
    for reminder in &other.reminders.reminders {
        if home.reminders.reminders.contains(reminder) {
            continue;
        }
        let mut reminder = reminder.clone();
        let base = reminder.id.clone();
        let mut n = 2;
        while home.reminders.reminders.iter().any(|r| r.id == reminder.id) {
            reminder.id = format!("{base}{n}");
            n += 1;
        }
        home.reminders.reminders.push(reminder);
    }
    for doc in &other.documents {
        if !home.documents.iter().any(|d| d.meta.id == doc.meta.id) {
            home.documents.push(doc.clone());
        }
    }
    for file in &other.kept {
        if !home.kept.iter().any(|f| f.meta.id == file.meta.id) {
            home.kept.push(file.clone());
        }
    }
    for row in &other.usage {
        match home
            .usage
            .iter_mut()
            .find(|h| h.day == row.day && h.purpose == row.purpose)
        {
            Some(mine) => {
                mine.tokens_in += row.tokens_in;
                mine.tokens_out += row.tokens_out;
            }
            None => {
                let mut row = row.clone();
                row.user = Some(home_user.clone());
                home.usage.push(row);
            }
        }
    }
}

/// The other's versions (marked undone, named for the home's files), then
/// the merge's own: each note it changed, then the profile, so the first
/// undo takes back the profile.
fn record_versions(
    home: &mut Whole,
    other: &Whole,
    sides: Sides<'_>,
    (profile_before, notes): (Option<String>, Vec<(String, Option<String>)>),
    at: DateTime<Utc>,
) {
    let mut seq = home.versions.iter().map(|v| v.seq).max().unwrap_or(0);
    let mut next = |mut v: Version| {
        seq += 1;
        v.seq = seq;
        v
    };
    // Not again when merged before (the same change to the same file).
    let theirs: Vec<Version> = other
        .versions
        .iter()
        .map(|v| Version {
            file: home_file(&v.file, sides),
            ..v.clone()
        })
        .filter(|v| {
            !home
                .versions
                .iter()
                .any(|h| (h.ts, h.by, &h.what, &h.file, &h.before) == (v.ts, v.by, &v.what, &v.file, &v.before))
        })
        .collect();
    for version in theirs {
        let mut version = next(version);
        version.undone = version.undone.or(Some(at));
        home.versions.push(version);
    }
    let merged = |file: String, before: Option<String>| Version {
        seq: 0,
        ts: at,
        by: Author::Command,
        what: MERGED.to_string(),
        file,
        before,
        undone: None,
    };
    for (slug, before) in notes {
        let v = next(merged(format!("topics/{}/{slug}.md", sides.home), before));
        home.versions.push(v);
    }
    if home.profile != profile_before {
        let v = next(merged(Layout::profile_file(sides.home), profile_before));
        home.versions.push(v);
    }
}

/// `file` (a path under `ltm/`: `<kind>/<user>.<ext>` or
/// `<kind>/<user>/<name>`) with the other account's name made the home's.
fn home_file(file: &str, sides: Sides<'_>) -> String {
    let (other, home) = (sides.other.as_str(), sides.home.as_str());
    let mut parts: Vec<String> = file.split('/').map(str::to_string).collect();
    if let Some(name) = parts.get_mut(1) {
        if name == other {
            *name = home.to_string();
        } else if let Some(ext) = name.strip_prefix(other).and_then(|r| r.strip_prefix('.')) {
            *name = format!("{home}.{ext}");
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Role;
    use chrono::TimeZone;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 9, minute, 0).unwrap()
    }

    fn said(minute: u32, role: Role, id: &str, text: &str) -> Record {
        Record {
            ts: at(minute),
            role,
            text: text.to_string(),
            msg_id: id.to_string(),
            channel: "x".to_string(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        }
    }

    fn names() -> (SafeName, SafeName) {
        (SafeName::of("100"), SafeName::of("U200"))
    }

    fn sides<'a>(names: &'a (SafeName, SafeName)) -> Sides<'a> {
        Sides {
            home: &names.0,
            other: &names.1,
            from: "slack",
        }
    }

    /// A version of `user`'s profile a memory tool made.
    fn remembered(user: &SafeName) -> Version {
        Version {
            seq: 1,
            ts: at(1),
            by: Author::Tool,
            what: "remembered".into(),
            file: Layout::profile_file(user),
            before: None,
            undone: None,
        }
    }

    fn log(records: Vec<Record>) -> Whole {
        Whole {
            messages: records,
            ..Whole::default()
        }
    }

    #[test]
    fn messages_interleave_by_time_and_a_taken_id_is_renamed_with_its_answer() {
        let home = log(vec![
            said(1, Role::User, "1", "tg question"),
            said(3, Role::Assistant, "re-1", "tg answer"),
        ]);
        let other = log(vec![
            said(2, Role::User, "1", "slack question"),
            said(4, Role::Assistant, "re-1", "slack answer"),
            said(5, Role::User, "7", "slack later"),
        ]);
        let names = names();
        let merged = merge(home, other, sides(&names), at(10));
        let got: Vec<(&str, &str)> = merged
            .messages
            .iter()
            .map(|r| (r.msg_id.as_str(), r.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("1", "tg question"),
                ("slack:1", "slack question"),
                ("re-1", "tg answer"),
                ("re-slack:1", "slack answer"),
                ("7", "slack later"),
            ]
        );
        for question in ["1", "slack:1"] {
            assert!(crate::pending::is_settled(&merged.messages, question), "{question}");
        }
    }

    #[test]
    fn archived_batches_stay_whole_in_order_of_their_first_message() {
        let mut home = log(vec![said(5, Role::User, "h1", "a"), said(6, Role::User, "h2", "b")]);
        home.folds.push(Fold {
            messages: 1,
            kind: "summarized".into(),
            at: at(7),
        });
        let mut other = log(vec![said(1, Role::User, "o1", "c"), said(9, Role::User, "o2", "d")]);
        other.folds.push(Fold {
            messages: 1,
            kind: "slid".into(),
            at: at(2),
        });
        let names = names();
        let merged = merge(home, other, sides(&names), at(10));
        let ids: Vec<&str> = merged.messages.iter().map(|r| r.msg_id.as_str()).collect();
        assert_eq!(ids, ["o1", "h1", "h2", "o2"]);
        let kinds: Vec<(&str, usize)> = merged.folds.iter().map(|f| (f.kind.as_str(), f.messages)).collect();
        assert_eq!(kinds, [("slid", 1), ("summarized", 1)]);
    }

    #[test]
    fn profiles_join_keeping_both_values_of_a_fact_and_undo_holds_the_home_profile() {
        let home = Whole {
            profile: Some("## Preferences\n- drink: tea\n".into()),
            summary: Some("Talked about tea.".into()),
            ..Whole::default()
        };
        let other = Whole {
            profile: Some("Likes long walks.\n\n## Preferences\n- drink: coffee\n- pet: cat\n".into()),
            summary: Some("Talked about cats.".into()),
            topics: vec![("trip".into(), "---\ntitle: trip\n---\nLisbon in May\n".into())],
            ..Whole::default()
        };
        let names = names();
        let merged = merge(home, other, sides(&names), at(10));
        let profile = merged.profile.clone().unwrap();
        for part in [
            "- drink: tea",
            "- drink (from slack): coffee",
            "- pet: cat",
            "Likes long walks.",
        ] {
            assert!(profile.contains(part), "{part} missing from {profile}");
        }
        assert_eq!(
            merged.summary.as_deref(),
            Some("Talked about tea.\n\nFrom your slack account:\n\nTalked about cats.")
        );
        assert_eq!(merged.topics.len(), 1);
        let last = merged.versions.last().unwrap();
        assert_eq!(last.file, Layout::profile_file(&names.0));
        assert_eq!(last.before.as_deref(), Some("## Preferences\n- drink: tea\n"));
        assert_eq!(last.by, Author::Command);
        let note = &merged.versions[merged.versions.len() - 2];
        assert_eq!(
            (note.file.as_str(), note.before.as_deref()),
            ("topics/100/trip.md", None)
        );
    }

    #[test]
    fn merging_the_same_memory_again_adds_nothing() {
        let names = names();
        let other = Whole {
            versions: vec![remembered(&names.1)],
            messages: vec![said(2, Role::User, "1", "hello")],
            profile: Some("## Facts\n- city: Porto\n".into()),
            summary: Some("Porto.".into()),
            topics: vec![("trip".into(), "Lisbon in May\n".into())],
            ..Whole::default()
        };
        let home = log(vec![said(1, Role::User, "1", "hi")]);
        let once = merge(home, other.clone(), sides(&names), at(10));
        let twice = merge(once.clone(), other, sides(&names), at(11));
        assert_eq!(twice.messages, once.messages);
        assert_eq!(twice.profile, once.profile);
        assert_eq!(twice.summary, once.summary);
        assert_eq!(twice.topics, once.topics);
        assert_eq!(twice.versions, once.versions);
    }

    #[test]
    fn the_other_accounts_versions_are_kept_undone_under_the_home_name() {
        let names = names();
        let other = Whole {
            versions: vec![remembered(&names.1)],
            ..Whole::default()
        };
        let merged = merge(Whole::default(), other, sides(&names), at(10));
        assert_eq!(merged.versions.len(), 1);
        assert_eq!(merged.versions[0].file, Layout::profile_file(&names.0));
        assert_eq!(merged.versions[0].undone, Some(at(10)));
    }
}
