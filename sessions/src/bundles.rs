//! Export bundles on disk: the name a bundle of `/session export` gets,
//! `<user>.<YYYYMMDDTHHMMSSZ>.tar.gz` in `Layout::exports_dir()`, and so
//! whose each file there is. [`crate::export`] writes bundles by this
//! name; [`crate::report`] counts them as the user's data.
//!
//! It only names and lists files; it never writes, and it knows nothing of
//! what a bundle holds.

use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use std::path::PathBuf;

/// The bundle's suffix. A [`SafeName`] never contains `.`, so the owner of a
/// bundle is everything before the first `.` — unambiguous even for users
/// whose names share a prefix.
const SUFFIX: &str = ".tar.gz";

/// The bundle's file name for `user` at `now`.
pub fn file_name(user: &SafeName, now: DateTime<Utc>) -> String {
    format!("{user}.{}{SUFFIX}", now.format("%Y%m%dT%H%M%SZ"))
}

/// The user a bundle file name belongs to, if it is one.
pub fn owner_of(file_name: &str) -> Option<SafeName> {
    let (owner, rest) = file_name.split_once('.')?;
    if !rest.ends_with(SUFFIX.trim_start_matches('.')) || file_name.starts_with(fsutil::TEMP_PREFIX) {
        return None;
    }
    SafeName::from_encoded(owner)
}

/// The user's existing bundles, sorted.
pub fn user_exports(layout: &Layout, user: &SafeName) -> Result<Vec<PathBuf>, FileError> {
    let dir = layout.exports_dir();
    let mut out = Vec::new();
    for entry in fsutil::list_dir(&dir, &dir)? {
        let ours = entry
            .file_name()
            .to_str()
            .and_then(owner_of)
            .is_some_and(|o| &o == user);
        if ours && entry.file_type().map_err(FileError::with("list", &dir))?.is_file() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_names_identify_their_owner_even_with_shared_prefixes() {
        let now = DateTime::parse_from_rfc3339("2026-03-01T10:20:30Z")
            .unwrap()
            .with_timezone(&Utc);
        let a = SafeName::of("a");
        let ab = SafeName::of("a-b");
        assert_eq!(file_name(&ab, now), "a-b.20260301T102030Z.tar.gz");
        assert_eq!(owner_of(&file_name(&a, now)), Some(a));
        assert_eq!(owner_of(&file_name(&ab, now)), Some(ab));
        assert_eq!(owner_of("a.txt"), None);
        assert_eq!(owner_of(".tmp-a.2026.tar.gz"), None);
    }
}
