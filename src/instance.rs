//! One mnemo process per state folder. The per-user locks that keep a
//! user's log ordered live in memory, so a second process writing the same
//! folder (a second `mnemo run`, or `mnemo sessions maintain` while the bot
//! runs) could interleave with the first. Every verb that writes memory
//! first takes an exclusive advisory lock on `<state>/mnemo.lock`; the OS
//! releases it when the process ends, however it ends.
//!
//! It also names the files a running process keeps at the top of the
//! state folder — the lock and the control socket — so what must never be
//! backed up is said in one place below both `ops::control` and `ops::keep`.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock's file, at the top of the state folder.
pub const LOCK_FILE: &str = "mnemo.lock";

/// The control socket's file beside it (served by [`crate::ops::control`]):
/// like the lock, it belongs to the running process, never to a backup.
pub const SOCKET_FILE: &str = "mnemo.sock";

/// Holds the lock for as long as it lives.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error(
        "another mnemo process{holder} is using the state folder {folder}; stop it first \
         (a running bot already does maintenance on its own schedule)"
    )]
    Busy { folder: PathBuf, holder: String },
    #[error(transparent)]
    File(#[from] mnemo_sessions::fsutil::FileError),
}

impl InstanceLock {
    /// Takes the lock for `state_root`, creating the folder if needed, or
    /// says who holds it.
    pub fn acquire(state_root: &Path) -> Result<InstanceLock, InstanceError> {
        let path = state_root.join(LOCK_FILE);
        let io = |source| mnemo_sessions::fsutil::FileError::new("lock", &path, source);
        mnemo_sessions::fsutil::create_private_dir_all(state_root, state_root).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                let holder = if pid.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {pid})")
                };
                return Err(InstanceError::Busy {
                    folder: state_root.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e).into()),
        }
        // Best effort: the pid only makes the "busy" message more helpful.
        let _ = file
            .set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| {
                writeln!(file, "{}", std::process::id())?;
                file.flush()
            });
        Ok(InstanceLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(dir.path()).unwrap();
        let err = InstanceLock::acquire(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&std::process::id().to_string()), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        drop(first);
        InstanceLock::acquire(dir.path()).unwrap();
    }
}
