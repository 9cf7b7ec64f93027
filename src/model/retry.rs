//! Reliability around any [`Model`]: [`Retrying`] tries a call again on
//! rate limits, server errors and connection failures, with exponential
//! backoff and jitter, honouring the server's `Retry-After` up to a cap;
//! [`WithFallback`] asks a second model when the first stays unavailable.
//!
//! Neither knows any backend: they act only on [`ModelError`]'s own
//! judgement ([`ModelError::is_retryable`], [`ModelError::allows_fallback`]).
//! A stream is retried only while opening; once deltas flow, an error is
//! passed on, never papered over with a second, different reply.

use super::config::ModelConfig;
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest};
use async_trait::async_trait;
use rand::Rng;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// When to try again and how long to wait first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Extra attempts after the first.
    pub max_retries: u32,
    /// The first backoff; it doubles with each retry.
    pub base_delay: Duration,
    /// Backoff never grows past this.
    pub max_delay: Duration,
    /// A server's `Retry-After` is honoured up to this, so a bogus
    /// "come back tomorrow" cannot hang a reply.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(300),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    pub fn for_config(cfg: &ModelConfig) -> Self {
        RetryPolicy {
            max_retries: cfg.max_retries,
            ..RetryPolicy::default()
        }
    }

    /// The wait before retry number `retry` (0-based): the server's word if
    /// it gave one (capped), else `base · 2^retry` (capped) scaled by a
    /// random factor in [0.5, 1] so many callers do not retry in lockstep.
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
}

/// A model whose calls are retried per [`RetryPolicy`].
pub struct Retrying {
    inner: Arc<dyn Model>,
    policy: RetryPolicy,
}

impl Retrying {
    pub fn new(inner: Arc<dyn Model>, policy: RetryPolicy) -> Self {
        Retrying { inner, policy }
    }

    async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut + Send,
        Fut: Future<Output = Result<T, ModelError>> + Send,
        T: Send,
    {
        let mut retry = 0;
        loop {
            match attempt().await {
                Err(e) if e.is_retryable() && retry < self.policy.max_retries => {
                    let wait = self.policy.delay(retry, e.retry_after());
                    tracing::warn!(
                        model = %self.inner.describe(),
                        error = %e,
                        retry = retry + 1,
                        of = self.policy.max_retries,
                        wait_ms = wait.as_millis() as u64,
                        "model call failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
                outcome => return outcome,
            }
        }
    }
}

#[async_trait]
impl Model for Retrying {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        self.run(|| self.inner.complete(request)).await
    }

    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        self.run(|| self.inner.stream(request)).await
    }

    fn describe(&self) -> String {
        let retries = match self.policy.max_retries {
            1 => "1 retry".to_string(),
            n => format!("{n} retries"),
        };
        format!("{} ({retries})", self.inner.describe())
    }
}

/// A model that hands a call to `fallback` when `primary` fails in a way a
/// different model might not (see [`ModelError::allows_fallback`]).
pub struct WithFallback {
    primary: Arc<dyn Model>,
    fallback: Arc<dyn Model>,
}

impl WithFallback {
    pub fn new(primary: Arc<dyn Model>, fallback: Arc<dyn Model>) -> Self {
        WithFallback { primary, fallback }
    }

    fn falling_back(&self, error: &ModelError) {
        tracing::warn!(
            model = %self.primary.describe(),
            fallback = %self.fallback.describe(),
            error = %error,
            "model failed; asking the fallback model"
        );
    }
}

#[async_trait]
impl Model for WithFallback {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        match self.primary.complete(request).await {
            Err(e) if e.allows_fallback() => {
                self.falling_back(&e);
                self.fallback.complete(request).await
            }
            outcome => outcome,
        }
    }

    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        match self.primary.stream(request).await {
            Err(e) if e.allows_fallback() => {
                self.falling_back(&e);
                self.fallback.stream(request).await
            }
            outcome => outcome,
        }
    }

    fn describe(&self) -> String {
        format!("{}; fallback: {}", self.primary.describe(), self.fallback.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
