//! The context given to every model call (DESIGN §4): base system prompt,
//! the user's profile, the rolling summary, then the recent messages, within
//! a token budget. Everything cut is cut visibly and logged.
//!
//! Pure: the caller reads the files; this module only assembles text.
//! (The builder is being written; the output types below are the contract
//! the model backends code against.)

use crate::record::Role;

/// One prior turn, as chat APIs want it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub role: Role,
    pub content: String,
}

/// The assembled context. The message being answered is not in here: it is
/// sent once, as the user turn, by the model backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Context {
    /// System prompt + profile + rolling summary (+ cut markers).
    pub system: String,
    /// Recent messages, oldest first, alternating as they happened.
    pub turns: Vec<Turn>,
}
