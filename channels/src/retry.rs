//! The one retry policy for every network caller in mnemo: the platform
//! adapters here and the model backends in the broker (which depends on this
//! crate; the reverse cannot be, so the policy lives here). A
//! [`RetryPolicy`] says how long to wait before each retry — the server's
//! `Retry-After` / `retry_after` when it gave one, up to a cap, else an
//! exponential backoff with jitter, so many callers do not retry in
//! lockstep — and how many retries a call gets. [`RetryPolicy::run`] drives
//! one call through it; [`Backoff`] serves loops that never give up
//! (polling, reconnecting) and only need the next wait. Every wait ends
//! early when the shutdown it is given fires.
//!
//! Knows no platform and no error type: callers judge their own errors
//! ([`Verdict`]). Never logs message text (it logs only what the caller
//! names and the error's own `Display`).

use crate::Shutdown;
use rand::Rng;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// When to try again and how long to wait first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts after the first ([`Backoff`] ignores it: it serves
    /// loops that retry until shutdown).
    pub max_retries: u32,
    /// The first backoff; it doubles with each retry.
    pub base_delay: Duration,
    /// Backoff never grows past this.
    pub max_delay: Duration,
    /// A server's `Retry-After` is honoured up to this, so a bogus
    /// "come back tomorrow" cannot hang a caller.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 3 retries, 300 ms doubling to 10 s, `Retry-After` up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(300),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// What a caller makes of one failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Worth another try; with the wait the server asked for, if any.
    Retry(Option<Duration>),
    /// Final: trying again cannot help (bad request, refused token, …).
    Fail,
}

/// Why [`RetryPolicy::run`] returned without a result.
#[derive(Debug, PartialEq, Eq)]
pub enum Gave<E> {
    /// The last error: final, or the retries ran out.
    Up(E),
    /// Shutdown fired during a wait; the last error is kept.
    Stopped(E),
}

impl<E> Gave<E> {
    /// The last error, whichever way the call ended.
    pub fn into_error(self) -> E {
        match self {
            Gave::Up(e) | Gave::Stopped(e) => e,
        }
    }
}

impl RetryPolicy {
    /// The policy loops that retry until shutdown use: 1 s doubling to a
    /// minute, and a server's wait honoured up to an hour (a token's flood
    /// control can be long, and nothing is lost by waiting it out).
    pub fn reconnecting() -> Self {
        RetryPolicy {
            max_retries: u32::MAX,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(3600),
        }
    }

    /// The wait before retry number `retry` (0-based): the server's word if
    /// it gave one (capped), else `base · 2^retry` (capped) scaled by a
    /// random factor in [0.5, 1].
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(asked) = retry_after {
            return asked.min(self.max_retry_after);
        }
        let exponential = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay);
        exponential.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    /// A fresh backoff state for a loop that retries until shutdown.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            policy: self.clone(),
            failures: 0,
        }
    }

    /// Runs `attempt` until it succeeds, `judge` calls an error final, the
    /// retries run out, or `shutdown` (when given) fires during a wait.
    /// `what` names the call in the log line each retry writes. Callers
    /// whose wait must outlive a shutdown (sending the last replies while
    /// the broker drains) pass no shutdown; their retries are bounded.
    pub async fn run<T, E, F, Fut>(
        &self,
        what: &str,
        shutdown: Option<&Shutdown>,
        judge: impl Fn(&E) -> Verdict,
        mut attempt: F,
    ) -> Result<T, Gave<E>>
    where
        E: Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut retry = 0;
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let asked = match judge(&error) {
                Verdict::Retry(asked) if retry < self.max_retries => asked,
                _ => return Err(Gave::Up(error)),
            };
            let wait = self.delay(retry, asked);
            retry += 1;
            tracing::warn!(
                call = what,
                error = %error,
                retry,
                of = self.max_retries,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "call failed; retrying"
            );
            if let Some(shutdown) = shutdown
                && !pause(wait, &mut shutdown.clone()).await
            {
                return Err(Gave::Stopped(error));
            }
            if shutdown.is_none() {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The waits of a loop that retries until shutdown (polling, reconnecting):
/// [`RetryPolicy::delay`] per consecutive failure, reset by a success.
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    failures: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        RetryPolicy::reconnecting().backoff()
    }
}

impl Backoff {
    /// The wait before the next attempt; `asked` is the server's word.
    pub fn next(&mut self, asked: Option<Duration>) -> Duration {
        let wait = self.policy.delay(self.failures, asked);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Sleeps `wait` unless `shutdown` fires first; false when it did (or when
/// its sender is gone: nobody can ask us to keep going).
pub async fn pause(wait: Duration, shutdown: &mut Shutdown) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = shutdown.wait_for(|stop| *stop) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use tokio::sync::watch;

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(0, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3600))), policy.max_retry_after);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stays_under_the_cap() {
        let policy = RetryPolicy::default();
        for retry in 0..3 {
            let full = policy.base_delay * 2u32.pow(retry);
            let wait = policy.delay(retry, None);
            assert!(wait >= full / 2 && wait <= full, "retry {retry}: {wait:?}");
        }
        assert!(policy.delay(30, None) <= policy.max_delay);
    }

    #[test]
    fn a_reconnecting_loop_backs_off_to_a_minute_and_resets_on_success() {
        let mut backoff = Backoff::default();
        let waits: Vec<Duration> = (0..10).map(|_| backoff.next(None)).collect();
        assert!(waits[0] >= Duration::from_millis(500) && waits[0] <= Duration::from_secs(1));
        assert!(waits[9] >= Duration::from_secs(30) && waits[9] <= Duration::from_secs(60));
        assert_eq!(backoff.next(Some(Duration::from_secs(7))), Duration::from_secs(7));
        backoff.reset();
        assert!(backoff.next(None) <= Duration::from_secs(1));
    }

    fn judge(e: &&str) -> Verdict {
        if *e == "final" {
            Verdict::Fail
        } else {
            Verdict::Retry(None)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_retried_until_it_succeeds_within_the_budget() {
        let tries = Cell::new(0);
        let result = RetryPolicy::default()
            .run("test", None, judge, || {
                tries.set(tries.get() + 1);
                async { if tries.get() < 3 { Err("busy") } else { Ok(tries.get()) } }
            })
            .await;
        assert_eq!(result, Ok(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_error_or_an_exhausted_budget_gives_up_with_the_last_error() {
        let policy = RetryPolicy::default();
        for (error, attempts) in [("final", 1), ("busy", 4)] {
            let tries = Cell::new(0);
            let result = policy
                .run("test", None, judge, || {
                    tries.set(tries.get() + 1);
                    async move { Err::<(), _>(error) }
                })
                .await;
            assert_eq!(result, Err(Gave::Up(error)));
            assert_eq!(
                tries.get(),
                attempts,
                "{error}: the first attempt and the retries allowed"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_a_wait_at_once() {
        let (stop, shutdown) = watch::channel(false);
        let policy = RetryPolicy {
            max_retry_after: Duration::from_secs(3600),
            ..RetryPolicy::default()
        };
        let started = tokio::time::Instant::now();
        let call = policy.run(
            "test",
            Some(&shutdown),
            |_: &&str| Verdict::Retry(Some(Duration::from_secs(600))),
            || async { Err::<(), _>("slow down") },
        );
        let fire = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.send_replace(true);
        };
        let (result, ()) = tokio::join!(call, fire);
        assert_eq!(result, Err(Gave::Stopped("slow down")));
        assert!(started.elapsed() < Duration::from_secs(600), "the wait was cut short");
    }
}
