//! The channel's budget of open log handles. Keeping a user's log open
//! saves an `open`, an `fstat` and a `close` per append, but a process has
//! a limited number of file descriptors (often 1,024 under systemd), so
//! only so many active users get one; the others open and close per append.
//!
//! This module only counts; it never reads or writes a file.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many log handles may stay open, shared by clones.
#[derive(Clone)]
pub(super) struct Budget {
    open: Arc<AtomicUsize>,
    max: usize,
}

impl Budget {
    pub(super) fn new(max: usize) -> Budget {
        Budget {
            open: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// Keeps `file` open if the budget allows; otherwise it is closed here.
    pub(super) fn keep(&self, file: Arc<File>) -> Option<OpenLog> {
        let claimed = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1))
            .is_ok();
        claimed.then(|| OpenLog {
            file,
            open: Arc::clone(&self.open),
        })
    }

    /// Handles open right now.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// An open append handle that gives its place in the budget back when
/// dropped (its state evicted, reloaded or thrown away).
pub(super) struct OpenLog {
    /// Shared with the append writing through it until its sync is done.
    file: Arc<File>,
    open: Arc<AtomicUsize>,
}

impl OpenLog {
    pub(super) fn file(&self) -> &Arc<File> {
        &self.file
    }
}

impl Drop for OpenLog {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}
