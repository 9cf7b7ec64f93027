//! `/session status` and `/session profile`: read-only views of the
//! caller's own memory. They count and show only the caller's memory —
//! never a channel-wide number — and change nothing.

use super::Caller;
use crate::store::{StoreError, UserMemory};
use chrono::{DateTime, TimeDelta, Utc};

pub(super) async fn status(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    now: DateTime<Utc>,
) -> Result<String, StoreError> {
    let status = memory.status().await?;
    let summary_line = match status.summary_at {
        Some(at) => format!("rolling summary updated {}", ago(now - at)),
        None => "no rolling summary yet".to_string(),
    };
    let entries = match status.profile_entries {
        Some(n) => format!("{n} profile entr{}", if n == 1 { "y" } else { "ies" }),
        None => "an unreadable profile".to_string(),
    };
    let who = caller
        .display_name
        .map(|n| format!(" for {}", one_line(n)))
        .unwrap_or_default();
    let heading = if caller.user.is_group() {
        "This group's shared memory".to_string()
    } else {
        format!("Your memory here{who}")
    };
    let mut text = format!(
        "{heading}:\n\
         • {} message{} in short-term memory, {} archived\n\
         • {summary_line}\n\
         • long-term: {entries}, {} topic note{}",
        status.stm_messages,
        plural(status.stm_messages),
        status.archived_messages,
        status.topic_notes,
        plural(status.topic_notes),
    );
    let zone = match &status.timezone {
        Some(own) => own.clone(),
        None => format!(
            "{} (the bot's; set yours with /session timezone)",
            caller.here.map_or(chrono_tz::UTC, |h| h.timezone).name()
        ),
    };
    text.push_str(&format!(
        "\n• {} reminder{} waiting; timezone {zone}",
        status.reminders,
        plural(status.reminders)
    ));
    if status.documents > 0 {
        text.push_str(&format!(
            "\n• {} document{} (see /session documents)",
            status.documents,
            plural(status.documents)
        ));
    }
    if status.kept_files > 0 {
        text.push_str(&format!(
            "\n• {} file{} you sent, kept as {} (see /session documents)",
            status.kept_files,
            plural(status.kept_files),
            if status.kept_files == 1 { "it was" } else { "they were" }
        ));
    }
    if let Some((bytes, files)) = status.storage {
        text.push_str(&format!(
            "\n• storage: {} in {files} file{}",
            crate::report::human_bytes(bytes),
            plural(usize::try_from(files).unwrap_or(usize::MAX)),
        ));
    }
    Ok(text)
}

pub(super) async fn profile(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let body = memory.profile().await?;
    let topics = memory.topic_slugs().await?;
    let mut text = match body.map(|b| b.trim().to_string()).filter(|b| !b.is_empty()) {
        Some(body) => format!("What I remember about you:\n\n{body}"),
        None => "I have no long-term profile for you yet.".to_string(),
    };
    if !topics.is_empty() {
        text.push_str(&format!("\n\nYour topic notes: {}", topics.join(", ")));
    }
    Ok(text)
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
