//! The database side of `mnemo store copy`: one user's memory as the
//! Postgres store keeps it ([`UserMemory`]: messages in order, the
//! archived ones grouped into folds, the summary and profile bodies, the
//! fact log, the versions, the topic notes, the daily and weekly
//! summaries, the reminders and timezone, the documents and kept files,
//! the tokens spent),
//! written in **one transaction per user** ([`write_user`]) and read back
//! in one snapshot ([`read_user`]), with the [`Tally`] (counts and a
//! SHA-256 over ts, role, text and msg id of every message, in order) that
//! both sides of a copy are compared by.
//!
//! Invariants:
//! - A user is written whole or not at all: the messages, the fold rows,
//!   the user row (summary, profile, counters) commit together, after the
//!   rows were read back inside the same transaction and their tally found
//!   equal to the source's (a mismatch rolls everything back). A copy
//!   interrupted anywhere (Ctrl-C, a crash, the database going away)
//!   leaves each user either fully copied or absent, so running it again
//!   finishes the job without duplicating anything.
//! - A user already in the database is never merged into: the same memory
//!   is [`Written::AlreadyThere`] (a re-run), different memory is
//!   [`CopyError::Differs`] unless the caller asked to replace it (then it
//!   is deleted and written again, in the same transaction).
//! - The write holds the user's turn and fold locks (transaction-scoped
//!   advisory locks on the keys a broker uses), so a broker serving the
//!   same database sees the user before or after the copy, never half.
//! - Text is stored as the store always does ([`crate::pg_text`]: NUL as
//!   U+2400), and timestamps to the microsecond (the database's
//!   precision); the tally is computed over those forms on both sides.
//!
//! Here: what a user's memory is and how two are compared. Reading it back
//! is in [`read`], writing it in [`write`], the list of users and channels
//! a copy walks in [`census`].

mod census;
mod read;
mod write;

pub use census::{shared_channels, usage_channels, users};
pub use read::{read_channel_usage, read_shared, read_user};
pub use write::{write_channel_usage, write_shared, write_user};
pub(crate) use {read::read_in, write::write_in};

use crate::PgError;
pub use mnemo_sessions::whole::{Fold, Tally, Whole as UserMemory, sort_usage};

/// Why a user could not be copied. Names the user, never a message's text.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error(
        "user {channel}/{user} is already in the database with different memory ({have}; the copy has {want}): \
         not merged; pass --replace to overwrite it with the copy"
    )]
    Differs {
        channel: String,
        user: String,
        have: Tally,
        want: Tally,
    },
    #[error(
        "verification failed for user {channel}/{user}: the source has {source_tally}, the database read back {target}; nothing of this user was committed"
    )]
    Mismatch {
        channel: String,
        user: String,
        source_tally: Tally,
        target: Tally,
    },
    #[error(
        "verification failed for the shared note {slug:?} of channel {channel}: nothing of the channel's shared notes was committed"
    )]
    SharedMismatch { channel: String, slug: String },
    #[error(
        "verification failed for the token usage of {channel}/{user}: the database read back other rows; nothing of this user was committed"
    )]
    UsageMismatch { channel: String, user: String },
}

impl From<tokio_postgres::Error> for CopyError {
    fn from(e: tokio_postgres::Error) -> Self {
        CopyError::Pg(PgError::Db(e))
    }
}

/// What [`write_user`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Written (the user was absent).
    Copied(Tally),
    /// The user was there with different memory, and was replaced.
    Replaced(Tally),
    /// The user was there with this very memory (a copy run again): nothing
    /// written.
    AlreadyThere(Tally),
}

impl Written {
    pub fn tally(&self) -> &Tally {
        match self {
            Written::Copied(t) | Written::Replaced(t) | Written::AlreadyThere(t) => t,
        }
    }
}
