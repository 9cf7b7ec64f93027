//! Questions stored but not yet settled: the rule both stores and the
//! broker's recovery share (issue 42: a message is stored on intake,
//! before its user's queue, so a crash can leave questions in the log that
//! nobody answered).
//!
//! A question is *settled* once a record answers it: the model's answer,
//! or the short notice the user was shown instead (the model failed, or
//! the question was given up as stale). That record's `msgId` is
//! [`reply_id`] of the question's, and it is stored after the question.
//! Each question is settled by its own record only: with several brokers a
//! later question can be answered by one while an earlier one waits for
//! another that died, and it must still be answered.
//!
//! A message a group's shared memory keeps without answering it (`observe:
//! true` in `access.json`, the bot not addressed) is stored with the `msgId`
//! [`observed_id`] of the platform's: it is context, never a question, so
//! nothing waits for its answer and no restart answers it.
//!
//! Pure functions over records: no files, no clock.

use crate::record::{Record, Role};
use std::collections::HashSet;

/// The `msgId` of the record that answers the question `msg_id`.
pub fn reply_id(msg_id: &str) -> String {
    format!("re-{msg_id}")
}

/// The `msgId` a message kept as a group's context only (observed, not
/// answered) is stored under; never pending.
pub fn observed_id(msg_id: &str) -> String {
    format!("{OBSERVED}{msg_id}")
}

/// Whether `record` is a question: a user's message that was not only
/// observed ([`observed_id`]).
pub fn is_question(record: &Record) -> bool {
    record.role == Role::User && !record.msg_id.starts_with(OBSERVED)
}

const OBSERVED: &str = "seen-";

/// The question `msg_id` answered by a record with this id, if it is one.
pub fn answered_by(reply_msg_id: &str) -> Option<&str> {
    reply_msg_id.strip_prefix("re-")
}

/// The questions of `records` (a user's log from some point on, oldest
/// first) that no record of `records` settles, oldest first.
pub fn pending<R: AsRef<Record>>(records: &[R]) -> Vec<&Record> {
    let answered: HashSet<&str> = records
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| r.role == Role::Assistant)
        .filter_map(|r| answered_by(&r.msg_id))
        .collect();
    records
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| is_question(r) && !answered.contains(r.msg_id.as_str()))
        .collect()
}

/// Whether a record of `records` settles the question `msg_id`.
pub fn is_settled<R: AsRef<Record>>(records: impl IntoIterator<Item = R>, msg_id: &str) -> bool {
    let reply = reply_id(msg_id);
    records
        .into_iter()
        .any(|r| r.as_ref().role == Role::Assistant && r.as_ref().msg_id == reply)
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
        assert_eq!(ids(pending(&records)), ["2", "3"]);
        assert!(is_settled(&records, "1"));
        assert!(!is_settled(&records, "2"));
    }

    #[test]
    fn an_observed_message_is_context_never_a_question() {
        let seen = observed_id("2");
        let records = log(&["1", &seen, "3", "re-1"]);
        assert_eq!(ids(pending(&records)), ["3"]);
        assert!(!is_question(&records[1]) && is_question(&records[2]));
    }

    #[test]
    fn a_question_is_settled_by_its_own_answer_only() {
        // "1" waited for a broker that died while another answered "2".
        let records = log(&["1", "2", "re-2", "3"]);
        assert_eq!(ids(pending(&records)), ["1", "3"]);
        assert!(!is_settled(&records, "1"));
        assert!(is_settled(&records, "2"));
    }

    #[test]
    fn a_log_whose_questions_are_all_answered_has_none_pending() {
        let records = log(&["1", "re-1", "2", "re-2"]);
        assert!(pending(&records).is_empty());
        assert!(!is_settled(&records, "9"), "a question not in the log is not settled");
    }

    #[test]
    fn a_turn_sees_earlier_answers_but_not_later_questions() {
        let records = log(&["1", "2", "3", "re-1"]);
        assert_eq!(ids(before_answering(&records, "2")), ["1", "2", "re-1"]);
        assert_eq!(ids(before_answering(&records, "9")), ["1", "2", "3", "re-1"]);
    }
}
