//! [`FileError`]: the one error of a file operation, carrying the path
//! (ripgrep's `WithPath` idea). Every error enum in the workspace that
//! meets the disk wraps it in one variant instead of spelling out its own
//! read / write / io variants, so every file error reads the same way:
//! what was done, to which file, why it failed and what to check.
//!
//! It names the operation and the path only — never a file's contents or
//! a message's text.

use std::io;
use std::path::{Path, PathBuf};

/// A file operation that failed: which (`op`, a verb such as `"read"`,
/// `"list"`, `"write"`, `"delete"`), on which `path`, and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}: {source}{}", path.display(), hint(op, source))]
pub struct FileError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl FileError {
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> FileError {
        FileError {
            op,
            path: path.into(),
            source,
        }
    }

    /// For `map_err`: turns an `io::Error` of `op` on `path` into a
    /// `FileError`, which `?` turns into any error enum that wraps one.
    pub fn with<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> FileError + 'p {
        move |source| FileError::new(op, path, source)
    }

    /// Whether the file (or a folder on its way) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }

    /// Whether a symbolic link was refused (see [`super::LinkRefused`]).
    pub fn is_link_refused(&self) -> bool {
        super::LinkRefused::is(&self.source)
    }
}

/// What the operator should check, by the kind of operation; a refused
/// link already says what to do, and a file that does not parse needs
/// fixing, not permissions.
fn hint(op: &str, source: &io::Error) -> &'static str {
    if super::LinkRefused::is(source) {
        return "";
    }
    match (op, source.kind()) {
        (_, io::ErrorKind::InvalidData) => "; the file is damaged: fix or remove it",
        ("read" | "list" | "open" | "inspect", _) => "; check the file's and its folder's permissions",
        ("lock", _) => "; check the folder's permissions (another mnemo may be holding it)",
        _ => "; check free space and the folder's permissions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_operation_the_path_and_what_to_check() {
        let e = FileError::new(
            "read",
            "/state/stm/u/messages.jsonl",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        let text = e.to_string();
        assert!(text.starts_with("cannot read /state/stm/u/messages.jsonl: "), "{text}");
        assert!(
            text.ends_with("check the file's and its folder's permissions"),
            "{text}"
        );
        let e = FileError::new("write", "/state/x.md", io::Error::other("disk full"));
        assert_eq!(
            e.to_string(),
            "cannot write /state/x.md: disk full; check free space and the folder's permissions"
        );
    }

    #[test]
    fn a_refused_link_keeps_its_own_advice() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("u")).unwrap();
        let e = super::super::list_dir(root.path(), &root.path().join("u")).unwrap_err();
        assert!(e.is_link_refused(), "{e}");
        assert!(e.to_string().contains("never follows links"), "{e}");
        assert!(!e.to_string().contains("permissions"), "{e}");
    }
}
