//! The bounded map of active users' states. A state is taken out while a
//! turn uses it (under the user's lock, so no one else wants it) and put
//! back after; when the map holds more than its cap, the least recently
//! used eighth is dropped at once, so eviction costs O(1) per insert
//! amortised and memory stays bounded however many users ever wrote.
//!
//! No file I/O here: dropping a state only closes its append handle.

use super::state::SessionState;
use crate::names::SafeName;
use std::collections::HashMap;

pub(super) struct StateMap {
    entries: HashMap<SafeName, (u64, SessionState)>,
    /// A counter, not a clock: which entry was used last.
    tick: u64,
    cap: usize,
}

impl StateMap {
    pub(super) fn new(cap: usize) -> StateMap {
        StateMap {
            entries: HashMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    pub(super) fn take(&mut self, user: &SafeName) -> Option<SessionState> {
        self.entries.remove(user).map(|(_, state)| state)
    }

    pub(super) fn get(&self, user: &SafeName) -> Option<&SessionState> {
        self.entries.get(user).map(|(_, state)| state)
    }

    /// [`StateMap::put`] unless the user has a state already.
    pub(super) fn put_if_absent(&mut self, user: SafeName, state: SessionState) {
        if !self.entries.contains_key(&user) {
            self.put(user, state);
        }
    }

    pub(super) fn put(&mut self, user: SafeName, state: SessionState) {
        self.tick += 1;
        self.entries.insert(user, (self.tick, state));
        if self.entries.len() > self.cap {
            self.evict_oldest(self.cap / 8 + 1);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops the `n` least recently used states.
    fn evict_oldest(&mut self, n: usize) {
        let mut ticks: Vec<u64> = self.entries.values().map(|(tick, _)| *tick).collect();
        let n = n.min(ticks.len());
        if n == 0 {
            return;
        }
        let (_, nth, _) = ticks.select_nth_unstable(n - 1);
        let cutoff = *nth;
        self.entries.retain(|_, (tick, _)| *tick > cutoff);
    }
}
