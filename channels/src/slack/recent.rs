//! A bounded memory of recently seen keys (event ids, message timestamps,
//! threads the bot is in). Slack redelivers an event when an ack is late and
//! sends a channel mention both as `app_mention` and as `message`; this is
//! what lets the adapter hand each message to the broker once. Bounded so a
//! long-running bot does not grow without limit: the oldest keys go first.

use std::collections::{HashMap, HashSet, VecDeque};

pub struct Recent {
    capacity: usize,
    order: VecDeque<String>,
    keys: HashSet<String>,
}

impl Recent {
    pub fn new(capacity: usize) -> Self {
        Recent {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            keys: HashSet::new(),
        }
    }

    /// Remembers `key`; true if it was new (the caller should act on it).
    pub fn insert(&mut self, key: &str) -> bool {
        if self.keys.contains(key) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.keys.remove(&old);
        }
        self.order.push_back(key.to_string());
        self.keys.insert(key.to_string());
        true
    }

    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }
}

/// A bounded map in the same spirit: per-message facts the adapter needs
/// later (who asked, the "thinking…" placeholder), forgotten oldest-first.
pub struct RecentMap<V> {
    capacity: usize,
    order: VecDeque<String>,
    values: HashMap<String, V>,
}

impl<V> RecentMap<V> {
    pub fn new(capacity: usize) -> Self {
        RecentMap {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            values: HashMap::new(),
        }
    }

    pub fn insert(&mut self, key: &str, value: V) {
        if self.values.insert(key.to_string(), value).is_some() {
            return;
        }
        self.order.push_back(key.to_string());
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.values.remove(&old);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.values.get(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub fn take(&mut self, key: &str) -> Option<V> {
        let value = self.values.remove(key)?;
        self.order.retain(|k| k != key);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_new_once() {
        let mut seen = Recent::new(10);
        assert!(seen.insert("Ev1"));
        assert!(!seen.insert("Ev1"));
        assert!(seen.contains("Ev1"));
    }

    #[test]
    fn the_oldest_key_is_forgotten_past_capacity() {
        let mut seen = Recent::new(2);
        seen.insert("a");
        seen.insert("b");
        seen.insert("c");
        assert!(!seen.contains("a"));
        assert!(seen.contains("b") && seen.contains("c"));
        assert!(seen.insert("a"));
    }

    #[test]
    fn a_recent_map_keeps_the_newest_values_and_takes_once() {
        let mut map = RecentMap::new(2);
        map.insert("a", 1);
        map.insert("b", 2);
        map.insert("c", 3);
        assert_eq!(map.get("a"), None);
        assert_eq!(map.take("b"), Some(2));
        assert_eq!(map.take("b"), None);
        assert!(map.contains("c"));
    }
}
