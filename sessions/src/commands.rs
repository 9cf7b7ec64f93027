//! The `/session` commands (DESIGN §5), answered without a model call:
//! [`parse`] turns chat text into a [`SessionCommand`]; [`execute`] carries
//! it out for one caller on the memory seam ([`UserMemory`], whatever
//! store is below it) and returns the reply (and, for `export`, the
//! bundle's path). Parsing and every reply are written here once.
//!
//! Every action reaches only the caller's own data: the [`UserMemory`] is
//! the caller's, and nothing in the command text names a user, a channel
//! or a path; a topic name passes [`crate::topics::parse_slug`] before any
//! file is touched. Replies are short and never name a file path or
//! another user; the details of a failure go to the log.

mod clear;
pub use clear::NO_GROUP_MEMORY;
pub mod documents;
pub mod memory;
pub mod parse;
pub mod remind;
mod search;
pub use search::NO_WORDS;
mod status;
pub use status::ago;

pub use parse::{SessionCommand, parse};

use crate::export;
use crate::names::SafeName;
use crate::report;
use crate::store::{StoreError, UserMemory};
use chrono::{DateTime, Utc};
use std::path::PathBuf;

/// Who is asking: the caller's encoded id and, if the platform gave one,
/// the name they go by (used only to address them in the reply).
#[derive(Clone, Copy, Debug)]
pub struct Caller<'a> {
    pub user: &'a SafeName,
    pub display_name: Option<&'a str>,
    /// The channel's `ltm.maxProfileChars`: `/session remember` keeps the
    /// profile under it like compaction does.
    pub max_profile_chars: usize,
    /// Where the command was sent, for reminders; `None` outside a chat
    /// (an operator acting for a user), where reminders cannot be set.
    pub here: Option<Here<'a>>,
}

/// The chat a command came from and what reminders there need.
#[derive(Clone, Copy, Debug)]
pub struct Here<'a> {
    /// Where a reminder set by this command is posted.
    pub place: &'a crate::reminders::Place,
    /// The app's `timezone`, for users who set none.
    pub timezone: chrono_tz::Tz,
    /// `reminders.maxPerUser`.
    pub max_reminders: usize,
}

/// What to send back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    /// For `export`: the bundle, to attach where the platform allows, else
    /// to hand to the operator.
    pub export: Option<PathBuf>,
    /// For `remind`: a reminder was set (for the broker's counts).
    pub set_reminder: bool,
}

impl Reply {
    fn text(text: impl Into<String>) -> Self {
        Reply {
            text: text.into(),
            export: None,
            set_reminder: false,
        }
    }
}

/// What a user is told when a command failed on the storage side (the
/// details go to the log only).
pub const STORAGE_PROBLEM: &str =
    "Sorry, that did not work because of a storage problem on my side. The operator can see the details in the log.";

/// `link` and `unlink` where nothing can link accounts.
pub const NO_LINKS_HERE: &str = "Linking accounts is not available here.";

/// The help text (also the reply to an unknown action).
pub const HELP: &str = "Memory commands — they only ever touch your own data:\n\
/session status — your message count, summary age, long-term entries and storage\n\
/session clear — forget our recent conversation and its summary (long-term notes stay)\n\
/session clear all — say what would go, then `/session clear all confirm` deletes everything I store about you\n\
/session profile — show what I remember about you long-term\n\
/session remember <text> — add a note to your long-term memory\n\
/session forget <fact or topic> — forget a fact (by its key, or by words after you confirm) or a topic note\n\
/session history [topic] — the last changes to your long-term memory, by date and by whom\n\
/session undo — take back the last change to your long-term memory\n\
/session export — everything I store about you, as one archive file\n\
/session search <words> — find what you told me before, with its date\n\
/session documents — the documents you sent me that I keep; `/session forget <id>` forgets one\n\
/session remind <when> <text> — I message you then, here (when: +10m, +2h, +3d or 2026-12-24T09:00:00+01:00)\n\
/session reminders — your reminders; `/session reminders cancel <id>` cancels one\n\
/session timezone [zone] — your timezone for reminders (an IANA name like Europe/Lisbon)\n\
/session clear group — in a group with its own memory: delete it (the group's admins only)\n\
/session link [code] — one memory for your accounts on several platforms: get a code here, send `/session link CODE` from the other\n\
/session unlink <platform> — that platform's account gets its own memory again\n\
/session help — this list";

