//! mnemo's memory library. It owns everything on disk under
//! `<state>/channels/<channel>/sessions/` (DESIGN §3): the short-term log,
//! the rolling summary, long-term notes, daily and weekly summaries, the
//! archive, and the maintenance that keeps them bounded.
//!
//! It never touches the network and knows no platform: the model reaches it
//! only through the [`summarizer::Summarizer`] trait, and time only through
//! explicit `now` parameters, so every rule is testable at any date.

#![forbid(unsafe_code)]

// Foundation: names, paths, records, crash-safe writes.
mod blocking;
pub mod fsutil;
pub mod layout;
pub mod names;
pub mod record;
mod stable_key;

// Short-term memory and the operator config that bounds it.
pub mod archive;
pub mod config;
pub mod context;
pub mod locks;
pub mod pending;
pub mod people;
pub mod session;
pub mod stm;
pub mod store;

// Summaries and long-term memory.
pub mod compaction;
pub mod documents;
pub mod edits;
pub mod facts;
pub mod frontmatter;
pub mod kept;
pub mod pieces;
pub mod profile;
pub mod recall;
pub mod reminders;
pub mod summarizer;
pub mod summary;
pub mod topics;
pub mod usage;
pub mod versions;
pub mod whole;

// Maintenance and the user-facing `/session` commands.
pub mod bundles;
pub mod commands;
pub mod export;
pub mod maintenance;
pub mod report;

pub use layout::Layout;
pub use names::SafeName;
pub use record::{Record, Role};
