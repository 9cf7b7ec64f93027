//! Reading the time of a reminder: relative (`+90s`, `+10m`, `+2h`, `+3d`)
//! or an RFC 3339 time with its offset (`2026-12-06T09:00:00+01:00`), the
//! form the model is asked to give. Refusals are sentences for the user.

use super::MAX_AHEAD_DAYS;
use chrono::{DateTime, Duration, Utc};

/// Why a time was refused (said to the user as is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    #[error(
        "I can't read that time. Use a relative time like +10m, +2h or +3d, or a full date and time like 2026-12-06T09:00:00+01:00."
    )]
    Unreadable,
    #[error("That time has already passed.")]
    Past,
    #[error("That is too far ahead: reminders can be set up to 5 years from now.")]
    TooFar,
}

/// The instant `when` names, read at `now`; it must be after `now` and at
/// most [`MAX_AHEAD_DAYS`] ahead.
pub fn parse_when(when: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, WhenError> {
    let when = when.trim();
    let at = match when.strip_prefix('+') {
        Some(relative) => now + relative_span(relative)?,
        None => DateTime::parse_from_rfc3339(when)
            .map_err(|_| WhenError::Unreadable)?
            .with_timezone(&Utc),
    };
    if at <= now {
        return Err(WhenError::Past);
    }
    if at - now > Duration::days(MAX_AHEAD_DAYS) {
        return Err(WhenError::TooFar);
    }
    Ok(at)
}

/// `90s`, `10m`, `2h`, `3d`: a count and one unit.
fn relative_span(relative: &str) -> Result<Duration, WhenError> {
    let unit_at = relative.len().checked_sub(1).ok_or(WhenError::Unreadable)?;
    let (count, unit) = relative.split_at(unit_at);
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) || count.len() > 9 {
        return Err(WhenError::Unreadable);
    }
    let count: i64 = count.parse().map_err(|_| WhenError::Unreadable)?;
    let seconds = match unit {
        "s" => count,
        "m" => count * 60,
        "h" => count * 3600,
        "d" => count * 86_400,
        _ => return Err(WhenError::Unreadable),
    };
    // Far beyond the limit either way; keeps the addition in range.
    Ok(Duration::seconds(seconds.min(MAX_AHEAD_DAYS * 2 * 86_400)))
}
