//! What the file store keeps of a channel in memory, read once from the
//! channel's files at the first use (reminders, usage): the read, off the
//! async workers, under the one lock every later use takes; and the users
//! a folder of `<user>.json` files holds.

use crate::blocking::off_workers;
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::store::StoreError;
use std::path::Path;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

/// The runtime stopped before the files were read.
#[derive(Debug, thiserror::Error)]
#[error("shutting down: the files were not read")]
struct ShuttingDown;

/// State read from a channel's files by `read` at the first [`Loaded::lock`].
pub(super) struct Loaded<T> {
    layout: Layout,
    read: fn(&Layout) -> Result<T, StoreError>,
    state: Mutex<Option<T>>,
}

impl<T: Send + 'static> Loaded<T> {
    pub(super) fn new(layout: Layout, read: fn(&Layout) -> Result<T, StoreError>) -> Loaded<T> {
        Loaded {
            layout,
            read,
            state: Mutex::new(None),
        }
    }

    /// The channel's folder.
    pub(super) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The state, locked; read from the files first if this is the first use.
    pub(super) async fn lock(&self) -> Result<MappedMutexGuard<'_, T>, StoreError> {
        let mut guard = self.state.lock().await;
        if guard.is_none() {
            let (layout, read) = (self.layout.clone(), self.read);
            let state = off_workers(move || read(&layout))
                .await
                .ok_or_else(|| StoreError::storage(ShuttingDown))??;
            *guard = Some(state);
        }
        MutexGuard::try_map(guard, Option::as_mut).map_err(|_| StoreError::storage(ShuttingDown))
    }

    /// The state if it was read; nothing is read for it.
    pub(super) async fn if_read(&self) -> MutexGuard<'_, Option<T>> {
        self.state.lock().await
    }
}

/// The users of `dir`'s `<user>.json` files; other names are skipped.
pub(super) fn json_users(layout: &Layout, dir: &Path) -> Result<Vec<SafeName>, FileError> {
    Ok(fsutil::list_dir(layout.state_root(), dir)?
        .into_iter()
        .filter_map(|entry| {
            let name = entry.file_name();
            name.to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(SafeName::from_encoded)
        })
        .collect())
}
