//! One compaction run per user at a time: the mark a run holds, and the
//! note a trigger leaves when it finds the user's run in progress (the run
//! folds again when it ends), both under the one lock of the `Compactor`.

use super::Inner;
use crate::names::SafeName;
use std::sync::{Arc, PoisonError};

/// Marks a user as being compacted; unmarks on drop (also on error, panic
/// or a cancelled future).
pub(super) struct Running {
    inner: Arc<Inner>,
    user: SafeName,
}

impl Running {
    /// The mark, or `None` (and the trigger noted for the run in progress)
    /// if the user is being compacted already.
    pub(super) fn claim(inner: &Arc<Inner>, user: &SafeName) -> Option<Running> {
        let mut running = inner.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(again) = running.get_mut(user) {
            *again = true;
            return None;
        }
        running.insert(user.clone(), false);
        Some(Running {
            inner: Arc::clone(inner),
            user: user.clone(),
        })
    }

    /// Whether a trigger came since the last look (and forgets it).
    pub(super) fn asked_again(&self) -> bool {
        let mut running = self.inner.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.get_mut(&self.user).is_some_and(std::mem::take)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.user);
    }
}
