//! Per-(channel, user) async mutexes: the one thing that serialises every
//! writer of a user's short-term log (appends, compaction, expiry, clear).
//!
//! Each user has two: the *log* lock, held by every append and context read
//! and, briefly, by compaction to swap in the log without its folded prefix;
//! and the *fold* lock, held by compaction across its file work (profile,
//! summary, archive) and by every other rewriter of the user's files
//! (`/session clear`, expiry, maintenance), so those never run in the middle
//! of a commit while appends go on. Whoever needs both takes the fold lock
//! first, so two tasks never wait on each other.
//!
//! The registry keeps an entry only while someone holds or waits for it, so
//! it never grows with the number of users who ever talked to the bot. This
//! module never touches the file system; it only hands out guards.

use crate::names::SafeName;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::OwnedMutexGuard;

/// Which of a user's two locks (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Log,
    Fold,
}

/// Which user's lock, and which of the two.
type Key = (SafeName, SafeName, Kind);

/// One live lock and how many tasks hold or wait for it. The count, not the
/// `Arc`'s strong count, decides removal: it is changed only under the
/// registry's map lock, so "last one out removes the entry" is race-free.
struct Entry {
    mutex: Arc<tokio::sync::Mutex<()>>,
    interested: usize,
}

/// A registry of per-(channel, user) async mutexes. Cheap to clone; clones
/// share the same locks, so one registry is made at start and handed to
/// every [`crate::stm::Stm`].
#[derive(Clone, Default)]
pub struct LockRegistry {
    /// A `std` mutex, not a Tokio one: it is held only for a map lookup and
    /// never across an `.await`.
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl std::fmt::Debug for LockRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockRegistry")
            .field("live_entries", &self.live_entries())
            .finish()
    }
}

impl LockRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until no other task holds the lock of `(channel, user)` and
    /// returns a guard that holds it until dropped. Cancelling the wait (e.g.
    /// dropping the future in a `select!`) leaves the registry clean.
    pub async fn lock(&self, channel: &SafeName, user: &SafeName) -> UserGuard {
        let held = self.acquire((channel.clone(), user.clone(), Kind::Log)).await;
        UserGuard { held, _fold: None }
    }

    /// Both of the user's locks, the fold lock first: for whoever rewrites
    /// the user's files outside compaction (clear, expiry, maintenance).
    pub async fn lock_exclusive(&self, channel: &SafeName, user: &SafeName) -> UserGuard {
        let fold = self.lock_fold(channel, user).await;
        let held = self.acquire((channel.clone(), user.clone(), Kind::Log)).await;
        UserGuard {
            held,
            _fold: Some(fold.held),
        }
    }

    /// Only the fold lock (see the module doc): appends go on meanwhile.
    pub async fn lock_fold(&self, channel: &SafeName, user: &SafeName) -> FoldGuard {
        let held = self.acquire((channel.clone(), user.clone(), Kind::Fold)).await;
        FoldGuard { held }
    }

    async fn acquire(&self, key: Key) -> Held {
        let mutex = {
            let mut entries = self.map();
            let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                mutex: Arc::new(tokio::sync::Mutex::new(())),
                interested: 0,
            });
            entry.interested += 1;
            Arc::clone(&entry.mutex)
        };
        // From here on the ticket owns our share of `interested`, so a
        // cancelled wait still gives it back.
        let ticket = Ticket {
            registry: self.clone(),
            key,
        };
        let held = mutex.lock_owned().await;
        Held { _held: held, ticket }
    }

    /// How many locks (log or fold) are held or waited for right now.
    /// Zero when the bot is idle; tests and the admin status read it.
    pub fn live_entries(&self) -> usize {
        self.map().len()
    }

    /// The map, even if a panicking thread poisoned the mutex: the map is
    /// only ever left in a consistent state (every change is one insert,
    /// increment, decrement or remove), so the data is still valid.
    fn map(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One held lock of the registry.
struct Held {
    // Field order matters: the mutex is released before the ticket gives
    // back its share of the entry, so a removed entry is never still held.
    _held: OwnedMutexGuard<()>,
    ticket: Ticket,
}

/// Proof that the caller holds the lock of one user's log (and, from
/// [`LockRegistry::lock_exclusive`], the fold lock too). Functions named
/// `…_locked` take it by reference so they cannot be called without it.
pub struct UserGuard {
    // Field order matters: the log lock is released before the fold lock,
    // the reverse of the order they were taken in.
    held: Held,
    _fold: Option<Held>,
}

/// Proof that the caller holds one user's fold lock (see the module doc).
pub struct FoldGuard {
    held: Held,
}

impl FoldGuard {
    /// The channel of the user whose fold lock this is.
    pub fn channel(&self) -> &SafeName {
        &self.held.ticket.key.0
    }

    /// The user whose fold lock this is.
    pub fn user(&self) -> &SafeName {
        &self.held.ticket.key.1
    }

    /// Whether this guard is `(channel, user)`'s fold lock.
    pub fn protects(&self, channel: &SafeName, user: &SafeName) -> bool {
        self.channel() == channel && self.user() == user
    }
}

impl UserGuard {
    /// The channel whose log this guard protects.
    pub fn channel(&self) -> &SafeName {
        &self.held.ticket.key.0
    }

    /// The user whose log this guard protects.
    pub fn user(&self) -> &SafeName {
        &self.held.ticket.key.1
    }

    /// Whether this guard protects `(channel, user)`.
    pub fn protects(&self, channel: &SafeName, user: &SafeName) -> bool {
        self.channel() == channel && self.user() == user
    }
}

impl std::fmt::Debug for UserGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserGuard")
            .field("channel", self.channel())
            .field("user", self.user())
            .finish()
    }
}

