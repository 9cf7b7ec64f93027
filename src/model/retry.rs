//! Reliability around any [`Model`]: [`Retrying`] tries a call again on
//! rate limits, server errors and connection failures per the one
//! [`RetryPolicy`] every network caller shares (`mnemo_channels::retry`:
//! backoff with jitter, the server's `Retry-After` up to a cap, waits that
//! end on shutdown);
//! [`WithFallback`] asks a second model when the first stays unavailable.
//!
//! Neither knows any backend: they act only on [`ModelError`]'s own
//! judgement ([`ModelError::is_retryable`], [`ModelError::allows_fallback`]).
//! A stream is retried only while opening; once deltas flow, an error is
//! passed on, never papered over with a second, different reply.

use super::config::ModelConfig;
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest};
use async_trait::async_trait;
use mnemo_channels::Shutdown;
pub use mnemo_channels::retry::RetryPolicy;
use mnemo_channels::retry::{Gave, Verdict};
use std::future::Future;
use std::sync::Arc;

/// The policy for a model config: its `maxRetries`, and the shared
/// defaults (300 ms doubling to 10 s with jitter, `Retry-After` up to 60 s).
pub fn policy_for(cfg: &ModelConfig) -> RetryPolicy {
    RetryPolicy {
        max_retries: cfg.max_retries,
        ..RetryPolicy::default()
    }
}

/// A model whose calls are retried per [`RetryPolicy`].
pub struct Retrying {
    inner: Arc<dyn Model>,
    policy: RetryPolicy,
    /// Ends a wait between attempts when the broker shuts down (the turn
    /// then fails with the last error instead of outliving the drain).
    shutdown: Option<Shutdown>,
}

impl Retrying {
    pub fn new(inner: Arc<dyn Model>, policy: RetryPolicy, shutdown: Option<Shutdown>) -> Self {
        Retrying {
            inner,
            policy,
            shutdown,
        }
    }

    async fn run<T, F, Fut>(&self, attempt: F) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut + Send,
        Fut: Future<Output = Result<T, ModelError>> + Send,
        T: Send,
    {
        let judge = |e: &ModelError| {
            if e.is_retryable() {
                Verdict::Retry(e.retry_after())
            } else {
                Verdict::Fail
            }
        };
        let what = self.inner.describe();
        self.policy
            .run(&what, self.shutdown.as_ref(), judge, attempt)
            .await
            .map_err(Gave::into_error)
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

    fn supports_tools(&self) -> bool {
        self.inner.supports_tools()
    }

    fn streams(&self) -> bool {
        self.inner.streams()
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

    /// The primary's: a fallback without tools answers a request that
    /// offers them as plain text (it never asks for a call).
    fn supports_tools(&self) -> bool {
        self.primary.supports_tools()
    }

    /// The primary's: a fallback that cannot stream still answers, in one
    /// piece.
    fn streams(&self) -> bool {
        self.primary.streams()
    }
}
