//! What a change to the profile does to the fact log, as data: the
//! entries to append and the facts to forget ([`LogChanges`]), found by
//! comparing the log's live facts with the profile's bullets, each `set`
//! dated when the user said it and tied to the messages it came from.
//!
//! The rules are written once here for both stores: the file log applies
//! them in [`super::file`], the Postgres store to its rows. Pure: no file,
//! no clock (the time comes in [`FactEdit`]).

use super::{FactBy, FactEntry, FactOp, LiveFact, live};
use crate::profile::{Body, normalized};
use crate::record::{Record, Role};
use chrono::{DateTime, Utc};

/// Who makes a change, when, and the messages it came from. A `set`
/// learned from messages is dated at the newest of the user's among them.
#[derive(Clone, Copy, Debug)]
pub struct FactEdit<'a> {
    pub by: FactBy,
    /// The folded messages (compaction), to name a fact's sources.
    pub batch: &'a [Record],
    pub now: DateTime<Utc>,
}

/// What a store that keeps the log outside the files (the Postgres store's
/// rows) does to its log: append these entries, and remove every entry of
/// which [`LogChanges::removes`] says so (a forgotten fact). The same rules
/// as the file's [`commit`](super::commit) and [`sync`](super::sync), without files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogChanges {
    pub append: Vec<FactEntry>,
    forget: Vec<LiveFact>,
}

impl LogChanges {
    /// Whether `entry` leaves the log (its fact was forgotten).
    pub fn removes(&self, entry: &FactEntry) -> bool {
        self.forget.iter().any(|f| same_key(f, &LiveFact::of(entry)))
    }

    pub fn is_empty(&self) -> bool {
        self.append.is_empty() && self.forget.is_empty()
    }

    /// How many facts this changes (for logs).
    pub fn len(&self) -> usize {
        self.append.len() + self.forget.len()
    }

    fn of(changes: Changes) -> LogChanges {
        LogChanges {
            append: changes.append,
            forget: changes.forget,
        }
    }
}

/// [`commit`](super::commit) for a log held as `entries`: what records the change from the
/// log's live facts to the profile body `after` (as just written), with the
/// bullets the size cap `dropped`.
pub fn changes_for(entries: &[FactEntry], after: &str, dropped: &[LiveFact], edit: FactEdit<'_>) -> LogChanges {
    LogChanges::of(diff(&live(entries), &bullets(&Body::parse(after)), dropped, edit))
}

/// [`sync`](super::sync) for a log held as `entries`: what records the profile body
/// `body` as found (its bullets the log does not know, by `by` dated `at`;
/// by `import` when the log was never `started`), before an edit.
pub fn sync_changes(entries: &[FactEntry], started: bool, body: &str, by: FactBy, at: DateTime<Utc>) -> LogChanges {
    let on_disk = bullets(&Body::parse(body));
    LogChanges::of(sync_plan(entries, started, &on_disk, by, at).1)
}

/// What [`sync`](super::sync) records: the label (`import` when there is no log yet)
/// and the changes that bring `entries` in line with the bullets `on_disk`.
pub(super) fn sync_plan(
    entries: &[FactEntry],
    exists: bool,
    on_disk: &[LiveFact],
    by: FactBy,
    at: DateTime<Utc>,
) -> (FactBy, Changes) {
    let by = if exists { by } else { FactBy::Import };
    let edit = FactEdit {
        by,
        batch: &[],
        now: at,
    };
    (by, diff(&live(entries), on_disk, &[], edit))
}

pub(super) fn bullets(body: &Body) -> Vec<LiveFact> {
    body.all_bullets()
        .into_iter()
        .map(|(section, key, value)| LiveFact {
            section,
            key: key.to_string(),
            value: value.to_string(),
        })
        .collect()
}

pub(super) fn same_key(a: &LiveFact, b: &LiveFact) -> bool {
    a.section == b.section && normalized(&a.key) == normalized(&b.key)
}

/// What turns the log's `before` into `after`.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) append: Vec<FactEntry>,
    /// Facts whose every entry leaves the log.
    pub(super) forget: Vec<LiveFact>,
}

impl LiveFact {
    pub(super) fn of(entry: &FactEntry) -> LiveFact {
        LiveFact {
            section: entry.section,
            key: entry.key.clone(),
            value: entry.value.clone(),
        }
    }
}

pub(super) fn diff(before: &[LiveFact], after: &[LiveFact], dropped: &[LiveFact], edit: FactEdit<'_>) -> Changes {
    let entry = |op, fact: &LiveFact| FactEntry {
        ts: edit.now,
        op,
        section: fact.section,
        key: fact.key.clone(),
        value: fact.value.clone(),
        sources: Vec::new(),
        supersedes: None,
        by: edit.by,
    };
    let mut out = Changes::default();
    // What the cap dropped was learned all the same (maybe in this very edit).
    for new in after.iter().chain(dropped) {
        let old = before.iter().find(|old| same_key(old, new));
        if old.is_some_and(|old| normalized(&old.value) == normalized(&new.value)) {
            continue;
        }
        let mut set = entry(FactOp::Set, new);
        set.supersedes = old.map(|old| old.value.clone());
        let sources = sources_of(&new.value, edit.batch);
        // Dated when the user said it (a reply is stamped when it was
        // sent), not when it was folded.
        let said = sources.iter().filter(|r| r.role == Role::User).map(|r| r.ts).max();
        set.ts = said.or_else(|| sources.iter().map(|r| r.ts).max()).unwrap_or(edit.now);
        set.sources = sources.into_iter().map(|r| r.msg_id.clone()).collect();
        out.append.push(set);
    }
    let shown = |fact: &LiveFact| after.iter().any(|new| same_key(fact, new));
    for old in before
        .iter()
        .filter(|old| !shown(old) && !dropped.iter().any(|d| same_key(old, d)))
    {
        out.forget.push(old.clone());
    }
    for cut in dropped.iter().filter(|d| !shown(d)) {
        out.append.push(entry(FactOp::Drop, cut));
    }
    out
}

/// Shortest word that ties a fact to a message.
const SOURCE_WORD_CHARS: usize = 4;

/// The batch's messages that share a word (of at least
/// [`SOURCE_WORD_CHARS`] letters) with `value`; every user message of the
/// batch when none does (the summarizer may have paraphrased).
fn sources_of<'b>(value: &str, batch: &'b [Record]) -> Vec<&'b Record> {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= SOURCE_WORD_CHARS)
            .map(str::to_lowercase)
            .collect()
    };
    let wanted = words(value);
    let matching: Vec<&Record> = batch
        .iter()
        .filter(|r| words(&r.text).iter().any(|w| wanted.contains(w)))
        .collect();
    if !matching.is_empty() {
        return matching;
    }
    batch.iter().filter(|r| r.role == Role::User).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap()
    }

    #[test]
    fn sources_are_the_messages_that_mention_the_fact() {
        let rec = |id: &str, text: &str| Record {
            ts: at(1),
            role: Role::User,
            text: text.into(),
            msg_id: id.into(),
            channel: "slack".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        };
        let batch = [
            rec("1", "hello"),
            rec("2", "I moved to Berlin last week"),
            rec("3", "ok"),
        ];
        assert_eq!(sources_of("lives in Berlin", &batch), vec![&batch[1]]);
        assert_eq!(sources_of("xyz", &batch).len(), 3);
    }
}
