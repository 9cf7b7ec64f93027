//! The test kit shared by every test suite in the workspace: fake servers
//! that stand in for the real services at the network edge (`telegram`,
//! `slack`, `discord`, `model`, `embeddings`), a throwaway PostgreSQL
//! (`pg`, a real server for the Postgres store), a strict reader of Telegram HTML
//! (`html_check`), and [`eventually`], the one bounded wait for "something
//! the code under test does in the background has happened".
//!
//! It is a dev-dependency only: nothing in the product may depend on it, and
//! it depends on none of mnemo's crates, so the unit tests of a crate and its
//! end-to-end tests judge with the same fakes. A fake behaves like the real
//! service wherever our client depends on it; it never reaches into mnemo.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "the test kit runs only inside tests: a fake that cannot start fails the test"
)]
#![forbid(unsafe_code)]

pub mod discord;
pub mod embeddings;
pub mod html_check;
pub mod model;
pub mod pdf;
pub mod pg;
pub mod slack;
pub mod telegram;
pub mod transcription;

use std::fmt::Display;
use std::time::Duration;

/// How long a test waits for something the code under test should do
/// before failing instead of hanging. Generous: the machine running the
/// suite may be loaded; a passing test never waits this long.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How often [`eventually`] looks again.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// What a check in [`eventually`] answers: `true`/`Some(value)` when the
/// awaited thing has happened.
pub trait Outcome {
    type Value;
    fn settled(self) -> Option<Self::Value>;
}

impl Outcome for bool {
    type Value = ();
    fn settled(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn settled(self) -> Option<T> {
        self
    }
}

/// Runs `check` until it answers `true` (or `Some`), looking again every
/// 10 ms, and panics naming `what` after [`PATIENCE`]. Time is tokio's, so
/// under `tokio::time::pause()` the wait costs no real time.
///
/// `check` is an async closure so it may await (an HTTP probe); a plain
/// condition is written `async || fake.calls("x").len() == 2`.
pub async fn eventually<R: Outcome>(what: impl Display, mut check: impl AsyncFnMut() -> R) -> R::Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await.settled() {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("gave up after {PATIENCE:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_the_value_once_the_check_settles() {
        let mut looks = 0;
        let found = eventually("the third look", async || {
            looks += 1;
            (looks == 3).then_some(looks)
        })
        .await;
        assert_eq!(found, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "gave up after 60s waiting for a thing that never happens")]
    async fn eventually_gives_up_after_its_patience() {
        eventually("a thing that never happens", async || false).await;
    }
}
