//! The one place that touches files under the state folder on behalf of
//! every module: crash-safe replacement, appends, reads and deletes that
//! never follow a symbolic link, and creation that is private to the
//! running user whatever the umask. It decides nothing about content.
//!
//! **No links.** `root` is the folder mnemo owns (the state root): every
//! component of a path below it must be a real file or folder. A link
//! where mnemo expects its own file or folder is refused with
//! [`LinkRefused`] (as an `io::Error`, naming the path), never read,
//! written or deleted through. Files are opened beneath the root's
//! descriptor by `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
//! ([`open_beneath`]), so a folder swapped for a link between the `lstat`
//! walk and the open is refused by the kernel; where `openat2` is missing
//! (`ENOSYS`) the walk and `O_NOFOLLOW` on the last component remain, and
//! a link swapped in for a *parent* folder in between is then not caught.
//! A file is deleted by name in its folder opened the same way
//! ([`unlink_beneath`]); folder deletes and listings go by path after the
//! walk.
//!
//! **Private.** Folders are created 0700 and files 0600, set explicitly
//! after creation so a permissive umask cannot widen them.
//!
//! **Atomic.** A replaced file is written to a temp name unique to this
//! write (process id, a process-wide counter and the nanosecond clock),
//! fsynced, renamed over the target, and the folder is fsynced, so a reader
//! sees the old file or the new one, never half of either, and two writers
//! never share a temp.
//!
//! **Named.** [`FileError`] is the one error of a file operation: the
//! operation, the path and the cause. The primitives here return
//! `io::Result` for callers that look at the error's kind; [`ops`] wraps
//! the everyday shapes (read or `None`, list or empty, remove if there)
//! once, failing with a `FileError`.
//!
//! **Changed?** [`FileStamp`] tells a reader cheaply whether a file changed
//! since it read it (every such replacement gives a new inode); it never
//! follows a link either.
#![allow(
    clippy::disallowed_methods,
    reason = "walks the components of the paths Layout built"
)]

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

mod beneath;
mod error;
mod ops;

pub use beneath::{Access, open_beneath, unlink_beneath};
pub use error::FileError;
pub use ops::{list_dir, read_if_exists, read_string_if_exists, remove_if_exists, replace};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Prefix of every temp file, so maintenance can recognise and clean leftovers
/// of a crash.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Mode of every folder mnemo creates.
pub const PRIVATE_DIR: u32 = 0o700;
/// Mode of every file mnemo creates.
pub const PRIVATE_FILE: u32 = 0o600;

/// A symbolic link found where mnemo expects its own file or folder.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} is a symbolic link; mnemo never follows links inside its state folder (remove the link, or move the real folder there)",
    path.display()
)]
pub struct LinkRefused {
    pub path: PathBuf,
}

impl LinkRefused {
    /// Whether `e` is a refused link (for callers that skip rather than fail).
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<LinkRefused>())
    }
}

fn refused(path: &Path) -> io::Error {
    let error = LinkRefused {
        path: path.to_path_buf(),
    };
    tracing::error!(path = %path.display(), "symbolic link inside the state folder refused");
    io::Error::other(error)
}

/// Checks that no existing component of `path` below `root` is a symbolic
/// link (components that do not exist yet are fine). A path outside `root`
/// is refused: every path mnemo touches is built under it.
pub fn refuse_links(root: &Path, path: &Path) -> io::Result<()> {
    walk_below(root, path, |_| Ok(false))
}

/// Creates `dir` and its missing parents below `root`, each 0700; an
/// existing link on the way is refused.
pub fn create_private_dir_all(root: &Path, dir: &Path) -> io::Result<()> {
    if !root.exists() {
        make_private_dir(root)?;
    }
    walk_below(root, dir, |missing| make_private_dir(missing).map(|()| true))
}

