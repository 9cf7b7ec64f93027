//! The `/session` commands (DESIGN §5), answered without a model call:
//! [`parse`] turns chat text into a [`SessionCommand`]; [`execute`] carries
//! it out for one caller in one channel and returns the reply (and, for
//! `export`, the bundle's path).
//!
//! Every action reaches only the caller's own data: paths come from
//! [`crate::layout::Layout`] for the caller's [`SafeName`] and from
//! [`crate::report::user_roots`], never from the command text; a topic name
//! passes [`crate::topics::parse_slug`] before any file is touched. Writes
//! happen under the caller's lock. Replies are short and never name a file
//! path or another user; the details of a failure go to the log.

mod clear;
pub mod memory;
pub mod parse;
mod search;
mod status;
pub use status::ago;

pub use parse::{SessionCommand, parse};

use crate::export::{self, ExportError};
use crate::names::SafeName;
use crate::report::{self, ReportError};
use crate::stm::{Stm, StmError};
use crate::topics::TopicError;
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
}

/// What to send back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    /// For `export`: the bundle, to attach where the platform allows, else
    /// to hand to the operator.
    pub export: Option<PathBuf>,
}

impl Reply {
    fn text(text: impl Into<String>) -> Self {
        Reply {
            text: text.into(),
            export: None,
        }
    }
}

/// Why a command could not be carried out. Shown to the operator (log),
/// not to the user: see [`CommandError::user_message`].
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Stm(#[from] StmError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Topic(#[from] TopicError),
    #[error(transparent)]
    Recall(#[from] crate::recall::RecallError),
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    #[error(transparent)]
    Version(#[from] crate::versions::VersionError),
    #[error(transparent)]
    File(#[from] crate::fsutil::FileError),
}

/// What a user is told when a command failed on the storage side (the
/// details go to the log only).
pub const STORAGE_PROBLEM: &str =
    "Sorry, that did not work because of a storage problem on my side. The operator can see the details in the log.";

impl CommandError {
    /// A short reply for the user: what failed, without paths or internals.
    pub fn user_message(&self) -> String {
        STORAGE_PROBLEM.to_string()
    }
}

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
/session help — this list";

/// Carries out `command` for `caller` in the channel of `stm` at `now`.
/// Failures become a short apology (and a warning in the log with the
/// details); use [`try_execute`] to get the error instead.
pub async fn execute(stm: &Stm, caller: Caller<'_>, command: &SessionCommand, now: DateTime<Utc>) -> Reply {
    match try_execute(stm, caller, command, now).await {
        Ok(reply) => reply,
        Err(e) => {
            tracing::warn!(channel = %stm.layout().channel(), user = %caller.user, command = ?command, error = %e, "session command failed");
            Reply::text(e.user_message())
        }
    }
}

/// [`execute`], returning the error instead of an apology.
pub async fn try_execute(
    stm: &Stm,
    caller: Caller<'_>,
    command: &SessionCommand,
    now: DateTime<Utc>,
) -> Result<Reply, CommandError> {
    let user = caller.user;
    Ok(match command {
        SessionCommand::Status => Reply::text(status::status(stm, caller, now)?),
        SessionCommand::Profile => Reply::text(status::profile(stm.layout(), user)?),
        SessionCommand::Clear => Reply::text(clear::clear(stm, user).await?),
        SessionCommand::ClearAll => Reply::text(clear::clear_all_preview(stm, user)?),
        SessionCommand::ClearAllConfirmed => Reply::text(clear::clear_all(stm, user).await?),
        SessionCommand::Forget { topic } => Reply::text(memory::forget(stm, caller, topic, now).await?),
        SessionCommand::ForgetConfirmed { words } => {
            Reply::text(memory::forget_confirmed(stm, caller, words, now).await?)
        }
        SessionCommand::Remember { text } => Reply::text(memory::remember(stm, caller, text, now).await?),
        SessionCommand::History { topic } => Reply::text(memory::history(stm, caller, topic.as_deref()).await?),
        SessionCommand::Undo => Reply::text(memory::undo(stm, caller, now).await?),
        SessionCommand::Export => export_reply(stm, user, now).await?,
        SessionCommand::Search { words } => Reply::text(search::search(stm, user, words).await),
        SessionCommand::Help => Reply::text(HELP),
        // The action is not echoed: on some platforms a word like
        // `@everyone` would ping people when sent back.
        SessionCommand::Unknown { .. } => Reply::text(format!("I don't know that /session command.\n\n{HELP}")),
    })
}

/// Bundles the caller's files under their lock, so the bundle is one
/// consistent snapshot. The recall index is derived from these files and
/// not bundled.
async fn export_reply(stm: &Stm, user: &SafeName, now: DateTime<Utc>) -> Result<Reply, CommandError> {
    let layout = stm.layout();
    let _guard = stm.lock(user).await;
    let bundle = export::export_user(layout, user, now, &[])?;
    Ok(exported(bundle))
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
    }
}
