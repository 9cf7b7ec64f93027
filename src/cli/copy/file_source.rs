//! The state folder as a copy's source: one user's memory read from the
//! files and assembled as the database keeps it (archive batches oldest
//! first, then the log, each record once; profile and summary bodies; fact
//! log, versions, topic notes, daily and weekly summaries, tokens spent),
//! and a channel's shared notes.
//!
//! Reads only, through the sessions crate; safe while a bot runs on the
//! folder (the module doc of [`super`] says why). What it skipped is
//! counted, never hidden.

use super::note_name;
use anyhow::Result;
pub(super) use mnemo_sessions::store::files::whole::WholeRead as FileRead;
use mnemo_sessions::store::files::whole::{self, WholeRead};
use mnemo_sessions::{Layout, SafeName, fsutil, topics};

/// A user's memory read from files, and what reading it skipped; a file
/// in their summaries folders mnemo does not write is said on stderr.
pub(super) fn read_files(layout: &Layout, user: &SafeName) -> Result<WholeRead> {
    let read = whole::read(layout, user)?;
    for path in &read.not_ours {
        eprintln!("  {}: not a summary mnemo writes, not copied", path.display());
    }
    Ok(read)
}

/// The operator's shared notes of a channel's folder, `(name, whole
/// file)`, NUL as the database keeps it.
pub(super) fn read_shared_files(layout: &Layout) -> Result<Vec<(String, String)>> {
    let mut notes = Vec::new();
    for note in topics::list_shared(layout)? {
        let slug = note_name(&note.slug)?;
        if let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &layout.shared_topic_path(&slug))? {
            notes.push((slug.as_str().to_string(), mnemo_pg::pg_text(&text).into_owned()));
        }
    }
    Ok(notes)
}