/// Visits each component of `path` below `root` in order, refusing a link;
/// at a component that does not exist, `missing` decides whether to go on
/// (after creating it) or stop.
fn walk_below(root: &Path, path: &Path, mut missing: impl FnMut(&Path) -> io::Result<bool>) -> io::Result<()> {
    let below = path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not inside the state folder {}", path.display(), root.display()),
        )
    })?;
    let mut current = root.to_path_buf();
    for component in below.components() {
        current.push(component);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(refused(&current)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !missing(&current)? {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One folder (and, for the state root itself, its parents), 0700. A folder
/// another process made meanwhile is fine.
fn make_private_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().recursive(true).mode(PRIVATE_DIR).create(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(PRIVATE_DIR)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens `path` for appending (and reading), creating it 0600 and its
/// folders 0700; a link anywhere below `root` is refused.
pub fn open_append_nofollow(root: &Path, path: &Path) -> io::Result<File> {
    // The folders are walked once; the file itself is guarded by O_NOFOLLOW.
    if let Some(parent) = path.parent() {
        create_private_dir_all(root, parent)?;
    }
    open_private(root, path, Access::Append)
}

/// Opens `path` as `access` says, as a file of mnemo's: created 0600 (and
/// narrowed to it), never through a link (beneath `root`, or at `path`
/// itself where the kernel lacks `openat2`).
fn open_private(root: &Path, path: &Path, access: Access) -> io::Result<File> {
    let file = match open_beneath(root, path, access)? {
        Some(file) => file,
        None => {
            let mut options = OpenOptions::new();
            match access {
                Access::Read => options.read(true),
                Access::Append => options.read(true).append(true).create(true),
                Access::CreateNew => options.write(true).create_new(true),
            };
            options
                .mode(PRIVATE_FILE)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| link_or(e, path))?
        }
    };
    private_file(&file)?;
    Ok(file)
}

/// Narrows a file mnemo opened for writing to 0600 if it is wider (a file
/// from an older version, or a umask that let bits through).
fn private_file(file: &File) -> io::Result<()> {
    let mode = file.metadata()?.permissions().mode() & 0o777;
    if mode != PRIVATE_FILE {
        file.set_permissions(Permissions::from_mode(PRIVATE_FILE))?;
    }
    Ok(())
}

/// `O_NOFOLLOW` on a link fails with `ELOOP`: say what it was.
fn link_or(e: io::Error, path: &Path) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        refused(path)
    } else {
        e
    }
}

/// Opens `path` for reading; a link anywhere below `root` is refused.
pub fn open_nofollow(root: &Path, path: &Path) -> io::Result<File> {
    refuse_links(root, path)?;
    if let Some(file) = open_beneath(root, path, Access::Read)? {
        return Ok(file);
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| link_or(e, path))
}

/// `<path>.lock`, beside `path`: the file [`lock_beside`] locks.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".lock");
    path.with_file_name(name)
}

/// An exclusive advisory lock on [`lock_path`]`(path)` (made, mode 0600,
/// if missing; a link there is refused), waiting for another holder; held
/// until the file returned is dropped. It orders mnemo's own writers of
/// one small file (`access.json`, `people/links.json`) across processes.
pub fn lock_beside(path: &Path) -> io::Result<File> {
    let lock = lock_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(|e| link_or(e, &lock))?;
    file.lock()?;
    Ok(file)
}

/// The whole file; a link anywhere below `root` is refused.
pub fn read_nofollow(root: &Path, path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut open_nofollow(root, path)?, &mut bytes)?;
    Ok(bytes)
}

/// The whole file as UTF-8; a link anywhere below `root` is refused.
pub fn read_to_string_nofollow(root: &Path, path: &Path) -> io::Result<String> {
    String::from_utf8(read_nofollow(root, path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Deletes one file, or a whole folder (not following links inside it);
/// a link at `path` or above it (below `root`) is refused, not deleted.
pub fn remove_nofollow(root: &Path, path: &Path) -> io::Result<()> {
    refuse_links(root, path)?;
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        fs::remove_dir_all(path)
    } else if unlink_beneath(root, path)?.is_none() {
        fs::remove_file(path)
    } else {
        Ok(())
    }
}

/// The entries of a folder; a link at it or above it is refused.
pub fn read_dir_nofollow(root: &Path, dir: &Path) -> io::Result<fs::ReadDir> {
    refuse_links(root, dir)?;
    fs::read_dir(dir)
}

/// Creates a new file at `path` for writing (a temp file to be renamed into
/// place), 0600, with its folders 0700 below `root`; never an existing file,
/// never through a link.
pub fn create_new_private(root: &Path, path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        create_private_dir_all(root, parent)?;
    }
    create_new_file(root, path)
}

fn create_new_file(root: &Path, path: &Path) -> io::Result<File> {
    open_private(root, path, Access::CreateNew)
}

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

/// Writes `bytes` to `target` atomically (see the module doc) as a 0600
/// file, creating its folders 0700 below `root`; a link on the way is
/// refused (a link at `target` itself would only be replaced, but it is
/// refused too, so the operator hears of it).
pub fn atomic_write(root: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    let staged = stage(root, target, bytes)?;
    let parent = staged.parent().to_path_buf();
    staged.commit()?;
    sync_dir(&parent)
}

/// The first half of [`atomic_write`]: `bytes` written to a private temp
/// file next to `target` and fsynced, not yet renamed into place. More may
/// be appended before [`Staged::commit`]; dropped uncommitted, the temp
/// file is removed. Lets a caller do the slow part before taking a lock and
/// only the rename under it.
pub fn stage(root: &Path, target: &Path, bytes: &[u8]) -> io::Result<Staged> {
    let staged = stage_unsynced(root, target, bytes)?;
    staged.file.sync_all()?;
    Ok(staged)
}

/// [`atomic_write`] without its fsyncs: other processes see the old file or
/// the new one, never a mix, but a crash may leave either, or an empty or
/// partly written file. Only for derived data that is checked and rebuilt
/// whenever it is missing, torn or incomplete (the recall index of a user
/// with no archived history).
pub fn replace_unsynced(root: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    stage_unsynced(root, target, bytes)?.commit()
}

fn stage_unsynced(root: &Path, target: &Path, bytes: &[u8]) -> io::Result<Staged> {
    let parent = target
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "target has no parent folder"))?;
    create_private_dir_all(root, parent)?;
    if fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refused(target));
    }
    let tmp = unique_temp_path(target);
    let file = create_new_file(root, &tmp)?;
    let mut staged = Staged {
        file,
        tmp,
        target: target.to_path_buf(),
        committed: false,
    };
    // On error `staged` drops here and takes its temp file with it.
    staged.file.write_all(bytes)?;
    Ok(staged)
}

