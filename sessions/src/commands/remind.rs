//! `/session remind`, `/session reminders [cancel <id>]` and `/session
//! timezone`, and [`set`]: the one way a reminder is made, shared by the
//! command and the model's `reminder_set` tool, so both check the same
//! things and say the same refusals.

use super::{Caller, Here};
use crate::reminders::{self, Place, Reminder, Repeat, State, check_text, parse_when, parse_zone};
use crate::store::{StoreError, UserMemory};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Said where a reminder cannot be set (no chat to post it to).
const NOT_HERE: &str = "Reminders can only be set in a chat with me.";

/// Why a reminder was not set: a sentence for the user (or the model).
#[derive(Debug)]
pub enum Refused {
    Said(String),
    Store(StoreError),
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Refused {
        match e {
            StoreError::Invalid(reason) => Refused::Said(reason.to_string()),
            other => Refused::Store(other),
        }
    }
}

/// The user's zone: their own, else the app's.
pub async fn zone_of(memory: &mut dyn UserMemory, default: Tz) -> Result<Tz, StoreError> {
    Ok(memory
        .timezone()
        .await?
        .as_deref()
        .and_then(parse_zone)
        .unwrap_or(default))
}

/// Sets a reminder of `text` at `when` (relative or RFC 3339), repeating
/// by the cron rule `repeat` if given, to be posted at `here`.
pub async fn set(
    memory: &mut dyn UserMemory,
    here: Here<'_>,
    when: &str,
    text: &str,
    repeat: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Reminder, Refused> {
    if here.max_reminders == 0 {
        return Err(Refused::Said("Reminders are turned off on this bot.".to_string()));
    }
    let text = check_text(text).map_err(|e| Refused::Said(e.to_string()))?;
    let at = parse_when(when, now).map_err(|e| Refused::Said(e.to_string()))?;
    let zone = zone_of(memory, here.timezone).await?;
    if let Some(rule) = repeat {
        Repeat::checked(rule, zone.name(), now).map_err(|e| Refused::Said(e.to_string()))?;
    }
    let reminder = Reminder {
        id: reminders::new_id(),
        text: text.to_string(),
        at,
        due: at,
        repeat: repeat.map(|r| r.split_whitespace().collect::<Vec<_>>().join(" ")),
        timezone: zone.name().to_string(),
        place: here.place.clone(),
        created: now,
        state: State::Active,
        claimed_at: None,
        attempts: 0,
        missed: None,
    };
    memory.add_reminder(&reminder, here.max_reminders).await?;
    Ok(reminder)
}

/// `Sat 6 Dec 2026 09:00` in `zone`.
pub fn local_time(at: DateTime<Utc>, zone: Tz) -> String {
    at.with_timezone(&zone).format("%a %-d %b %Y %H:%M").to_string()
}

/// What a user is told when a reminder is set.
pub fn confirmation(r: &Reminder) -> String {
    let zone = parse_zone(&r.timezone).unwrap_or(chrono_tz::UTC);
    let repeat = r
        .repeat
        .as_deref()
        .map(|rule| format!(", then by `{rule}`"))
        .unwrap_or_default();
    format!(
        "I'll remind you on {} ({}){repeat}: {}\n(id {}; `/session reminders cancel {}` cancels it)",
        local_time(r.at, zone),
        zone.name(),
        r.text,
        r.id,
        r.id
    )
}

/// `/session remind`: the reply, and whether a reminder was set.
pub(super) async fn remind(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    when: &str,
    text: &str,
    now: DateTime<Utc>,
) -> Result<(String, bool), StoreError> {
    let Some(here) = caller.here else {
        return Ok((NOT_HERE.to_string(), false));
    };
    if when.is_empty() {
        let how = "Say when and what: `/session remind +10m call the bank` or `/session remind 2026-12-24T09:00:00+01:00 buy a tree`.";
        return Ok((how.to_string(), false));
    }
    match set(memory, here, when, text, None, now).await {
        Ok(reminder) => Ok((confirmation(&reminder), true)),
        Err(Refused::Said(reason)) => Ok((reason, false)),
        Err(Refused::Store(e)) => Err(e),
    }
}

pub(super) async fn list(memory: &mut dyn UserMemory, caller: Caller<'_>) -> Result<String, StoreError> {
    let default = caller.here.map_or(chrono_tz::UTC, |h| h.timezone);
    let zone = zone_of(memory, default).await?;
    let waiting = memory.reminders().await?;
    if waiting.is_empty() {
        return Ok("You have no reminders. Set one with `/session remind +10m <text>`.".to_string());
    }
    let mut text = format!("Your reminders ({}):", zone.name());
    for r in &waiting {
        let repeat = r
            .repeat
            .as_deref()
            .map(|rule| format!(", repeats `{rule}`"))
            .unwrap_or_default();
        text.push_str(&format!(
            "\n• {} — {}{repeat} — {}",
            r.id,
            local_time(r.at, zone),
            r.text
        ));
    }
    text.push_str("\nCancel one with `/session reminders cancel <id>`.");
    Ok(text)
}

pub(super) async fn cancel(memory: &mut dyn UserMemory, id: &str) -> Result<String, StoreError> {
    Ok(if memory.cancel_reminder(id).await? {
        format!("Reminder {id} is cancelled.")
    } else {
        "You have no waiting reminder with that id (see /session reminders).".to_string()
    })
}

pub(super) async fn timezone(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    zone: Option<&str>,
) -> Result<String, StoreError> {
    let default = caller.here.map_or(chrono_tz::UTC, |h| h.timezone);
    let Some(zone) = zone else {
        return Ok(match memory.timezone().await? {
            Some(own) => format!("Your timezone is {own}."),
            None => format!(
                "You have not set a timezone; I use {} (set yours with `/session timezone Europe/Lisbon`).",
                default.name()
            ),
        });
    };
    let Some(tz) = parse_zone(zone) else {
        return Ok("I don't know that time zone; use an IANA name like Europe/Lisbon or America/New_York.".to_string());
    };
    memory.set_timezone(tz.name()).await?;
    Ok(format!(
        "Your timezone is now {}. Reminders you set from now on, and repeating ones' days and hours, follow it.",
        tz.name()
    ))
}

/// What a user is told, in the chat a reminder was set, of times missed.
pub fn missed_notice(missed: &[Reminder]) -> Option<String> {
    if missed.is_empty() {
        return None;
    }
    let mut text = String::from("While I was offline I missed reminders I should have sent here:");
    for r in missed {
        let zone = parse_zone(&r.timezone).unwrap_or(chrono_tz::UTC);
        text.push_str(&format!("\n• {}: {}", local_time(r.at, zone), r.text));
    }
    Some(text)
}

/// The place of a reminder as the chat gives it.
pub fn place(chat_id: &str, thread_id: Option<&str>, group: bool) -> Place {
    Place {
        chat_id: chat_id.to_string(),
        thread_id: thread_id.map(str::to_string),
        group,
        platform: None,
    }
}