/// Carries out `command` for `caller` on `memory` (the caller's) at `now`.
/// Failures become a short apology (and a warning in the log with the
/// details); use [`try_execute`] to get the error instead.
pub async fn execute(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    command: &SessionCommand,
    now: DateTime<Utc>,
) -> Reply {
    match try_execute(memory, caller, command, now).await {
        Ok(reply) => reply,
        Err(e) => {
            tracing::warn!(user = %caller.user.log_id(), command = ?command, error = %e, "session command failed");
            Reply::text(STORAGE_PROBLEM)
        }
    }
}

/// [`execute`], returning a storage failure instead of an apology (an
/// argument refused is answered, not an error).
pub async fn try_execute(
    memory: &mut dyn UserMemory,
    caller: Caller<'_>,
    command: &SessionCommand,
    now: DateTime<Utc>,
) -> Result<Reply, StoreError> {
    Ok(match command {
        SessionCommand::Status => Reply::text(status::status(memory, caller, now).await?),
        SessionCommand::Profile => Reply::text(status::profile(memory).await?),
        SessionCommand::Clear => Reply::text(clear::clear(memory).await?),
        SessionCommand::ClearAll => Reply::text(clear::clear_all_preview(memory).await?),
        SessionCommand::ClearAllConfirmed => Reply::text(clear::clear_all(memory).await?),
        SessionCommand::ClearGroup => Reply::text(clear::clear_group(memory).await?),
        SessionCommand::Forget { topic } => Reply::text(memory::forget(memory, caller, topic, now).await?),
        SessionCommand::ForgetConfirmed { words } => {
            Reply::text(memory::forget_confirmed(memory, caller, words, now).await?)
        }
        SessionCommand::Remember { text } => Reply::text(memory::remember(memory, caller, text, now).await?),
        SessionCommand::History { topic } => {
            Reply::text(memory::history_text(memory.history().await?, topic.as_deref()))
        }
        SessionCommand::Undo => Reply::text(memory::undone(
            memory.undo(crate::versions::Author::Command, now).await?.as_ref(),
        )),
        SessionCommand::Export => exported(memory.export(now).await?),
        SessionCommand::Search { words } => Reply::text(search::search(memory, words).await?),
        SessionCommand::Remind { when, text } => {
            let (text, set) = remind::remind(memory, caller, when, text, now).await?;
            Reply {
                set_reminder: set,
                ..Reply::text(text)
            }
        }
        SessionCommand::Reminders => Reply::text(remind::list(memory, caller).await?),
        SessionCommand::Documents => Reply::text(documents::list(memory).await?),
        SessionCommand::CancelReminder { id } => Reply::text(remind::cancel(memory, id).await?),
        SessionCommand::Timezone { zone } => Reply::text(remind::timezone(memory, caller, zone.as_deref()).await?),
        // The broker answers these (it knows the platforms and links); a
        // caller without links (a test, an operator tool) cannot.
        SessionCommand::Link { .. } | SessionCommand::Unlink { .. } => Reply::text(NO_LINKS_HERE),
        SessionCommand::Help => Reply::text(HELP),
        // The action is not echoed: on some platforms a word like
        // `@everyone` would ping people when sent back.
        SessionCommand::Unknown { .. } => Reply::text(format!("I don't know that /session command.\n\n{HELP}")),
    })
}

/// The reply to `/session export` once `bundle` is written: what it holds,
/// and the file to hand over.
pub fn exported(bundle: export::Export) -> Reply {
    let text = if bundle.files.is_empty() {
        "I store nothing about you right now; the archive only holds a README.".to_string()
    } else {
        format!(
            "I packed everything I store about you into one archive: {} file{}, {}.",
            bundle.files.len(),
            if bundle.files.len() == 1 { "" } else { "s" },
            report::human_bytes(bundle.bytes)
        )
    };
    Reply {
        text,
        export: Some(bundle.path),
        set_reminder: false,
    }
}
