//! Polling mode's books on the updates between Telegram and the broker:
//! which were handed over and not yet taken (in update-id order), which the
//! broker gave back, and so which offset `getUpdates` may send. Telegram
//! forgets every update below the offset it is sent, so the offset never
//! passes an update the broker has not taken ([`crate::Channel::taken`]):
//! a broker killed at any moment finds it again on restart. Because the
//! offset then lags, Telegram answers with updates already handed over;
//! these books say which are new, so none reaches the broker twice.
//!
//! It keeps the books only: no network, and no message text (it logs and
//! holds ids only).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long an update the broker gave back ([`Unconfirmed::give_back`])
/// waits before it is handed over again, so a store that keeps failing is
/// not asked in a tight loop.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(3);

/// The updates handed to the broker and not yet taken; shared by the
/// polling loop (which hands over) and [`crate::Channel::taken`] /
/// [`crate::Channel::not_taken`] (which the broker calls from elsewhere).
#[derive(Default)]
pub(crate) struct Unconfirmed {
    /// A `std` mutex: every use is a few map operations, never held across
    /// an `.await`.
    books: Mutex<Books>,
    /// Woken whenever the broker settles an update, so a loop waiting for
    /// the offset to move polls again at once.
    settled: Notify,
}

#[derive(Default)]
struct Books {
    /// Update id → its message, for every update handed over and not yet
    /// taken. Its first key is where the offset stops.
    waiting: BTreeMap<i32, Waiting>,
    /// The highest update id dealt with: handed over, answered here,
    /// skipped or undecodable. Ids at or below it are not new.
    highest: Option<i32>,
}

/// One update handed over and not yet taken.
struct Waiting {
    msg_id: String,
    /// Set when the broker gave it back: from then it is handed over again.
    again_at: Option<Instant>,
}

impl Unconfirmed {
    fn books(&self) -> MutexGuard<'_, Books> {
        // Every change is one call that cannot panic half-way: a poisoned
        // lock still holds whole books.
        self.books.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether update `update` is to be dealt with now: never seen, or
    /// given back by the broker and its retry pause is over.
    pub(crate) fn is_due(&self, update: i32) -> bool {
        let books = self.books();
        match books.waiting.get(&update) {
            Some(waiting) => waiting.again_at.is_some_and(|at| at <= Instant::now()),
            None => books.highest.is_none_or(|highest| update > highest),
        }
    }

    /// Update `update` carrying message `msg_id` goes to the broker now
    /// (recorded before it goes: the broker may take it at once).
    pub(crate) fn hand_over(&self, update: i32, msg_id: &str) {
        let mut books = self.books();
        books.waiting.insert(
            update,
            Waiting {
                msg_id: msg_id.to_string(),
                again_at: None,
            },
        );
        books.highest = books.highest.max(Some(update));
    }

    /// Update `update` had nothing for the broker (skipped, or answered
    /// here): it counts as taken at once.
    pub(crate) fn dealt_with(&self, update: i32) {
        let mut books = self.books();
        books.waiting.remove(&update);
        books.highest = books.highest.max(Some(update));
    }

    /// Every update up to `update` was seen; those not handed over (the
    /// undecodable ones) count as taken.
    pub(crate) fn seen_up_to(&self, update: i32) {
        let mut books = self.books();
        books.highest = books.highest.max(Some(update));
    }

    /// The broker took message `msg_id`; false if no update waited for it.
    pub(crate) fn taken(&self, msg_id: &str) -> bool {
        let found = {
            let mut books = self.books();
            let update = books.update_of(msg_id);
            update.and_then(|update| books.waiting.remove(&update)).is_some()
        };
        self.settled.notify_one();
        found
    }

