//! Daily and weekly summaries ("digests"): which ones a run has to ask the
//! summarizer for, and the files they become —
//! `summaries/<user>/daily/YYYY-MM-DD.md` from one local day's messages (log
//! and archive), `summaries/<user>/weekly/YYYY-Www.md` from that ISO week's
//! dailies. Each file has YAML frontmatter (user, period, time zone,
//! generated, message count) rendered by [`crate::frontmatter`], so values
//! are escaped.
//!
//! A digest file that exists is never rewritten by a digest and never costs a
//! model call; a period without messages (or without dailies) costs none
//! either. This module never calls the summarizer and never decides the
//! schedule: [`super`] does.

use super::schedule::{WeekId, local_day, local_day_bounds};
use crate::archive::{self, ArchiveError};
use crate::frontmatter::{self, FrontmatterError};
use crate::fsutil::FileError;
use crate::layout::Layout;
use crate::names::SafeName;
use crate::record::Record;
use crate::stm::{Stm, StmError};
use crate::summarizer::SummaryKind;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Frontmatter of a daily or weekly summary file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DigestMeta {
    /// The user's raw id (or its encoded name if it was too long to keep).
    pub user: String,
    /// `2026-03-01` for a day, `2026-W09` for an ISO week.
    pub period: String,
    /// The IANA zone the local day was cut in.
    pub timezone: String,
    pub generated: DateTime<Utc>,
    /// Messages summarized (for a week: the sum over its dailies).
    pub messages: usize,
    /// Set when the file is not a summarizer digest, e.g.
    /// `expired-stm-summary` for a rolling summary kept at STM expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A day or an ISO week.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Period {
    Day(NaiveDate),
    Week(WeekId),
}

impl Period {
    /// The period a digest of kind `kind` (`daily`, `weekly`) is named by
    /// `label` (`2026-03-01`, `2026-W09`: a file's stem, a database row's
    /// period); `None` for anything else.
    pub fn parse(kind: &str, label: &str) -> Option<Period> {
        match kind {
            "daily" => NaiveDate::parse_from_str(label, "%Y-%m-%d").ok().map(Period::Day),
            "weekly" => WeekId::parse(label).map(Period::Week),
            _ => None,
        }
    }

    /// Noon (UTC) of the day, or of the week's Monday: when recall dates a
    /// digest's pieces.
    pub fn noon(self) -> Option<DateTime<Utc>> {
        let day = match self {
            Period::Day(day) => day,
            Period::Week(week) => week.monday()?,
        };
        Some(day.and_hms_opt(12, 0, 0)?.and_utc())
    }

    /// `daily` or `weekly`, as used in the state file's failure keys.
    pub fn kind_name(self) -> &'static str {
        match self {
            Period::Day(_) => "daily",
            Period::Week(_) => "weekly",
        }
    }

    pub fn label(self) -> String {
        match self {
            Period::Day(day) => day.format("%Y-%m-%d").to_string(),
            Period::Week(week) => week.to_string(),
        }
    }

    pub fn summary_kind(self) -> SummaryKind {
        match self {
            Period::Day(day) => SummaryKind::Daily { day },
            Period::Week(w) => SummaryKind::Weekly {
                iso_year: w.iso_year,
                iso_week: w.iso_week,
            },
        }
    }

    pub fn path(self, layout: &Layout, user: &SafeName) -> PathBuf {
        match self {
            Period::Day(day) => layout.daily_path(user, day),
            Period::Week(w) => layout.weekly_path(user, w.iso_year, w.iso_week),
        }
    }
}

