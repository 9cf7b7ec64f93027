//! The everyday file operations in the shape callers want — "read it, or
//! `None` if there is none", "list the folder, empty if it is missing",
//! "remove it if it is there" — written once, failing with a
//! [`FileError`] that names the path. Links below `root` are refused as
//! by the primitives they wrap.
//!
//! A caller that owns no state root (the broker's own log folder, an
//! operator's folder) passes the folder itself as `root`: nothing below it
//! is then checked for links, and only the final open refuses one.

use super::{FileError, atomic_write, read_dir_nofollow, read_nofollow, remove_nofollow};
use std::fs::DirEntry;
use std::io;
use std::path::Path;

/// The whole file; `None` when it (or its folder) does not exist.
pub fn read_if_exists(root: &Path, path: &Path) -> Result<Option<Vec<u8>>, FileError> {
    match read_nofollow(root, path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::new("read", path, e)),
    }
}

/// The whole file as UTF-8; `None` when it does not exist. Text that is
/// not UTF-8 is an error (`InvalidData`) naming the file.
pub fn read_string_if_exists(root: &Path, path: &Path) -> Result<Option<String>, FileError> {
    let Some(bytes) = read_if_exists(root, path)? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| FileError::new("read", path, io::Error::new(io::ErrorKind::InvalidData, e)))
}

/// The entries of `dir`, sorted by name; a folder that does not exist is
/// empty. A link at `dir` or above it (below `root`) is refused.
pub fn list_dir(root: &Path, dir: &Path) -> Result<Vec<DirEntry>, FileError> {
    let entries = match read_dir_nofollow(root, dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::new("list", dir, e)),
    };
    let mut out = entries
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| FileError::new("list", dir, e))?;
    out.sort_by_key(DirEntry::file_name);
    Ok(out)
}

/// Removes a file or a whole folder; `false` when there was none.
pub fn remove_if_exists(root: &Path, path: &Path) -> Result<bool, FileError> {
    match remove_nofollow(root, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(FileError::new("delete", path, e)),
    }
}

/// [`atomic_write`], failing with the path.
pub fn replace(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    atomic_write(root, path, bytes).map_err(|e| FileError::new("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_missing_file_or_folder_is_none_empty_or_false() {
        let root = tempfile::tempdir().unwrap();
        let gone = root.path().join("a/b");
        assert!(read_if_exists(root.path(), &gone).unwrap().is_none());
        assert!(read_string_if_exists(root.path(), &gone).unwrap().is_none());
        assert!(list_dir(root.path(), &gone).unwrap().is_empty());
        assert!(!remove_if_exists(root.path(), &gone).unwrap());
    }

    #[test]
    fn listing_is_sorted_by_name() {
        let root = tempfile::tempdir().unwrap();
        for name in ["c", "a", "b"] {
            fs::write(root.path().join(name), "").unwrap();
        }
        let names: Vec<_> = list_dir(root.path(), root.path())
            .unwrap()
            .iter()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn errors_name_the_path_and_the_operation() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f");
        fs::write(&file, [0xff, 0xfe]).unwrap();
        let e = read_string_if_exists(root.path(), &file).unwrap_err();
        assert_eq!((e.op, e.path.as_path()), ("read", file.as_path()));
        let e = list_dir(root.path(), &file).unwrap_err();
        assert_eq!((e.op, e.path.as_path()), ("list", file.as_path()));
        assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        assert!(remove_if_exists(root.path(), &file).unwrap());
        assert!(!file.exists());
    }
}
