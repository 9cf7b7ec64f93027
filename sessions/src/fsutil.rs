//! Crash-safe file replacement, shared by every module that rewrites a file.
//!
//! A replaced file is written to a temp name unique to this write (process
//! id, a process-wide counter and the nanosecond clock), fsynced, renamed
//! over the target, and the folder is fsynced, so a reader sees the old file
//! or the new one, never half of either, and two writers never share a temp.
//! [`FileStamp`] tells a reader cheaply whether a file changed since it read
//! it (every such replacement gives a new inode).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Prefix of every temp file, so maintenance can recognise and clean leftovers
/// of a crash.
pub const TEMP_PREFIX: &str = ".tmp-";

/// A temp path next to `target`, unique to this call.
pub fn unique_temp_path(target: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let file = target.file_name().and_then(|f| f.to_str()).unwrap_or("file");
    let name = format!("{TEMP_PREFIX}{file}-{}-{n}-{nanos}", std::process::id());
    target.with_file_name(name)
}

/// Writes `bytes` to `target` atomically (see the module doc), creating the
/// parent folder if needed. `mode` sets Unix permissions on the new file
/// (e.g. `0o600` for access.json); `None` keeps the umask default.
pub fn atomic_write(target: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let parent = target
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "target has no parent folder"))?;
    fs::create_dir_all(parent)?;
    let tmp = unique_temp_path(target);
    let result = (|| {
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        if let Some(mode) = mode {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(mode);
        }
        let mut file = opts.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, target)?;
        sync_dir(parent)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// fsyncs a folder so a rename or a new file in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b.md");
        atomic_write(&target, b"one", None).unwrap();
        atomic_write(&target, b"two", Some(0o600)).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn temp_names_are_unique_per_call() {
        let t = Path::new("/x/summary.md");
        assert_ne!(unique_temp_path(t), unique_temp_path(t));
    }
}

/// Which file (device, inode), how long, and when last modified: a rename
/// over it (every atomic rewrite), a truncation, an append or an edit in
/// place all change it. One `stat` to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }

    /// The file at `path` now; `None` when there is none.
    pub fn at(path: &Path) -> io::Result<Option<FileStamp>> {
        match fs::metadata(path) {
            Ok(meta) => Ok(Some(FileStamp::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}