/// One summary to ask for: everything the summarizer needs, owned, so the
/// request can run on its own task.
#[derive(Clone, Debug)]
pub struct DigestJob {
    pub user: SafeName,
    pub period: Period,
    pub path: PathBuf,
    /// For a daily: the day's messages, oldest first. Empty for a weekly.
    pub messages: Vec<Record>,
    /// For a weekly: the bodies of the week's dailies, Monday first.
    pub notes: Vec<String>,
    /// The count written to the frontmatter.
    pub message_count: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
    #[error(transparent)]
    File(#[from] FileError),
}

/// The user's messages with `from <= ts < to`, from the short-term log and
/// the archive, oldest first. The log is read before the archive, so a
/// batch compaction moves between the two reads is seen twice (and
/// de-duplicated), never missed.
pub fn user_records(
    stm: &Stm,
    user: &SafeName,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Record>, DigestError> {
    let mut records: Vec<Record> = stm
        .read_all(user)?
        .records
        .into_iter()
        .filter(|r| from <= r.ts && r.ts < to)
        .collect();
    records.extend(archive::read_between(stm.layout(), user, from, to)?);
    records.sort_by(|a, b| (a.ts, &a.msg_id, &a.text).cmp(&(b.ts, &b.msg_id, &b.text)));
    records.dedup();
    Ok(records)
}

/// The daily jobs for `days` (ascending) for every user in `users`: one per
/// user and day that had messages and has no daily file yet. Each user's
/// messages are read once for the whole span and cut into local days.
pub fn daily_jobs(
    stm: &Stm,
    tz: Tz,
    days: &[NaiveDate],
    users: &[SafeName],
) -> (Vec<DigestJob>, Vec<(SafeName, DigestError)>) {
    let (mut jobs, mut errors) = (Vec::new(), Vec::new());
    let (Some(first), Some(last)) = (days.first(), days.last()) else {
        return (jobs, errors);
    };
    let (from, _) = local_day_bounds(tz, *first);
    let (_, to) = local_day_bounds(tz, *last);
    for user in users {
        let missing: Vec<NaiveDate> = days
            .iter()
            .copied()
            .filter(|d| !stm.layout().daily_path(user, *d).exists())
            .collect();
        if missing.is_empty() {
            continue;
        }
        let records = match user_records(stm, user, from, to) {
            Ok(records) => records,
            Err(e) => {
                errors.push((user.clone(), e));
                continue;
            }
        };
        let mut by_day: BTreeMap<NaiveDate, Vec<Record>> = BTreeMap::new();
        for record in records {
            by_day.entry(local_day(tz, record.ts)).or_default().push(record);
        }
        for day in missing {
            if let Some(messages) = by_day.remove(&day) {
                let period = Period::Day(day);
                jobs.push(DigestJob {
                    user: user.clone(),
                    period,
                    path: period.path(stm.layout(), user),
                    message_count: messages.len(),
                    messages,
                    notes: Vec::new(),
                });
            }
        }
    }
    jobs.sort_by(|a, b| (a.period, &a.user).cmp(&(b.period, &b.user)));
    (jobs, errors)
}

/// The weekly job of `user` for `week`: `None` when the weekly exists or
/// the week has no dailies.
pub fn weekly_job(layout: &Layout, user: &SafeName, week: WeekId) -> Result<Option<DigestJob>, DigestError> {
    let period = Period::Week(week);
    let path = period.path(layout, user);
    if path.exists() {
        return Ok(None);
    }
    let mut dailies = Vec::new();
    for day in week.days() {
        if let Some((meta, body)) = read_digest(layout.state_root(), &layout.daily_path(user, day))? {
            dailies.push((day, meta.map_or(0, |m| m.messages), body));
        }
    }
    Ok(weekly_from_dailies(user, week, path, dailies))
}

/// The weekly job made of the week's dailies (day, messages, body; Monday
/// first): each under a heading naming its day. `None` without dailies.
/// Both stores build their weekly jobs with it.
pub fn weekly_from_dailies(
    user: &SafeName,
    week: WeekId,
    path: PathBuf,
    dailies: Vec<(NaiveDate, usize, String)>,
) -> Option<DigestJob> {
    if dailies.is_empty() {
        return None;
    }
    let message_count = dailies.iter().map(|(_, n, _)| n).sum();
    let notes = dailies
        .into_iter()
        .map(|(day, _, body)| format!("## {}\n\n{}", day.format("%A %Y-%m-%d"), body.trim()))
        .collect();
    Some(DigestJob {
        user: user.clone(),
        period: Period::Week(week),
        path,
        messages: Vec::new(),
        notes,
        message_count,
    })
}

/// A digest file's frontmatter and body; `None` if it does not exist. A file
/// whose frontmatter does not parse (edited by hand) still yields its whole
/// text as the body, so a weekly never silently loses a day.
pub fn read_digest(root: &Path, path: &Path) -> Result<Option<(Option<DigestMeta>, String)>, DigestError> {
    let Some(text) = crate::fsutil::read_string_if_exists(root, path)? else {
        return Ok(None);
    };
    Ok(Some(match frontmatter::parse::<DigestMeta>(path, &text) {
        Ok(doc) => (Some(doc.meta), doc.body),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "summary frontmatter unreadable; using the whole file");
            (None, text)
        }
    }))
}

impl DigestMeta {
    /// The frontmatter of a digest of `user` for `period`, generated `now`.
    pub fn new(user: &SafeName, period: Period, tz: Tz, generated: DateTime<Utc>, messages: usize) -> Self {
        DigestMeta {
            user: user.decode().unwrap_or_else(|| user.to_string()),
            period: period.label(),
            timezone: tz.name().to_string(),
            generated,
            messages,
            source: None,
        }
    }
}

/// The file text of a digest: frontmatter, then the trimmed body.
pub fn render(path: &Path, meta: &DigestMeta, body: &str) -> Result<String, DigestError> {
    let mut body = body.trim().to_string();
    body.push('\n');
    Ok(frontmatter::render(path, meta, &body)?)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;

    #[test]
    fn digest_frontmatter_escapes_hostile_values_and_reads_back() {
        let path = Path::new("/s/summaries/x/daily/2026-03-01.md");
        let user = SafeName::of("evil\n---\nuser: \"root\"");
        let generated = DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let meta = DigestMeta::new(&user, Period::Day(day), chrono_tz::Europe::Berlin, generated, 4);
        let text = render(path, &meta, "Body.").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.md");
        std::fs::write(&file, &text).unwrap();
        let (meta, body) = read_digest(dir.path(), &file).unwrap().unwrap();
        let meta = meta.unwrap();
        assert_eq!(meta.user, "evil\n---\nuser: \"root\"");
        assert_eq!(
            (meta.period.as_str(), meta.messages, meta.timezone.as_str()),
            ("2026-03-01", 4, "Europe/Berlin")
        );
        assert_eq!(body, "Body.\n");
    }

    #[test]
    fn a_hand_edited_daily_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.md");
        std::fs::write(&file, "just notes, no frontmatter\n").unwrap();
        let (meta, body) = read_digest(dir.path(), &file).unwrap().unwrap();
        assert!(meta.is_none());
        assert_eq!(body, "just notes, no frontmatter\n");
        assert!(
            read_digest(dir.path(), &dir.path().join("missing.md"))
                .unwrap()
                .is_none()
        );
    }
}