/// A replacement of one file, written but not yet in place (see [`stage`]).
#[derive(Debug)]
pub struct Staged {
    file: File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    /// Appends to the replacement (not synced: see [`Staged::sync_data`]).
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    /// fsyncs what was appended since [`stage`].
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// The folder the replacement goes into (to [`sync_dir`] after commit).
    pub fn parent(&self) -> &Path {
        // `stage` refused a target without a parent.
        self.target.parent().unwrap_or(Path::new("."))
    }

    /// Renames the replacement over the target. The folder is not synced:
    /// [`sync_dir`] its [`Staged::parent`] before relying on the rename.
    pub fn commit(mut self) -> io::Result<()> {
        fs::rename(&self.tmp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// fsyncs a folder so a rename or a new file in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn atomic_write_replaces_privately_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b.md");
        atomic_write(dir.path(), &target, b"one").unwrap();
        atomic_write(dir.path(), &target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert_eq!(mode(&target), PRIVATE_FILE);
        assert_eq!(mode(target.parent().unwrap()), PRIVATE_DIR);
    }

    #[test]
    fn temp_names_are_unique_per_call() {
        let t = Path::new("/x/summary.md");
        assert_ne!(unique_temp_path(t), unique_temp_path(t));
    }

    #[test]
    fn a_link_below_the_root_is_never_read_written_or_deleted_through() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.md");
        fs::write(&secret, "outside").unwrap();
        fs::create_dir_all(root.path().join("stm")).unwrap();
        symlink(outside.path(), root.path().join("stm/u")).unwrap();
        symlink(&secret, root.path().join("u.md")).unwrap();

        let through_dir = root.path().join("stm/u/secret.md");
        for e in [
            read_nofollow(root.path(), &through_dir).unwrap_err(),
            read_nofollow(root.path(), &root.path().join("u.md")).unwrap_err(),
            open_append_nofollow(root.path(), &through_dir).unwrap_err(),
            atomic_write(root.path(), &through_dir, b"x").unwrap_err(),
            remove_nofollow(root.path(), &through_dir).unwrap_err(),
            remove_nofollow(root.path(), &root.path().join("u.md")).unwrap_err(),
        ] {
            assert!(LinkRefused::is(&e), "{e}");
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert_eq!(fs::read_to_string(&secret).unwrap(), "outside");
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn appends_create_private_folders_and_files_and_narrow_wide_ones() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("stm/u/messages.jsonl");
        drop(open_append_nofollow(root.path(), &path).unwrap());
        assert_eq!(mode(&path), PRIVATE_FILE);
        assert_eq!(mode(&root.path().join("stm")), PRIVATE_DIR);
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        drop(open_append_nofollow(root.path(), &path).unwrap());
        assert_eq!(mode(&path), PRIVATE_FILE);
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

    /// The file at `path` now; `None` when there is none. A link is stamped
    /// as the link (reading through it is refused elsewhere).
    pub fn at(path: &Path) -> io::Result<Option<FileStamp>> {
        match fs::symlink_metadata(path) {
            Ok(meta) => Ok(Some(FileStamp::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}
