//! Where a compaction run's file work goes: the swap, which holds the
//! user's log lock a turn waits on, to Tokio's blocking pool; everything
//! else, which holds only the fold lock, to the lower-priority background
//! threads (see [`crate::blocking`]).

use super::{CompactionError, Compactor};
use crate::names::SafeName;

/// Where a run's file work goes.
#[derive(Clone, Copy)]
pub(super) enum Thread {
    /// Tokio's blocking pool, at the process's priority: work that holds
    /// the user's log lock, which the user's turns wait on (the swap).
    Pool,
    /// The lower-priority background threads: work that holds only the
    /// fold lock, which no turn waits on.
    Background,
}

impl Compactor {
    /// Runs `work` off the async workers, `on` Tokio's blocking pool or the
    /// background threads (see [`Thread`] and [`crate::blocking`]).
    pub(super) async fn off_workers<T: Send + 'static>(
        &self,
        user: &SafeName,
        on: Thread,
        work: impl FnOnce(&Compactor, &SafeName) -> Result<T, CompactionError> + Send + 'static,
    ) -> Result<T, CompactionError> {
        let this = self.clone();
        let user = user.clone();
        let work = move || work(&this, &user);
        match on {
            Thread::Pool => crate::blocking::off_workers(work).await,
            Thread::Background => crate::blocking::in_background(work).await,
        }
        .unwrap_or(Err(CompactionError::Interrupted))
    }
}