    /// The broker could not keep message `msg_id` (or it never got there):
    /// its update stays unconfirmed and is handed over again after
    /// [`RETRY_AFTER`]. False if no update waited for it.
    pub(crate) fn give_back(&self, msg_id: &str) -> bool {
        let update = {
            let mut books = self.books();
            let update = books.update_of(msg_id);
            if let Some(waiting) = update.and_then(|update| books.waiting.get_mut(&update)) {
                waiting.again_at = Some(Instant::now() + RETRY_AFTER);
            }
            update
        };
        self.settled.notify_one();
        if let Some(update) = update {
            tracing::debug!(update, "telegram: update given back; it is handed over again later");
        }
        update.is_some()
    }

    /// The offset that confirms everything the broker took and nothing
    /// else: the first update not yet taken, or the one after the last
    /// dealt with. `None` before any update was seen.
    pub(crate) fn offset(&self) -> Option<i32> {
        let books = self.books();
        match books.waiting.first_key_value() {
            Some((&first, _)) => Some(first),
            None => books.highest.map(|highest| highest + 1),
        }
    }

    /// Whether some update is with the broker, neither taken nor given back.
    pub(crate) fn with_broker(&self) -> bool {
        self.books().waiting.values().any(|waiting| waiting.again_at.is_none())
    }

    /// Resolves once the broker settles an update (one settled since the
    /// last wait counts too: [`Notify`] keeps it).
    pub(crate) async fn settled(&self) {
        self.settled.notified().await;
    }
}

impl Books {
    /// The update waiting that carries `msg_id`. A scan: at most about one
    /// `getUpdates` answer (100) waits, since no update past that window is
    /// ever seen.
    fn update_of(&self, msg_id: &str) -> Option<i32> {
        self.waiting
            .iter()
            .find(|(_, waiting)| waiting.msg_id == msg_id)
            .map(|(&update, _)| update)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_stops_at_the_first_update_not_taken() {
        let books = Unconfirmed::default();
        assert_eq!(books.offset(), None, "nothing seen: Telegram's own offset");
        books.hand_over(7, "42:1");
        books.hand_over(8, "42:2");
        books.dealt_with(9);
        books.seen_up_to(8);
        assert_eq!(books.offset(), Some(7));
        assert!(books.taken("42:2"));
        assert_eq!(books.offset(), Some(7), "8 was taken, 7 was not");
        assert!(books.taken("42:1"));
        assert_eq!(books.offset(), Some(10));
        assert!(!books.taken("42:1"), "taken once");
    }

    #[test]
    fn updates_already_dealt_with_are_not_due_again() {
        let books = Unconfirmed::default();
        assert!(books.is_due(7));
        books.hand_over(7, "42:1");
        books.dealt_with(8);
        assert!(!books.is_due(7) && !books.is_due(8) && !books.is_due(6));
        assert!(books.is_due(9));
        books.seen_up_to(9);
        assert!(!books.is_due(9), "seen (undecodable): never handed over");
        assert_eq!(books.offset(), Some(7));
        assert!(books.taken("42:1"));
        assert!(!books.is_due(7));
    }

    #[tokio::test(start_paused = true)]
    async fn an_update_given_back_is_due_again_after_the_retry_pause() {
        let books = Unconfirmed::default();
        books.hand_over(7, "42:1");
        assert!(books.with_broker());
        assert!(books.give_back("42:1"));
        assert!(!books.with_broker());
        assert_eq!(books.offset(), Some(7), "still unconfirmed");
        assert!(!books.is_due(7), "not at once: a failing store must not spin");
        tokio::time::advance(RETRY_AFTER).await;
        assert!(books.is_due(7));
        books.hand_over(7, "42:1");
        assert!(!books.is_due(7) && books.with_broker());
        assert!(!books.give_back("42:9"), "not ours");
    }

    #[tokio::test]
    async fn a_settlement_before_the_wait_is_not_missed() {
        let books = Unconfirmed::default();
        books.hand_over(7, "42:1");
        books.taken("42:1");
        tokio::time::timeout(Duration::from_secs(5), books.settled())
            .await
            .expect("the earlier taken wakes the waiter");
    }
}
