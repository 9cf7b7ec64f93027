//! The deterministic summary used when the summarizer keeps failing: one
//! clipped bullet per folded message under a heading that says it is a
//! fallback, appended to the previous summary, the whole capped so repeated
//! fallbacks cannot grow it without bound.
//!
//! Pure text; it never calls a model or touches a file.

use crate::profile::{cap_bullet_lines, clipped_line};
use crate::record::{Record, Role};
use chrono::{DateTime, Utc};

/// Characters of one message kept in its bullet.
pub(crate) const BULLET_CHARS: usize = 200;

/// Longest summary body a fallback may leave, in characters; the oldest
/// bullets go first, counted in a visible marker line.
pub(crate) const MAX_SUMMARY_CHARS: usize = 8_000;

/// Heading line of every fallback section; the summarizer sees it in the
/// previous summary and can tell raw bullets from prose.
pub(crate) const HEADING: &str = "### Fallback summary (the summarizer was unavailable; clipped messages)";

/// `previous` followed by a fallback section for `batch`.
pub(crate) fn summarize(previous: &str, batch: &[Record], now: DateTime<Utc>) -> String {
    let mut body = previous.trim_end().to_string();
    if !body.is_empty() {
        body.push_str("\n\n");
    }
    body.push_str(HEADING);
    body.push_str(&format!(
        "\n_{} messages, folded {}_\n",
        batch.len(),
        now.format("%Y-%m-%d %H:%M UTC")
    ));
    for record in batch {
        let who = match record.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        body.push_str(&format!(
            "- {} {who}: {}\n",
            record.ts.format("%Y-%m-%d %H:%M"),
            clip(&record.text)
        ));
    }
    cap_bullet_lines(&body, MAX_SUMMARY_CHARS)
}

/// One line of at most [`BULLET_CHARS`] characters, with `…[+N chars]` when cut.
fn clip(text: &str) -> String {
    clipped_line(text, BULLET_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn rec(i: usize, text: &str) -> Record {
        Record {
            ts: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
            role: if i.is_multiple_of(2) {
                Role::User
            } else {
                Role::Assistant
            },
            text: text.into(),
            msg_id: i.to_string(),
            channel: "slack".into(),
            thread_id: None,
            chat_id: None,
            user_name: None,
        }
    }

    #[test]
    fn fallback_lists_each_message_clipped_and_says_it_is_a_fallback() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let batch = [rec(0, "hello\nthere"), rec(1, &"y".repeat(500))];
        let body = summarize("Earlier: they met.", &batch, now);
        assert!(body.starts_with("Earlier: they met.\n\n### Fallback summary"));
        assert!(body.contains("- 2026-03-01 09:00 user: hello there\n"));
        assert!(body.contains(&format!("assistant: {}…[+300 chars]\n", "y".repeat(200))));
        assert_eq!(summarize("Earlier: they met.", &batch, now), body, "deterministic");
    }

    #[test]
    fn repeated_fallbacks_stay_under_the_cap_and_count_what_they_dropped() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let batch: Vec<Record> = (0..40).map(|i| rec(i, &"z".repeat(150))).collect();
        let mut body = "Prose summary.".to_string();
        for _ in 0..10 {
            body = summarize(&body, &batch, now);
        }
        assert!(body.chars().count() <= MAX_SUMMARY_CHARS);
        assert!(body.starts_with("> mnemo: ") && body.contains("Prose summary."));
    }
}
