//! Questions stored but not yet settled: the rule both stores, compaction
//! and the broker's recovery share (issue 42: a message is stored on
//! intake, before its user's queue, so a crash can leave questions in the
//! log that nobody answered).
//!
//! A question is *settled* once a record answers it: the model's answer, or
//! the short notice the user was shown instead (the model failed, or the
//! question was given up as stale). That record's `msgId` is
//! [`reply_id`] of the question's. A user's questions are settled in the
//! order they were stored (one queue per user), so a settled question
//! settles every question before it, and the unsettled ones are always the
//! questions after the last settled one: [`first_pending`].
//!
//! Pure functions over records: no files, no clock.

use crate::record::{Record, Role};
use std::collections::HashSet;

/// The `msgId` of the record that answers the question `msg_id`.
pub fn reply_id(msg_id: &str) -> String {
    format!("re-{msg_id}")
}

/// The question `msg_id` answered by a record with this id, if it is one.
pub fn answered_by(reply_msg_id: &str) -> Option<&str> {
    reply_msg_id.strip_prefix("re-")
}

/// The index in `records` (a user's log, oldest first) of the first
/// question not settled yet, if any: the first user record after the last
/// one that some record of `records` answers. With no settled question in
/// `records`, every user record in it is pending.
pub fn first_pending<R: AsRef<Record>>(records: &[R]) -> Option<usize> {
    let answered: HashSet<&str> = records
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| r.role == Role::Assistant)
        .filter_map(|r| answered_by(&r.msg_id))
        .collect();
    let after = records
        .iter()
        .map(AsRef::as_ref)
        .rposition(|r| r.role == Role::User && answered.contains(r.msg_id.as_str()))
        .map_or(0, |i| i + 1);
    records[after..]
        .iter()
        .position(|r| r.as_ref().role == Role::User)
        .map(|i| after + i)
}

/// The questions of `records` not settled yet, oldest first.
pub fn pending(records: &[Record]) -> Vec<&Record> {
    match first_pending(records) {
        Some(first) => records[first..].iter().filter(|r| r.role == Role::User).collect(),
        None => Vec::new(),
    }
}

/// Whether the question `msg_id` is settled in `records` (a user's recent
/// log): answered itself, or stored before a question that is. False when
/// it is not among `records` at all.
pub fn is_settled<R: AsRef<Record>>(records: &[R], msg_id: &str) -> bool {
    let Some(at) = records
        .iter()
        .position(|r| r.as_ref().role == Role::User && r.as_ref().msg_id == msg_id)
    else {
        return false;
    };
    first_pending(records).is_none_or(|first| first > at)
}

/// The records a turn answering `msg_id` may show the model as its recent
/// history: `records` without the questions stored after it (still waiting
/// in the user's queue, not yet asked), so an answer never sees a question
/// from its future. Answers stored after it (to questions before it) stay.
pub fn before_answering<'a, R: AsRef<Record>>(records: &'a [R], msg_id: &str) -> Vec<&'a R> {
    let Some(at) = records
        .iter()
        .rposition(|r| r.as_ref().role == Role::User && r.as_ref().msg_id == msg_id)
    else {
        return records.iter().collect();
    };
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| *i <= at || r.as_ref().role == Role::Assistant)
        .map(|(_, r)| r)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn rec(role: Role, id: &str) -> Record {
        Record {
            ts: Utc.with_ymd_and_hms(2026, 12, 5, 9, 0, 0).unwrap(),
            role,
            text: id.into(),
            msg_id: id.into(),
            channel: "telegram".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        }
    }

    fn log(ids: &[&str]) -> Vec<Record> {
        ids.iter()
            .map(|id| match answered_by(id) {
                Some(_) => rec(Role::Assistant, id),
                None => rec(Role::User, id),
            })
            .collect()
    }

    fn ids(records: Vec<&Record>) -> Vec<&str> {
        records.into_iter().map(|r| r.msg_id.as_str()).collect()
    }

    #[test]
    fn questions_queued_behind_an_answer_are_pending_in_order() {
        let records = log(&["1", "2", "3", "re-1"]);
        assert_eq!(first_pending(&records), Some(1));
        assert_eq!(ids(pending(&records)), ["2", "3"]);
    }

    #[test]
    fn an_answer_settles_every_question_stored_before_it() {
        // "1" got no record of its own (an old log), but "2" was answered after it.
        let records = log(&["1", "2", "re-2", "3"]);
        assert_eq!(ids(pending(&records)), ["3"]);
        assert!(is_settled(&records, "1"));
        assert!(is_settled(&records, "2"));
        assert!(!is_settled(&records, "3"));
    }

    #[test]
    fn a_log_whose_questions_are_all_answered_has_none_pending() {
        let records = log(&["1", "re-1", "2", "re-2"]);
        assert_eq!(first_pending(&records), None);
        assert!(pending(&records).is_empty());
    }

    #[test]
    fn with_no_answer_in_the_log_every_question_is_pending() {
        let records = log(&["1", "2"]);
        assert_eq!(ids(pending(&records)), ["1", "2"]);
        assert!(!is_settled(&records, "9"), "a question not in the log is not settled");
    }

    #[test]
    fn a_turn_sees_earlier_answers_but_not_later_questions() {
        let records = log(&["1", "2", "3", "re-1"]);
        assert_eq!(ids(before_answering(&records, "2")), ["1", "2", "re-1"]);
        assert_eq!(ids(before_answering(&records, "9")), ["1", "2", "3", "re-1"]);
    }
}
