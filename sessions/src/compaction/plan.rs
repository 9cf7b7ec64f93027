//! The pure half of compaction: which records of a log are already folded
//! (the head matching the summary's [`FoldMarker`]), and how many of the
//! rest a run should fold, given the config and `now`.
//!
//! No file access, no clock: everything comes in as arguments, so the rules
//! are tested exactly.

use crate::archive::{self, EncodedBatch};
use crate::config::SessionConfig;
use crate::record::Record;
use crate::summary::FoldMarker;
use chrono::{DateTime, Utc};

/// The marker for `batch` (non-empty), whose archive encoding is
/// `encoded`: its last record, length and digest — the digest the archive
/// file of the batch is named by.
pub(crate) fn marker_for(batch: &[Record], encoded: &EncodedBatch) -> Option<FoldMarker> {
    let last = batch.last()?;
    Some(FoldMarker {
        ts: last.ts,
        msg_id: last.msg_id.clone(),
        batch_len: batch.len(),
        batch_sha256: encoded.sha256_hex(),
    })
}

/// SHA-256 (hex) of the records encoded as JSONL lines ([`archive::jsonl`]).
fn digest(records: &[Record]) -> String {
    // A `Record` is plain strings and a timestamp: encoding cannot fail.
    let lines = archive::jsonl(records).unwrap_or_default();
    archive::sha256_hex(&lines)
}

/// How many records at the head of `records` were folded by the run that
/// wrote `marker` but not yet dropped from the log (a crash or an error came
/// between). They are in the summary already: context must skip them and the
/// next run must archive and drop them, not fold them again.
///
/// `lines(n)` gives the log's own lines of the first `n` records where the
/// caller has them (see [`crate::stm::LogRead::batch_lines`]): the marker
/// is the digest of those lines. Records encoded again count too: a marker
/// written before compaction took the log's lines (or from lines that are
/// the encoder's own, as everything mnemo appends is) still matches, so
/// the view that has no bytes at hand ([`super::read_for_context`]) agrees.
/// Only looked at when the last record matches the marker's (a run that
/// crashed between its summary and its swap), so it costs nothing per turn.
pub(crate) fn already_folded(
    records: &[Record],
    marker: Option<&FoldMarker>,
    lines: &dyn Fn(usize) -> Option<Vec<u8>>,
) -> usize {
    let Some(marker) = marker else { return 0 };
    let n = marker.batch_len;
    let matches = n > 0
        && records.len() >= n
        && records[n - 1].ts == marker.ts
        && records[n - 1].msg_id == marker.msg_id
        && (lines(n).is_some_and(|lines| names_lines(marker, &lines)) || digest(&records[..n]) == marker.batch_sha256);
    if matches { n } else { 0 }
}

/// Whether `marker` was written for exactly these lines (its digest is
/// theirs), rather than for its records encoded again.
pub(crate) fn names_lines(marker: &FoldMarker, lines: &[u8]) -> bool {
    archive::sha256_hex(lines) == marker.batch_sha256
}

/// For callers of [`already_folded`] without the log's bytes at hand.
pub(crate) fn no_lines(_: usize) -> Option<Vec<u8>> {
    None
}

/// What a run should do with the unfolded records of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// Summarize the first `n` records into the rolling summary.
    Fold(usize),
    /// Compaction is off: archive the first `n` records unsummarized.
    Slide(usize),
}

/// The rules of DESIGN §4:
/// - compaction on: past `threshold`, fold all but the last `contextWindow`;
///   records older than `maxAgeMinutes` are folded too (even inside the
///   window), and never fewer than what brings the log back to `maxMessages`;
/// - compaction off: past `maxMessages`, the oldest slide out unsummarized.
pub fn decide(unfolded: &[Record], config: &SessionConfig, now: DateTime<Utc>) -> Decision {
    let n = unfolded.len();
    let over_bound = n.saturating_sub(config.stm.max_messages);
    if !config.compacting.enabled {
        return if over_bound > 0 {
            Decision::Slide(over_bound)
        } else {
            Decision::Nothing
        };
    }
    let by_threshold = if n > config.compacting.threshold {
        n.saturating_sub(config.stm.context_window)
    } else {
        0
    };
    // An absurd maxAgeMinutes saturates to "never" rather than overflowing.
    let by_age = now
        .checked_sub_signed(config.stm.max_age())
        .map_or(0, |cutoff| unfolded.iter().take_while(|r| r.ts < cutoff).count());
    match by_threshold.max(by_age).max(over_bound) {
        0 => Decision::Nothing,
        k => Decision::Fold(k),
    }
}