/// One task's interest in an entry: given back on drop, whether the task got
/// the lock and released it or gave up waiting.
struct Ticket {
    registry: LockRegistry,
    key: Key,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut entries = self.registry.map();
        if let Some(entry) = entries.get_mut(&self.key) {
            entry.interested -= 1;
            if entry.interested == 0 {
                entries.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn names(c: &str, u: &str) -> (SafeName, SafeName) {
        (SafeName::of(c), SafeName::of(u))
    }

    #[tokio::test]
    async fn the_fold_lock_leaves_the_log_lock_free_but_excludes_exclusive_lockers() {
        let reg = LockRegistry::new();
        let (c, u) = names("slack", "U1");
        let fold = reg.lock_fold(&c, &u).await;
        let log = reg.lock(&c, &u).await;
        assert!(fold.protects(&c, &u));
        drop(log);
        let exclusive = {
            let reg = reg.clone();
            let (c, u) = (c.clone(), u.clone());
            tokio::spawn(async move { reg.lock_exclusive(&c, &u).await })
        };
        tokio::task::yield_now().await;
        assert!(!exclusive.is_finished());
        drop(fold);
        let both = exclusive.await.unwrap();
        assert!(both.protects(&c, &u));
        let blocked = tokio::time::timeout(Duration::from_millis(1), reg.lock(&c, &u)).await;
        assert!(blocked.is_err(), "an exclusive guard holds the log lock too");
        drop(both);
        assert_eq!(reg.live_entries(), 0);
    }

    #[tokio::test]
    async fn entry_lives_only_while_held() {
        let reg = LockRegistry::new();
        let (c, u) = names("slack", "U1");
        let guard = reg.lock(&c, &u).await;
        assert_eq!(reg.live_entries(), 1);
        assert!(guard.protects(&c, &u));
        drop(guard);
        assert_eq!(reg.live_entries(), 0);
    }

    #[tokio::test]
    async fn a_second_locker_waits_for_the_first() {
        let reg = LockRegistry::new();
        let (c, u) = names("slack", "U1");
        let first = reg.lock(&c, &u).await;
        let waiting = {
            let reg = reg.clone();
            let (c, u) = (c.clone(), u.clone());
            tokio::spawn(async move { reg.lock(&c, &u).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(reg.live_entries(), 1);
        drop(second);
        assert_eq!(reg.live_entries(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_no_entry() {
        let reg = LockRegistry::new();
        let (c, u) = names("slack", "U1");
        let held = reg.lock(&c, &u).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(1), reg.lock(&c, &u)).await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(reg.live_entries(), 0);
    }

    #[tokio::test]
    async fn different_users_and_channels_do_not_block_each_other() {
        let reg = LockRegistry::new();
        let a = reg.lock(&SafeName::of("slack"), &SafeName::of("U1")).await;
        let b = reg.lock(&SafeName::of("slack"), &SafeName::of("U2")).await;
        let c = reg.lock(&SafeName::of("discord"), &SafeName::of("U1")).await;
        assert_eq!(reg.live_entries(), 3);
        drop((a, b, c));
        assert_eq!(reg.live_entries(), 0);
    }
}
