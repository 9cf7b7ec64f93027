//! Opening a file below the state root in one step the kernel checks:
//! `openat2` from the root's descriptor with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, so no component of the path — including one
//! swapped for a link after the `lstat` walk of the caller — is followed,
//! and nothing resolves outside the root. Where the kernel lacks `openat2`
//! (Linux before 5.6, a sandbox that hides it: `ENOSYS`) the caller falls
//! back to its path checks and `O_NOFOLLOW` on the last component.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once `openat2` answered `ENOSYS`: the fallback is used from then on.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Read,
    /// Read and append, created (0600) if missing.
    Append,
    /// A new file for writing; an existing one is an error.
    CreateNew,
}

/// Opens `path` (which must be inside `root`) as `access` says, resolved
/// by the kernel beneath `root` with no symbolic link on the way; a link
/// is refused with [`super::LinkRefused`]. `Ok(None)` when the kernel has
/// no `openat2`: use the path-checked open instead.
pub fn open_beneath(root: &Path, path: &Path, access: Access) -> io::Result<Option<File>> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let below = path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not inside the state folder {}", path.display(), root.display()),
        )
    })?;
    match os::open(root, below, access) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            UNSUPPORTED.store(true, Ordering::Relaxed);
            Ok(None)
        }
        // A link (ELOOP) or a way out of the root (EXDEV) on the way.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => Err(super::refused(path)),
        Err(e) => Err(e),
    }
}

/// Deletes the file `path` (inside `root`) by its name in its folder, the
/// folder opened beneath `root` with no symbolic link on the way, so a
/// folder swapped for a link after the caller's checks is refused rather
/// than deleted through. A link at `path` itself would be unlinked, not
/// followed (the caller refuses it before). `Ok(None)` without `openat2`.
pub fn unlink_beneath(root: &Path, path: &Path) -> io::Result<Option<()>> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let below = path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not inside the state folder {}", path.display(), root.display()),
        )
    })?;
    let (Some(name), folder) = (below.file_name(), below.parent().unwrap_or(Path::new(""))) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name to delete"));
    };
    match os::unlink(root, folder, Path::new(name)) {
        Ok(()) => Ok(Some(())),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            UNSUPPORTED.store(true, Ordering::Relaxed);
            Ok(None)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => Err(super::refused(path)),
        Err(e) => Err(e),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod os {
    use super::Access;
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub fn open(root: &Path, below: &Path, access: Access) -> io::Result<File> {
        let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let flags = OFlags::CLOEXEC
            | OFlags::NOFOLLOW
            | match access {
                Access::Read => OFlags::RDONLY,
                Access::Append => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE,
                Access::CreateNew => OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            };
        // openat2 refuses a mode without O_CREAT (EINVAL).
        let mode = match access {
            Access::Read => Mode::empty(),
            Access::Append | Access::CreateNew => Mode::from_raw_mode(super::super::PRIVATE_FILE),
        };
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        // EAGAIN: a rename elsewhere raced the lookup; the kernel asks to retry.
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&dir, below, flags, mode, resolve) {
                Err(rustix::io::Errno::AGAIN) if tries < 3 => tries += 1,
                result => return Ok(File::from(result?)),
            }
        }
    }

    pub fn unlink(root: &Path, folder: &Path, name: &Path) -> io::Result<()> {
        let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let folder = if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder
        };
        // No O_NOFOLLOW: with O_PATH it would open a link at the end as
        // itself; RESOLVE_NO_SYMLINKS refuses it (ELOOP) instead.
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        let parent = rustix::fs::openat2(&dir, folder, flags, Mode::empty(), resolve)?;
        Ok(rustix::fs::unlinkat(&parent, name, rustix::fs::AtFlags::empty())?)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod os {
    use super::Access;
    use std::fs::File;
    use std::io;
    use std::path::Path;

    pub fn open(_root: &Path, _below: &Path, _access: Access) -> io::Result<File> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    pub fn unlink(_root: &Path, _folder: &Path, _name: &Path) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// The openat2 path itself refuses what the lstat walk would: called
    /// directly, with no walk before it (as if a folder were swapped for a
    /// link between the walk and the open).
    #[test]
    fn a_link_on_the_way_is_refused_by_the_open_itself() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.md"), "outside").unwrap();
        fs::create_dir(root.path().join("stm")).unwrap();
        symlink(outside.path(), root.path().join("stm/u")).unwrap();
        fs::create_dir(root.path().join("stm/real")).unwrap();
        fs::write(root.path().join("stm/real/own.md"), "mine").unwrap();

        let own = open_beneath(root.path(), &root.path().join("stm/real/own.md"), Access::Read).unwrap();
        let Some(mut own) = own else {
            // No openat2 in this kernel: the fallback is what runs, and its
            // own test covers it.
            eprintln!("openat2 is not available here");
            return;
        };
        let mut text = String::new();
        io::Read::read_to_string(&mut own, &mut text).unwrap();
        assert_eq!(text, "mine");

        let through = root.path().join("stm/u/secret.md");
        for access in [Access::Read, Access::Append] {
            let e = open_beneath(root.path(), &through, access).unwrap_err();
            assert!(super::super::LinkRefused::is(&e), "{e}");
        }
        let e = open_beneath(root.path(), &root.path().join("stm/u/new.md"), Access::CreateNew).unwrap_err();
        assert!(super::super::LinkRefused::is(&e), "{e}");
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);

        // A `..` that climbs out of the root is refused too.
        let climb = root.path().join("stm/real/../../..").join("x");
        assert!(open_beneath(root.path(), &climb, Access::Read).is_err());

        // A new file is created private.
        let new = root.path().join("stm/real/new.md");
        drop(open_beneath(root.path(), &new, Access::CreateNew).unwrap().unwrap());
        assert!(new.is_file());

        // Deleting through the link is refused; the file outside stays.
        let e = unlink_beneath(root.path(), &through).unwrap_err();
        assert!(super::super::LinkRefused::is(&e), "{e}");
        assert!(outside.path().join("secret.md").is_file());
        unlink_beneath(root.path(), &new).unwrap().unwrap();
        assert!(!new.exists());
    }
}
