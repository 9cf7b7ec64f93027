//! The fact log's file, `ltm/facts/<user>.jsonl`: entries appended in one
//! write (on a new line after a torn one) and synced, the one rewrite when a
//! fact is forgotten, and a whole log put in place by `mnemo store copy`.
//!
//! It writes what [`super::changes`] decided and decides nothing itself.
//! Files only, through [`crate::fsutil`]; the caller holds the user's lock.

use super::changes::{Changes, same_key};
use super::{FactEntry, FactError, LiveFact};
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Replaces the user's log with `entries` in one atomic write (as another
/// store holds them: `mnemo store copy`); no entries, no file.
pub fn put_all(layout: &Layout, user: &SafeName, entries: &[FactEntry]) -> Result<(), FactError> {
    let path = layout.facts_path(user);
    if entries.is_empty() {
        fsutil::remove_if_exists(layout.state_root(), &path)?;
        return Ok(());
    }
    let mut bytes = Vec::new();
    for entry in entries {
        serde_json::to_writer(&mut bytes, entry).map_err(|e| FileError::new("write", &path, io::Error::other(e)))?;
        bytes.push(b'\n');
    }
    fsutil::replace(layout.state_root(), &path, &bytes)?;
    Ok(())
}

/// Appends `entries` in one write (after a `\n` if a crash tore the last
/// line), then syncs the data.
fn append(layout: &Layout, user: &SafeName, entries: &[FactEntry]) -> Result<(), FactError> {
    if entries.is_empty() {
        return Ok(());
    }
    let path = layout.facts_path(user);
    let write_err = FileError::with("append to", &path);
    let mut bytes = Vec::new();
    for entry in entries {
        serde_json::to_writer(&mut bytes, entry)
            .map_err(|e| FileError::new("append to", &path, io::Error::other(e)))?;
        bytes.push(b'\n');
    }
    let mut file = fsutil::open_append_nofollow(layout.state_root(), &path).map_err(write_err)?;
    let write_err = |e| FileError::new("append to", &path, e);
    if ends_torn(&mut file).map_err(write_err)? {
        bytes.insert(0, b'\n');
    }
    file.write_all(&bytes).map_err(write_err)?;
    file.sync_data().map_err(write_err)?;
    Ok(())
}

/// Applies `changes`: an append, or — when a fact is forgotten — one atomic
/// rewrite without any entry of it (lines that do not parse are kept as
/// they are), the new entries at the end.
pub(super) fn apply(layout: &Layout, user: &SafeName, changes: &Changes) -> Result<usize, FactError> {
    if changes.forget.is_empty() {
        append(layout, user, &changes.append)?;
        return Ok(changes.append.len());
    }
    let path = layout.facts_path(user);
    let root = layout.state_root();
    let bytes = fsutil::read_if_exists(root, &path)?.unwrap_or_default();
    let forgotten = |line: &[u8]| {
        serde_json::from_slice::<FactEntry>(line)
            .is_ok_and(|e| changes.forget.iter().any(|f| same_key(f, &LiveFact::of(&e))))
    };
    let mut out = Vec::with_capacity(bytes.len());
    for line in bytes.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) || forgotten(line) {
            continue;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    for entry in &changes.append {
        serde_json::to_writer(&mut out, entry).map_err(|e| FileError::new("write", &path, io::Error::other(e)))?;
        out.push(b'\n');
    }
    fsutil::replace(root, &path, &out)?;
    Ok(changes.append.len() + changes.forget.len())
}

fn ends_torn(file: &mut std::fs::File) -> io::Result<bool> {
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}
