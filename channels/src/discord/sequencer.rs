//! Puts Discord events back in the order Discord sent them. serenity runs
//! every event-handler call in a task of its own, so two messages that arrive
//! together (a burst, or the replay after a gateway resume) can reach the
//! handler in either order — but the broker must see each user's messages in
//! order. Events wait here for a short hold and leave in snowflake-id order
//! (Discord ids grow with time). Only ordering: no conversion, no network.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long an event waits for earlier ones that serenity's scheduling may
/// have delayed. Handler tasks of one burst start within microseconds of
/// each other, so this is generous, and small next to a model call.
pub const HOLD: Duration = Duration::from_millis(150);

/// Events held back until their turn, keyed by snowflake id.
pub struct Reorder<T> {
    held: BTreeMap<u64, (Instant, T)>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder { held: BTreeMap::new() }
    }
}

impl<T> Reorder<T> {
    /// Holds `item` (snowflake `id`) that arrived at `now`.
    pub fn push(&mut self, id: u64, item: T, now: Instant) {
        self.held.insert(id, (now, item));
    }

    /// The events whose turn has come at `now`, in id order: every event
    /// held for [`HOLD`], and every event with a smaller id than one of
    /// those (it must not be overtaken).
    pub fn due(&mut self, now: Instant) -> Vec<T> {
        let last_due = self
            .held
            .iter()
            .filter(|(_, (at, _))| now.duration_since(*at) >= HOLD)
            .map(|(id, _)| *id)
            .max();
        let Some(last) = last_due else { return Vec::new() };
        let later = match last.checked_add(1) {
            Some(next) => self.held.split_off(&next),
            None => BTreeMap::new(),
        };
        std::mem::replace(&mut self.held, later)
            .into_values()
            .map(|(_, item)| item)
            .collect()
    }

    /// Everything still held, in id order (when the source has ended).
    pub fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.held)
            .into_values()
            .map(|(_, item)| item)
            .collect()
    }

    /// When the next event's hold ends, if any is held.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|(at, _)| *at + HOLD).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_that_arrive_out_of_order_leave_in_id_order() {
        let t0 = Instant::now();
        let mut r = Reorder::default();
        r.push(20, "second", t0);
        r.push(10, "first", t0 + Duration::from_millis(1));
        assert!(
            r.due(t0 + Duration::from_millis(5)).is_empty(),
            "nothing leaves before its hold"
        );
        assert_eq!(
            r.due(t0 + HOLD),
            vec!["first", "second"],
            "the earlier id is not overtaken"
        );
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn a_later_event_still_waits_for_its_own_hold() {
        let t0 = Instant::now();
        let mut r = Reorder::default();
        r.push(1, "a", t0);
        r.push(2, "b", t0 + HOLD);
        assert_eq!(r.due(t0 + HOLD), vec!["a"]);
        assert_eq!(r.next_deadline(), Some(t0 + HOLD + HOLD));
        assert_eq!(r.drain(), vec!["b"]);
    }

    #[test]
    fn the_largest_id_does_not_overflow() {
        let t0 = Instant::now();
        let mut r = Reorder::default();
        r.push(u64::MAX, "max", t0);
        r.push(3, "small", t0);
        assert_eq!(r.due(t0 + HOLD), vec!["small", "max"]);
    }
}
