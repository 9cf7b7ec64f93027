//! A [`Model`] wrapper that records each call: latency and failures by
//! purpose, reported tokens by model and purpose, and — for the chat model —
//! the health that `/readyz` reads ("reached recently or not failing").
//! It changes nothing about the call itself.

use super::metrics::metrics;
use crate::model::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, Usage};
use async_trait::async_trait;
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// What a model call is for (the `purpose` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Answer,
    Summary,
}

impl Purpose {
    pub fn label(self) -> &'static str {
        match self {
            Purpose::Answer => "answer",
            Purpose::Summary => "summary",
        }
    }
}

/// Failed answer calls in a row; reset by any success.
static ANSWER_FAILURES_IN_A_ROW: AtomicU32 = AtomicU32::new(0);

/// After this many failed answer calls in a row (and none succeeding since),
/// `/readyz` reports the model as failing.
pub const FAILING_AFTER: u32 = 3;

/// Failed answer calls in a row since the last success.
pub fn answer_failures_in_a_row() -> u32 {
    ANSWER_FAILURES_IN_A_ROW.load(Ordering::SeqCst)
}

pub struct Metered {
    inner: Arc<dyn Model>,
    purpose: Purpose,
    /// The configured model name, for the token metrics.
    model: String,
}

/// Wraps `inner` so its calls are measured under `purpose`.
pub fn metered(inner: Arc<dyn Model>, purpose: Purpose, model: &str) -> Arc<dyn Model> {
    Arc::new(Metered {
        inner,
        purpose,
        model: model.to_string(),
    })
}

fn count_tokens(model: &str, purpose: Purpose, usage: &Usage) {
    metrics().tokens(model, purpose.label(), usage.input_tokens, usage.output_tokens);
}

impl Metered {
    fn count(&self, usage: &Usage) {
        count_tokens(&self.model, self.purpose, usage);
    }

    fn record<T>(&self, started: Instant, result: &Result<T, ModelError>) {
        let purpose = self.purpose.label();
        metrics().model_call(purpose, started.elapsed());
        let answer = self.purpose == Purpose::Answer;
        match result {
            Ok(_) if answer => ANSWER_FAILURES_IN_A_ROW.store(0, Ordering::SeqCst),
            Ok(_) => {}
            Err(_) => {
                metrics().model_failed(purpose);
                if answer {
                    ANSWER_FAILURES_IN_A_ROW.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

#[async_trait]
impl Model for Metered {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let started = Instant::now();
        let result = self.inner.complete(request).await;
        self.record(started, &result);
        if let Ok(ModelReply { usage: Some(usage), .. }) = &result {
            self.count(usage);
        }
        result
    }

    /// Measured up to the stream's opening (what retries and the fallback
    /// see); the tokens are counted as the stream reports them.
    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let started = Instant::now();
        let result = self.inner.stream(request).await;
        self.record(started, &result);
        let (model, purpose) = (self.model.clone(), self.purpose);
        Ok(result?
            .inspect(move |part| {
                if let Ok(StreamPart::Usage(usage)) = part {
                    count_tokens(&model, purpose, usage);
                }
            })
            .boxed())
    }

    fn streams(&self) -> bool {
        self.inner.streams()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn supports_tools(&self) -> bool {
        self.inner.supports_tools()
    }
}
