//! What a copy tells the operator: a progress line per user on stderr, and
//! at the end a summary on stdout (or one JSON document with `--json`) of
//! everything it did, counted in [`Totals`].
//!
//! It only counts and prints; it decides nothing about the copy.

use super::file_source::FileRead;
use super::{CopyArgs, Side};
use mnemo_pg::copy::UserMemory;

/// What a run did, for the summary.
#[derive(Default)]
pub(super) struct Totals {
    pub(super) users: usize,
    pub(super) copied: usize,
    pub(super) already_there: usize,
    pub(super) replaced: usize,
    pub(super) resumed: usize,
    /// Users with files but nothing the database keeps (exports only…).
    pub(super) nothing: usize,
    pub(super) messages: u64,
    pub(super) archived: u64,
    pub(super) folds: u64,
    pub(super) summaries: usize,
    pub(super) profiles: usize,
    pub(super) facts: usize,
    pub(super) versions: usize,
    pub(super) topic_notes: usize,
    pub(super) digests: usize,
    pub(super) shared_notes: usize,
    pub(super) documents: usize,
    pub(super) kept_files: usize,
    /// Usage rows (a user's day and purpose) copied with the users, and
    /// the channels' daily totals.
    pub(super) usage_rows: usize,
    pub(super) channel_usage_rows: usize,
    pub(super) skipped_lines: usize,
    pub(super) duplicates: usize,
    pub(super) access: super::access::AccessTotals,
}

pub(super) fn count(totals: &mut Totals, memory: &UserMemory, skipped_lines: usize, duplicates: usize) {
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
    totals.documents += memory.documents.len();
    totals.kept_files += memory.kept.len();
    totals.usage_rows += memory.usage.len();
    totals.skipped_lines += skipped_lines;
    totals.duplicates += duplicates;
}

/// `[3/120] telegram/4242: 1,234 messages` on stderr.
pub(super) fn progress(i: usize, total: usize, shown: &str, read: &FileRead, note: &str) {
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

pub(super) fn print_summary(args: &CopyArgs, t: &Totals) {
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
            "documents": t.documents,
            "keptFiles": t.kept_files,
            "usageRows": t.usage_rows,
            "channelUsageRows": t.channel_usage_rows,
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
        "  {} fact log entries, {} kept versions, {} topic notes, {} daily/weekly summaries, {} shared notes, {} documents, {} kept files, {} rows of tokens spent ({} of channel totals)",
        thousands(t.facts as u64),
        thousands(t.versions as u64),
        t.topic_notes,
        t.digests,
        t.shared_notes,
        t.documents,
        t.kept_files,
        thousands((t.usage_rows + t.channel_usage_rows) as u64),
        thousands(t.channel_usage_rows as u64)
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
