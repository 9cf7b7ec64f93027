//! A [`Model`] wrapper that records each call: latency and failures by
//! purpose (failures also by status: a 429 is not a 401), reported tokens
//! by model and purpose, and — for the chat model — its health: how many
//! answer calls failed in a row, reported by `/healthz` and the
//! `mnemo_model_healthy` gauge. Model health is never part of readiness:
//! an unready broker receives no messages, so it would never see the model
//! recover. It changes nothing about the call itself.

use super::metrics::metrics;
use crate::model::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, Usage};
use async_trait::async_trait;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

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

/// The last failed answer call: its status label and when.
static LAST_FAILURE: Mutex<Option<(String, SystemTime)>> = Mutex::new(None);

/// After this many failed answer calls in a row (and none succeeding since),
/// the model is reported failing (`/healthz`, `mnemo_model_healthy 0`).
pub const FAILING_AFTER: u32 = 3;

/// Failed answer calls in a row since the last success.
pub fn answer_failures_in_a_row() -> u32 {
    ANSWER_FAILURES_IN_A_ROW.load(Ordering::SeqCst)
}

/// The chat model's health in one line, for `/healthz`: `model ok`, or
/// `model failing: …` with how many answer calls failed and the last
/// one's status. Never a detail of the error (it could quote a reply).
pub fn model_health_line() -> String {
    let failures = answer_failures_in_a_row();
    if failures < FAILING_AFTER {
        return "model ok".into();
    }
    let last = LAST_FAILURE.lock().ok().and_then(|l| l.clone());
    let last = match last {
        Some((status, at)) => {
            let at = chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            format!("; the last failed with status {status} at {at}")
        }
        None => String::new(),
    };
    format!("model failing: the last {failures} answer calls failed{last}")
}

fn answered() {
    ANSWER_FAILURES_IN_A_ROW.store(0, Ordering::SeqCst);
    metrics().model_health(0, false);
}

fn failed(purpose: Purpose, error: &ModelError) {
    let status = error.status_label();
    metrics().model_failed(purpose.label(), &status);
    if purpose == Purpose::Answer {
        let n = ANSWER_FAILURES_IN_A_ROW
            .fetch_add(1, Ordering::SeqCst)
            .saturating_add(1);
        if let Ok(mut last) = LAST_FAILURE.lock() {
            *last = Some((status.into_owned(), SystemTime::now()));
        }
        metrics().model_health(n, n >= FAILING_AFTER);
    }
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

fn count_tokens(model: &str, purpose: &str, usage: &Usage) {
    metrics().tokens(model, purpose, usage.input_tokens, usage.output_tokens);
}

/// The `purpose` label of a call's tokens: an answer's later calls — the
/// ones that carry its tool rounds' results back — count as `tools`, as
/// `mnemo sessions usage` counts them.
fn tokens_label(purpose: Purpose, request: &ModelRequest) -> &'static str {
    if purpose == Purpose::Answer && !request.rounds.is_empty() {
        "tools"
    } else {
        purpose.label()
    }
}

impl Metered {
    fn record<T>(&self, started: Instant, result: &Result<T, ModelError>) {
        metrics().model_call(self.purpose.label(), started.elapsed());
        match result {
            Ok(_) if self.purpose == Purpose::Answer => answered(),
            Ok(_) => {}
            Err(e) => failed(self.purpose, e),
        }
    }
}

/// A streamed call being read: it failed if its stream ended in an error
/// (the deadline, a cut connection); otherwise it succeeded when the
/// reader let it go (at its end, or having read enough).
struct StreamedCall {
    purpose: Purpose,
    failed: bool,
}

impl StreamedCall {
    fn fail(&mut self, error: &ModelError) {
        if !self.failed {
            self.failed = true;
            failed(self.purpose, error);
        }
    }
}

impl Drop for StreamedCall {
    fn drop(&mut self) {
        if !self.failed && self.purpose == Purpose::Answer {
            answered();
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
            count_tokens(&self.model, tokens_label(self.purpose, request), usage);
        }
        result
    }

    /// The latency is measured up to the stream's opening (its first part:
    /// what retries and the fallback see); the tokens are counted as the
    /// stream reports them, and an error in the stream counts as a failed
    /// call.
    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let started = Instant::now();
        let result = self.inner.stream(request).await;
        metrics().model_call(self.purpose.label(), started.elapsed());
        let parts = match result {
            Ok(parts) => parts,
            Err(e) => {
                failed(self.purpose, &e);
                return Err(e);
            }
        };
        let (model, purpose) = (self.model.clone(), self.purpose);
        let label = tokens_label(purpose, request);
        let mut call = StreamedCall { purpose, failed: false };
        Ok(parts
            .inspect(move |part| match part {
                Ok(StreamPart::Usage(usage)) => count_tokens(&model, label, usage),
                Ok(_) => {}
                Err(e) => call.fail(e),
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
