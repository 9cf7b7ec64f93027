//! `/session status` and `/session profile`: read-only views of the
//! caller's own memory. They count and show only files under the caller's
//! own paths — never a channel-wide number — and change nothing.

use super::{Caller, CommandError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::profile;
use crate::report;
use crate::stm::Stm;
use crate::summarizer::FactSection;
use crate::summary;
use crate::topics;
use chrono::{DateTime, TimeDelta, Utc};

pub(super) fn status(stm: &Stm, caller: Caller<'_>, now: DateTime<Utc>) -> Result<String, CommandError> {
    let layout = stm.layout();
    let user = caller.user;
    let storage = report::user_storage(stm, user)?;
    let summary_line = match summary_time(layout, user) {
        Some(at) => format!("rolling summary updated {}", ago(now - at)),
        None => "no rolling summary yet".to_string(),
    };
    let profile_entries = match profile::read(layout, user) {
        Ok(Some(p)) => [
            FactSection::Preferences,
            FactSection::Facts,
            FactSection::Topics,
            FactSection::Notes,
        ]
        .into_iter()
        .map(|s| profile::bullets(&p, s).len())
        .sum::<usize>()
        .to_string(),
        Ok(None) => "0".to_string(),
        Err(e) => {
            tracing::warn!(user = %user, error = %e, "profile unreadable for status");
            "an unreadable".to_string()
        }
    };
    let topic_notes = topics::list(layout, user)?.len();
    let who = caller
        .display_name
        .map(|n| format!(" for {}", one_line(n)))
        .unwrap_or_default();
    Ok(format!(
        "Your memory here{who}:\n\
         • {} message{} in short-term memory, {} archived\n\
         • {summary_line}\n\
         • long-term: {profile_entries} profile entr{}, {topic_notes} topic note{}\n\
         • storage: {} in {} file{}",
        storage.stm_messages,
        plural(storage.stm_messages),
        storage.archived_messages,
        if profile_entries == "1" { "y" } else { "ies" },
        plural(topic_notes),
        report::human_bytes(storage.bytes),
        storage.files,
        plural(storage.files as usize),
    ))
}

pub(super) fn profile(layout: &Layout, user: &SafeName) -> Result<String, CommandError> {
    let body = profile::read_body(layout, user)?;
    let topics: Vec<String> = topics::list(layout, user)?.into_iter().map(|t| t.slug).collect();
    let mut text = match body {
        Some(body) => format!("What I remember about you:\n\n{body}"),
        None => "I have no long-term profile for you yet.".to_string(),
    };
    if !topics.is_empty() {
        text.push_str(&format!("\n\nYour topic notes: {}", topics.join(", ")));
    }
    Ok(text)
}

/// When the rolling summary last changed: its `last_compacted`, else the
/// file's modification time.
fn summary_time(layout: &Layout, user: &SafeName) -> Option<DateTime<Utc>> {
    match summary::read(layout, user) {
        Ok(Some(doc)) => doc.meta.last_compacted.or_else(|| {
            std::fs::metadata(layout.summary_path(user))
                .and_then(|m| m.modified())
                .ok()
                .map(DateTime::<Utc>::from)
        }),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(user = %user, error = %e, "rolling summary unreadable for status");
            None
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn one_line(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(60).collect()
}

/// `just now`, `5 minutes ago`, `3 hours ago`, `2 days ago`.
pub fn ago(age: TimeDelta) -> String {
    let (n, unit) = if age < TimeDelta::minutes(1) {
        return "just now".to_string();
    } else if age < TimeDelta::hours(1) {
        (age.num_minutes(), "minute")
    } else if age < TimeDelta::days(1) {
        (age.num_hours(), "hour")
    } else {
        (age.num_days(), "day")
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_people_say_them() {
        assert_eq!(ago(TimeDelta::seconds(-5)), "just now");
        assert_eq!(ago(TimeDelta::seconds(59)), "just now");
        assert_eq!(ago(TimeDelta::minutes(1)), "1 minute ago");
        assert_eq!(ago(TimeDelta::minutes(150)), "2 hours ago");
        assert_eq!(ago(TimeDelta::days(3)), "3 days ago");
    }
}
