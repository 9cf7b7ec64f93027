//! Which users' recall indexes stay loaded: the least recently used go
//! once more than [`MAX_CACHED_USERS`] are loaded or their messages
//! together pass [`MAX_CACHED_DOCS`] (their files stay and load again on
//! use). Bounded by messages, not only by users, because an index's memory
//! grows with its history: many users with short histories all stay (no
//! reload from disk on every turn when more than a handful of users talk),
//! a few with long ones share the same budget.

use super::store::UserIndex;
use crate::names::SafeName;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Users whose index may stay loaded at once (as many as the session
/// states a channel keeps, `session::DEFAULT_MAX_ACTIVE`).
pub const MAX_CACHED_USERS: usize = 4096;

/// Messages (documents) the loaded indexes may hold together. At the
/// ~800 bytes per message the 10⁶-message bench measured, ~200 MB. One
/// user's index is kept whatever its size while it is in use.
pub const MAX_CACHED_DOCS: usize = 250_000;

/// A user's index, loaded on first use (`None` until then or after
/// [`super::Recall::forget`]).
pub(super) type Slot = Arc<Mutex<Option<UserIndex>>>;

#[derive(Default)]
pub(super) struct Cache {
    entries: HashMap<SafeName, Entry>,
    tick: u64,
    /// The sum of the entries' `docs`.
    docs: usize,
}

struct Entry {
    slot: Slot,
    used: u64,
    /// Messages in the index when it was last used (0 before its load).
    docs: usize,
}

impl Cache {
    /// The user's slot, made if there is none, marked as just used.
    pub(super) fn touch(&mut self, user: &SafeName) -> Slot {
        self.tick += 1;
        let used = self.tick;
        let entry = self.entries.entry(user.clone()).or_insert_with(|| Entry {
            slot: Slot::default(),
            used,
            docs: 0,
        });
        entry.used = used;
        entry.slot.clone()
    }

    /// The user's slot if there is one, marked as just used.
    pub(super) fn touch_existing(&mut self, user: &SafeName) -> Option<Slot> {
        self.tick += 1;
        let entry = self.entries.get_mut(user)?;
        entry.used = self.tick;
        Some(entry.slot.clone())
    }

    /// Takes the user's slot out (forget, reindex).
    pub(super) fn remove(&mut self, user: &SafeName) -> Option<Slot> {
        let entry = self.entries.remove(user)?;
        self.docs -= entry.docs;
        Some(entry.slot)
    }

    /// Records that `slot`, the user's, now holds `docs` messages, then
    /// drops the least recently used others while over either bound.
    pub(super) fn settle(&mut self, user: &SafeName, slot: &Slot, docs: usize) {
        if let Some(entry) = self.entries.get_mut(user)
            && Arc::ptr_eq(&entry.slot, slot)
        {
            self.docs = self.docs - entry.docs + docs;
            entry.docs = docs;
        }
        if self.entries.len() <= MAX_CACHED_USERS && self.docs <= MAX_CACHED_DOCS {
            return;
        }
        // Down to seven eighths of each bound at once, so a full cache
        // sorts once per many loads, not on every one.
        let mut by_age: Vec<(u64, SafeName, usize)> = self
            .entries
            .iter()
            .filter(|(name, _)| *name != user)
            .map(|(name, e)| (e.used, name.clone(), e.docs))
            .collect();
        by_age.sort_unstable_by_key(|(used, _, _)| *used);
        let (users, docs) = (MAX_CACHED_USERS / 8 * 7, MAX_CACHED_DOCS / 8 * 7);
        for (_, name, _) in by_age {
            if self.entries.len() <= users && self.docs <= docs {
                break;
            }
            self.remove(&name);
        }
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

    /// Uses user `i` as `with_user` does: touch, then settle with `docs`.
    fn use_user(cache: &mut Cache, i: usize, docs: usize) {
        let slot = cache.touch(&name(i));
        cache.settle(&name(i), &slot, docs);
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
        assert_eq!(cache.docs, 1000 * 22);
    }

    #[test]
    fn the_least_recently_used_go_when_the_messages_pass_the_budget() {
        let mut cache = Cache::default();
        let big = MAX_CACHED_DOCS / 4;
        for i in 0..4 {
            use_user(&mut cache, i, big);
        }
        assert!((0..4).all(|i| cache.holds(&name(i))), "exactly at the budget");
        use_user(&mut cache, 1, big);
        use_user(&mut cache, 4, big);
        assert!(cache.docs <= MAX_CACHED_DOCS / 8 * 7, "{}", cache.docs);
        assert!(
            cache.holds(&name(4)) && cache.holds(&name(1)),
            "the newest and the one used again stay"
        );
        assert!(!cache.holds(&name(0)), "the oldest goes first");
    }

    #[test]
    fn one_user_past_the_budget_alone_stays_loaded_while_used() {
        let mut cache = Cache::default();
        use_user(&mut cache, 0, 10);
        use_user(&mut cache, 1, MAX_CACHED_DOCS * 2);
        assert!(cache.holds(&name(1)) && !cache.holds(&name(0)));
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
        assert_eq!(cache.docs, 0);
        let new = cache.touch(&name(0));
        cache.settle(&name(0), &old, 70);
        assert_eq!(cache.docs, 0, "the slot of before the removal is not this entry's");
        cache.settle(&name(0), &new, 30);
        assert_eq!(cache.docs, 30);
    }
}