/// Whether [`decide`] would fold anything, from counters alone: how many
/// records are unfolded, the timestamp of the first of them, and whether a
/// batch already in the summary still waits at the head of the log. The
/// session state keeps exactly these, so "is a fold due?" costs no read.
pub fn due(
    unfolded: usize,
    first_unfolded_ts: Option<DateTime<Utc>>,
    pending_resume: bool,
    config: &SessionConfig,
    now: DateTime<Utc>,
) -> bool {
    if pending_resume || unfolded > config.stm.max_messages {
        return true;
    }
    if !config.compacting.enabled {
        return false;
    }
    let aged = match (first_unfolded_ts, now.checked_sub_signed(config.stm.max_age())) {
        (Some(first), Some(cutoff)) => first < cutoff,
        _ => false,
    };
    (unfolded > config.compacting.threshold && unfolded > config.stm.context_window) || aged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Role;
    use chrono::{TimeDelta, TimeZone};

    fn rec(i: i64) -> Record {
        Record {
            ts: Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap() + TimeDelta::minutes(i),
            role: Role::User,
            text: format!("m{i}"),
            msg_id: format!("{i}"),
            channel: "slack".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        }
    }

    fn log(range: std::ops::Range<i64>) -> Vec<Record> {
        range.map(rec).collect()
    }

    fn config(enabled: bool) -> SessionConfig {
        let mut c = SessionConfig::default();
        c.compacting.enabled = enabled;
        c.compacting.threshold = 20;
        c.stm.max_messages = 30;
        c.stm.context_window = 5;
        c.stm.max_age_minutes = 120;
        c
    }

    proptest::proptest! {
        /// `due` must agree with `decide` on every log shape, or the broker
        /// would skip a fold the rules ask for (or spawn runs for nothing).
        #[test]
        fn due_from_counters_agrees_with_decide(
            start in 0i64..400,
            len in 0i64..60,
            age_minutes in 0u64..300,
            enabled: bool,
            window in 0usize..12,
            threshold in 0usize..40,
            max in 0usize..50,
        ) {
            let mut c = config(enabled);
            c.stm.max_age_minutes = age_minutes;
            c.stm.context_window = window;
            c.compacting.threshold = threshold;
            c.stm.max_messages = max;
            let records = log(start..start + len);
            let now = rec(200).ts;
            let first = records.first().map(|r| r.ts);
            let decided = decide(&records, &c, now) != Decision::Nothing;
            proptest::prop_assert_eq!(due(records.len(), first, false, &c, now), decided);
            proptest::prop_assert!(due(records.len(), first, true, &c, now));
        }
    }

    #[test]
    fn a_marked_batch_at_the_head_is_already_folded() {
        let records = log(0..10);
        let user = crate::names::SafeName::of("U1");
        let encoded = EncodedBatch::encode(&user, &records[..4]).unwrap();
        let marker = marker_for(&records[..4], &encoded).unwrap();
        assert_eq!(already_folded(&records, Some(&marker), &no_lines), 4);
        assert_eq!(
            already_folded(&records[4..], Some(&marker), &no_lines),
            0,
            "gone once dropped"
        );
        assert_eq!(
            already_folded(&records[..3], Some(&marker), &no_lines),
            0,
            "a shorter log is not the batch"
        );
        assert_eq!(already_folded(&records, None, &no_lines), 0);
        let mut edited = records.clone();
        edited[1].text = "changed".into();
        assert_eq!(
            already_folded(&edited, Some(&marker), &no_lines),
            0,
            "same last id, other content"
        );
    }

    #[test]
    fn a_batch_marked_from_the_logs_own_lines_is_recognised_by_those_lines() {
        let records = log(0..6);
        let user = crate::names::SafeName::of("U1");
        // Lines as a hand edit or another encoder may leave them: the same
        // records, other bytes than mnemo's encoding.
        let lines: Vec<u8> = records[..4]
            .iter()
            .flat_map(|r| {
                let mut line = serde_json::to_vec_pretty(r).unwrap();
                line.retain(|&b| b != b'\n');
                line.push(b'\n');
                line
            })
            .collect();
        assert_ne!(lines, archive::jsonl(&records[..4]).unwrap());
        let encoded = EncodedBatch::from_lines(&user, &records[..4], lines.clone()).unwrap();
        let marker = marker_for(&records[..4], &encoded).unwrap();
        let own = |n: usize| (n == 4).then(|| lines.clone());
        assert_eq!(already_folded(&records, Some(&marker), &own), 4);
        assert_eq!(
            already_folded(&records, Some(&marker), &no_lines),
            0,
            "without the bytes only mnemo's own encoding is recognised"
        );
        let other = |_: usize| Some(archive::jsonl(&records[..4]).unwrap());
        assert_eq!(
            already_folded(&records, Some(&marker), &other),
            0,
            "other bytes, other batch"
        );
    }

    #[test]
    fn past_the_threshold_all_but_the_window_are_folded() {
        let now = rec(40).ts;
        assert_eq!(decide(&log(20..40), &config(true), now), Decision::Nothing);
        assert_eq!(decide(&log(19..40), &config(true), now), Decision::Fold(16));
    }

    #[test]
    fn messages_past_max_age_are_folded_even_inside_the_window() {
        let now = rec(0).ts + TimeDelta::minutes(122);
        // Records at minutes 0..3 are older than 120 minutes at `now`.
        assert_eq!(decide(&log(0..4), &config(true), now), Decision::Fold(2));
        let mut huge = config(true);
        huge.stm.max_age_minutes = u64::MAX;
        assert_eq!(decide(&log(0..4), &huge, now), Decision::Nothing);
    }

    #[test]
    fn the_hard_bound_holds_whatever_the_threshold() {
        let now = rec(0).ts;
        let mut c = config(true);
        c.compacting.threshold = 100; // an invalid config must still not grow the log
        assert_eq!(decide(&log(0..35), &c, now), Decision::Fold(5));
        assert_eq!(decide(&log(0..35), &config(false), now), Decision::Slide(5));
        assert_eq!(decide(&log(0..30), &config(false), now), Decision::Nothing);
    }
}
