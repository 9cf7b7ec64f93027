//! `/session export`: one `.tar.gz` of everything stored about one user, in
//! `Layout::exports_dir()`, named `<user>.<YYYYMMDDTHHMMSSZ>.tar.gz`, with
//! paths inside relative to the sessions folder and a README.txt that says
//! what each file is.
//!
//! It reads only the caller's own files (the roots from
//! [`crate::report::user_roots`]) and writes only the one bundle, named as
//! [`crate::bundles`] says. It takes no
//! lock itself: the command layer holds the user's lock while exporting so
//! the bundle is one consistent snapshot.

use crate::bundles;
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::report::{self, ReportError};
use chrono::{DateTime, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io;
use std::path::{Path, PathBuf};

/// The README's name inside the bundle.
pub const README: &str = "README.txt";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    List(#[from] ReportError),
    #[error(transparent)]
    File(#[from] FileError),
}

/// What an export produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The bundle, inside `Layout::exports_dir()`.
    pub path: PathBuf,
    /// The user's files it holds, relative to the sessions folder (the
    /// README not counted).
    pub files: Vec<PathBuf>,
    /// Size of the bundle.
    pub bytes: u64,
}

/// Writes the bundle of everything stored about `user` (earlier bundles
/// excepted) and returns where it is. `extra` are generated files to add,
/// e.g. the user's entries of the shared index, as (path inside the
/// bundle, bytes). The bundle is readable by the bot's account only (0600).
pub fn export_user(
    layout: &Layout,
    user: &SafeName,
    now: DateTime<Utc>,
    extra: &[(PathBuf, Vec<u8>)],
) -> Result<Export, ExportError> {
    let mut files = Vec::new();
    for root in report::user_roots(layout, user)? {
        if root.starts_with(layout.exports_dir()) {
            continue;
        }
        for (path, _) in report::files_under(&root)? {
            if is_temp(&path) {
                continue;
            }
            if let Ok(relative) = path.strip_prefix(layout.root()) {
                files.push((path.clone(), relative.to_path_buf()));
            }
        }
    }

    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    let mtime = u64::try_from(now.timestamp()).unwrap_or(0);
    let readme = readme(
        user,
        now,
        files
            .iter()
            .map(|(_, r)| r.as_path())
            .chain(extra.iter().map(|(p, _)| p.as_path())),
    );
    let target = layout.export_path(&bundles::file_name(user, now));
    let write_err = |source| FileError::new("write", &target, source);
    append(&mut tar, Path::new(README), readme.as_bytes(), mtime).map_err(write_err)?;
    for (path, relative) in &files {
        let bytes = fsutil::read_nofollow(layout.state_root(), path).map_err(FileError::with("read", path))?;
        append(&mut tar, relative, &bytes, mtime).map_err(write_err)?;
    }
    for (relative, bytes) in extra {
        append(&mut tar, relative, bytes, mtime).map_err(write_err)?;
    }
    let bundle = tar.into_inner().and_then(GzEncoder::finish).map_err(write_err)?;
    fsutil::atomic_write(layout.state_root(), &target, &bundle).map_err(write_err)?;
    Ok(Export {
        path: target,
        files: files
            .into_iter()
            .map(|(_, r)| r)
            .chain(extra.iter().map(|(p, _)| p.clone()))
            .collect(),
        bytes: bundle.len() as u64,
    })
}

fn is_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(fsutil::TEMP_PREFIX))
}

fn append<W: io::Write>(tar: &mut tar::Builder<W>, path: &Path, bytes: &[u8], mtime: u64) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(mtime);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, bytes)
}

/// What each kind of file in the bundle is, in plain words.
fn describe(relative: &Path) -> &'static str {
    let text = relative.to_string_lossy();
    let parts: Vec<&str> = text.split('/').collect();
    match parts.as_slice() {
        ["stm", _, "messages.jsonl"] => "your recent messages and the bot's replies, one JSON record per line",
        ["stm", _, "summary.md"] => "the rolling summary of your older conversation",
        ["stm", _, "malformed.jsonl"] => "lines of your message log that could not be read, kept as they were",
        ["stm", ..] => "short-term memory",
        ["ltm", "users", _] => "your long-term profile: preferences and facts the bot remembers",
        ["ltm", "facts", _] => {
            "the dated log of facts the bot learned about you: when each was said, what it replaced, one JSON record per line"
        }
        ["ltm", "topics", ..] => "one of your topic notes",
        ["summaries", _, "daily", _] => "the summary of one day's conversation",
        ["summaries", _, "weekly", _] => "the summary of one ISO week, made from the daily summaries",
        ["archive", ..] => "older messages that left short-term memory (gzip-compressed JSON lines)",
        _ => "other data stored about you",
    }
}

fn readme<'a>(user: &SafeName, now: DateTime<Utc>, files: impl Iterator<Item = &'a Path>) -> String {
    let who = user.decode().unwrap_or_else(|| user.to_string());
    let mut text = format!(
        "Everything mnemo stores about user {who}, exported {}.\n\
         Paths are relative to the channel's sessions folder.\n\n",
        now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    let mut any = false;
    for path in files {
        any = true;
        text.push_str(&format!("{}\n    {}\n", path.display(), describe(path)));
    }
    if !any {
        text.push_str("Nothing is stored about you.\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_describes_every_file() {
        let now = DateTime::parse_from_rfc3339("2026-03-01T10:20:30Z")
            .unwrap()
            .with_timezone(&Utc);
        let files = [
            Path::new("stm/U1/messages.jsonl"),
            Path::new("summaries/U1/daily/2026-03-01.md"),
        ];
        let text = readme(&SafeName::of("U1"), now, files.into_iter());
        assert!(
            text.contains("stm/U1/messages.jsonl\n    your recent messages"),
            "{text}"
        );
        assert!(text.contains("one day's conversation"), "{text}");
    }
}
