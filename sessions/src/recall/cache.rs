//! Which users' recall indexes stay open: the least recently used go once
//! more than [`MAX_CACHED_USERS`] are open, or once the memory they hold
//! together passes [`MAX_CACHED_BYTES`] — then only those idle for
//! [`IDLE_BEFORE_DROP`] or more (their files stay and open again on use).
//! Counted in what each index really holds resident
//! ([`super::store::UserIndex::resident_bytes`]: 4 bytes a stored message,
//! the in-memory tail, sparse tables, vectors), not in messages: an opened
//! index of 10⁵ messages holds well under a megabyte, its postings and
//! texts staying on disk (in the page cache, the kernel's to evict). Many
//! users all stay (no reopening on every turn when more than a handful of
//! users talk), and users who went quiet make room. Users in a
//! conversation are not dropped for the budget.

use super::store::UserIndex;
use crate::names::SafeName;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Users whose index may stay loaded at once (as many as the session
/// states a channel keeps, `session::DEFAULT_MAX_ACTIVE`).
pub const MAX_CACHED_USERS: usize = 4096;

/// Bytes the open indexes may hold resident together (it was 250,000
/// messages, ~200 MB, when indexes were loaded whole). One user's index is
/// kept whatever its size while it is in use.
pub const MAX_CACHED_BYTES: usize = 200 << 20;

/// How long a user's index must have gone unused before the memory budget
/// may drop it.
pub const IDLE_BEFORE_DROP: Duration = Duration::from_secs(60);

/// After a pass that could not get under the message budget (everyone
/// loaded is active), how long before another is tried.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A user's index, loaded on first use (`None` until then or after
/// [`super::Recall::forget`]).
pub(super) type Slot = Arc<Mutex<Option<UserIndex>>>;

#[derive(Default)]
pub(super) struct Cache {
    entries: HashMap<SafeName, Entry>,
    tick: u64,
    /// The sum of the entries' `bytes`.
    bytes: usize,
    /// No pass for the message budget before this (see [`RETRY_AFTER`]).
    quiet_until: Option<Instant>,
}

struct Entry {
    slot: Slot,
    used: u64,
    /// When it was last used.
    at: Instant,
    /// Bytes the index held when it was last used (0 before it opened).
    bytes: usize,
}

impl Cache {
    /// The user's slot, made if there is none, marked as just used.
    pub(super) fn touch(&mut self, user: &SafeName) -> Slot {
        self.tick += 1;
        let used = self.tick;
        let at = Instant::now();
        let entry = self.entries.entry(user.clone()).or_insert_with(|| Entry {
            slot: Slot::default(),
            used,
            at,
            bytes: 0,
        });
        entry.used = used;
        entry.at = at;
        entry.slot.clone()
    }

    /// The user's slot if there is one, marked as just used.
    pub(super) fn touch_existing(&mut self, user: &SafeName) -> Option<Slot> {
        self.tick += 1;
        let entry = self.entries.get_mut(user)?;
        entry.used = self.tick;
        entry.at = Instant::now();
        Some(entry.slot.clone())
    }

    /// Takes the user's slot out (forget, reindex).
    pub(super) fn remove(&mut self, user: &SafeName) -> Option<Slot> {
        let entry = self.entries.remove(user)?;
        self.bytes -= entry.bytes;
        Some(entry.slot)
    }

    /// Records that `slot`, the user's, now holds `bytes` resident, then
    /// drops the least recently used others while over the user bound, or
    /// over the message budget and idle (see the module doc).
    pub(super) fn settle(&mut self, user: &SafeName, slot: &Slot, bytes: usize) {
        self.settle_at(user, slot, bytes, Instant::now());
    }

    fn settle_at(&mut self, user: &SafeName, slot: &Slot, bytes: usize, now: Instant) {
        if let Some(entry) = self.entries.get_mut(user)
            && Arc::ptr_eq(&entry.slot, slot)
        {
            self.bytes = self.bytes - entry.bytes + bytes;
            entry.bytes = bytes;
        }
        let over_users = self.entries.len() > MAX_CACHED_USERS;
        let over_bytes = self.bytes > MAX_CACHED_BYTES && self.quiet_until.is_none_or(|t| now >= t);
        if !over_users && !over_bytes {
            return;
        }
        // Down to seven eighths of each bound at once, so a full cache
        // sorts once per many loads, not on every one.
        let mut by_age: Vec<(u64, SafeName, Instant)> = self
            .entries
            .iter()
            .filter(|(name, _)| *name != user)
            .map(|(name, e)| (e.used, name.clone(), e.at))
            .collect();
        by_age.sort_unstable_by_key(|(used, _, _)| *used);
        let (users, bytes) = (MAX_CACHED_USERS / 8 * 7, MAX_CACHED_BYTES / 8 * 7);
        for (_, name, at) in by_age {
            let too_many = self.entries.len() > users;
            let too_big = self.bytes > bytes && now.saturating_duration_since(at) >= IDLE_BEFORE_DROP;
            if too_many || too_big {
                self.remove(&name);
            } else if self.entries.len() <= users && self.bytes <= bytes {
                break;
            }
        }
        self.quiet_until = (self.bytes > MAX_CACHED_BYTES).then(|| now + RETRY_AFTER);
    }

    #[cfg(test)]
    fn holds(&self, user: &SafeName) -> bool {
        self.entries.contains_key(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: usize) -> SafeName {
        SafeName::of(&format!("u{i}"))
    }

    /// Uses user `i` as `with_user` does: touch, then settle with `bytes`,
    /// `idle` after the use before.
    fn use_user_at(cache: &mut Cache, i: usize, bytes: usize, now: Instant) {
        let slot = cache.touch(&name(i));
        cache.entries.get_mut(&name(i)).unwrap().at = now;
        cache.settle_at(&name(i), &slot, bytes, now);
    }

    fn use_user(cache: &mut Cache, i: usize, bytes: usize) {
        use_user_at(cache, i, bytes, Instant::now());
    }

    #[test]
    fn many_users_with_short_histories_all_stay_loaded() {
        let mut cache = Cache::default();
        for round in 0..3 {
            for i in 0..1000 {
                use_user(&mut cache, i, 20 + round);
            }
        }
        assert!((0..1000).all(|i| cache.holds(&name(i))));
        assert_eq!(cache.bytes, 1000 * 22);
    }

    #[test]
    fn past_the_message_budget_the_idle_go_oldest_first_and_the_active_stay() {
        let mut cache = Cache::default();
        let t0 = Instant::now();
        let big = MAX_CACHED_BYTES / 4;
        for i in 0..4 {
            use_user_at(&mut cache, i, big, t0);
        }
        assert!((0..4).all(|i| cache.holds(&name(i))), "exactly at the budget");
        // Past it while everyone is in a conversation: nobody goes.
        let t1 = t0 + Duration::from_secs(5);
        use_user_at(&mut cache, 4, big, t1);
        assert!((0..5).all(|i| cache.holds(&name(i))), "active users are not dropped");
        // A minute later, users 0..2 went quiet, 3 and 4 did not.
        let t2 = t0 + IDLE_BEFORE_DROP + Duration::from_secs(2);
        use_user_at(&mut cache, 3, big, t2 - Duration::from_secs(1));
        use_user_at(&mut cache, 4, big, t2);
        assert!(cache.bytes <= MAX_CACHED_BYTES / 8 * 7, "{}", cache.bytes);
        assert!(cache.holds(&name(3)) && cache.holds(&name(4)), "the active stay");
        assert!(
            !cache.holds(&name(0)) && !cache.holds(&name(1)),
            "the oldest idle go first"
        );
    }

    #[test]
    fn one_user_past_the_budget_alone_stays_loaded_while_used() {
        let mut cache = Cache::default();
        let t0 = Instant::now();
        use_user_at(&mut cache, 0, 10, t0);
        use_user_at(&mut cache, 1, MAX_CACHED_BYTES * 2, t0 + IDLE_BEFORE_DROP);
        assert!(cache.holds(&name(1)) && !cache.holds(&name(0)));
    }

    #[test]
    fn a_budget_only_active_users_fill_is_not_sorted_again_on_every_use() {
        let mut cache = Cache::default();
        let t0 = Instant::now();
        use_user_at(&mut cache, 0, MAX_CACHED_BYTES, t0);
        use_user_at(&mut cache, 1, 10, t0);
        assert_eq!(cache.quiet_until, Some(t0 + RETRY_AFTER));
        use_user_at(&mut cache, 1, 11, t0 + RETRY_AFTER / 2);
        assert_eq!(cache.quiet_until, Some(t0 + RETRY_AFTER), "no pass within the wait");
    }

    #[test]
    fn users_past_the_count_bound_go_oldest_first() {
        let mut cache = Cache::default();
        for i in 0..=MAX_CACHED_USERS {
            use_user(&mut cache, i, 1);
        }
        assert!(cache.entries.len() <= MAX_CACHED_USERS / 8 * 7 + 1);
        assert!(cache.holds(&name(MAX_CACHED_USERS)) && !cache.holds(&name(0)));
    }

    #[test]
    fn a_removed_user_no_longer_counts_and_a_stale_slot_changes_nothing() {
        let mut cache = Cache::default();
        let old = cache.touch(&name(0));
        cache.settle(&name(0), &old, 50);
        cache.remove(&name(0));
        assert_eq!(cache.bytes, 0);
        let new = cache.touch(&name(0));
        cache.settle(&name(0), &old, 70);
        assert_eq!(cache.bytes, 0, "the slot of before the removal is not this entry's");
        cache.settle(&name(0), &new, 30);
        assert_eq!(cache.bytes, 30);
    }
}
