//! The connection state an adapter reports to the broker's readiness check
//! (`/readyz`) and reconnect metric: connecting, connected, or down. An
//! adapter keeps one [`Link`] and flips it where it learns the truth (a
//! successful poll, a gateway `ready`, a failed request); the broker only
//! reads it. Owns no I/O and no timers.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Where a platform connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Not connected yet (start-up, first handshake).
    Connecting,
    /// The platform answered the last time we asked.
    Connected,
    /// The last attempt failed; the adapter is retrying.
    Down,
}

/// A snapshot for the broker: the state and how many times the link has
/// come up (so `connects - 1` is the number of reconnects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    pub state: LinkState,
    pub connects: u64,
}

impl LinkStatus {
    /// For channels with nothing remote to lose (the console, test doubles).
    pub const LOCAL: LinkStatus = LinkStatus {
        state: LinkState::Connected,
        connects: 1,
    };
}

/// Shared, lock-free connection state; cheap to read from any task.
#[derive(Debug, Default)]
pub struct Link {
    state: AtomicU8,
    connects: AtomicU64,
}

const CONNECTING: u8 = 0;
const CONNECTED: u8 = 1;
const DOWN: u8 = 2;

impl Link {
    /// The platform answered: connected (counted when it was not before).
    pub fn up(&self) {
        if self.state.swap(CONNECTED, Ordering::SeqCst) != CONNECTED {
            self.connects.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A new session began (a gateway READY or RESUMED): connected, and
    /// counted even if the drop before it was never seen (a resume can
    /// happen between two looks at the state).
    pub fn session(&self) {
        self.state.store(CONNECTED, Ordering::SeqCst);
        self.connects.fetch_add(1, Ordering::SeqCst);
    }

    /// The platform could not be reached or refused us.
    pub fn down(&self) {
        self.state.store(DOWN, Ordering::SeqCst);
    }

    pub fn status(&self) -> LinkStatus {
        let state = match self.state.load(Ordering::SeqCst) {
            CONNECTING => LinkState::Connecting,
            CONNECTED => LinkState::Connected,
            _ => LinkState::Down,
        };
        LinkStatus {
            state,
            connects: self.connects.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_counts_each_time_it_comes_up_and_not_repeated_successes() {
        let link = Link::default();
        assert_eq!(link.status().state, LinkState::Connecting);
        link.up();
        link.up();
        link.down();
        assert_eq!(
            link.status(),
            LinkStatus {
                state: LinkState::Down,
                connects: 1
            }
        );
        link.up();
        assert_eq!(
            link.status(),
            LinkStatus {
                state: LinkState::Connected,
                connects: 2
            }
        );
    }
}
