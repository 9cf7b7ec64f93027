//! Recall's dense embeddings over any OpenAI-compatible
//! `POST {baseUrl}/embeddings` (OpenAI, Mistral, Ollama, vLLM, llama.cpp
//! server): [`HttpEmbedder`] implements `mnemo_sessions::recall::Embedder`
//! for the channel whose `sessions/config.json` has `recall.embeddings`.
//!
//! Request `{"model", "input": [texts…]}` (a batch), reply `{"data":
//! [{"index", "embedding": [f32…]}, …]}`; vectors are placed by `index`,
//! and a reply that lacks one, repeats one, holds a non-finite value or
//! changes the vectors' length is refused. The HTTP client, the status
//! mapping and the redaction are [`super::http`]'s; background (indexing)
//! calls are retried by the shared policy, a turn's question is not (the
//! person is waiting) and is cut at its budget.
//!
//! A failure is counted in `recall_embeddings{outcome}` and logged once —
//! not once per turn — until a call succeeds again. Neither the texts nor
//! the reply body ever reach a log line or an error: recall falls back to
//! BM25 on any error, and the operator sees the kind and the HTTP status.

use super::build::api_key;
use super::build_error::BuildError;
use super::config::{ModelConfig, Provider};
use super::http::{HttpEndpoint, endpoint_url, secret_header};
use super::retry::{RetryPolicy, policy_for};
use super::{ModelError, redact::Secret};
use crate::ops::metrics::metrics;
use async_trait::async_trait;
use mnemo_channels::Shutdown;
use mnemo_channels::retry::{Gave, Verdict};
use mnemo_sessions::config::{EmbeddingsConfig, EmbeddingsProvider};
use mnemo_sessions::recall::{EmbedError, EmbedPurpose, Embedder};
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Per call while indexing (background: nobody waits on it).
const INDEX_TIMEOUT: Duration = Duration::from_secs(30);

/// `recall.embeddings` as the model layer's config, so the endpoint is
/// checked by the very rules of the `model` and `summarizer` sections.
pub fn model_config(cfg: &EmbeddingsConfig) -> ModelConfig {
    let provider = match cfg.provider {
        EmbeddingsProvider::Openai => Provider::Openai,
    };
    ModelConfig {
        base_url: cfg.base_url.clone(),
        api_key_env: cfg.api_key_env.clone(),
        timeout_secs: INDEX_TIMEOUT.as_secs(),
        ..ModelConfig::new(provider, cfg.model.clone())
    }
}

/// The embedder for `cfg`: validated (`section` names the field in
/// errors, e.g. `recall.embeddings`), its key read through `env` (a
/// server on this machine needs none). `shutdown` ends retry waits.
pub fn build_embedder(
    cfg: &EmbeddingsConfig,
    env: &dyn Fn(&str) -> Option<String>,
    section: &str,
    shutdown: Option<Shutdown>,
) -> Result<Arc<HttpEmbedder>, BuildError> {
    let model = model_config(cfg);
    model.validate_at(section)?;
    let key = api_key(&model, env, section)?;
    let url = endpoint_url(model.base_url().unwrap_or_default(), &["embeddings"], section)?;
    let mut auth = HeaderMap::new();
    let secret: Option<Secret> = match key {
        Some((var, secret)) => {
            let value = format!("Bearer {}", secret.expose());
            auth.insert(AUTHORIZATION, secret_header(&value, section, &var)?);
            Some(secret)
        }
        None => None,
    };
    let endpoint = HttpEndpoint::new(url, auth, &Default::default(), INDEX_TIMEOUT, secret, section)?;
    Ok(Arc::new(HttpEmbedder {
        endpoint,
        model: cfg.model.clone(),
        policy: policy_for(&model),
        shutdown,
        dims: AtomicUsize::new(0),
        healthy: AtomicBool::new(true),
    }))
}

/// What a channel's recall uses: the embedder of its `recall.embeddings`
/// and the turn's budget for the question's vector, or `None` (BM25 only)
/// when the section is absent.
pub type RecallEmbedder = Option<(Arc<dyn Embedder>, Duration)>;

/// [`build_embedder`] for a channel's `recall.embeddings`, if it has one.
pub fn recall_embedder(
    cfg: Option<&EmbeddingsConfig>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RecallEmbedder, BuildError> {
    let Some(cfg) = cfg else { return Ok(None) };
    let embedder: Arc<dyn Embedder> = build_embedder(cfg, env, "recall.embeddings", None)?;
    Ok(Some((embedder, cfg.query_timeout())))
}

/// An OpenAI-compatible embeddings endpoint.
pub struct HttpEmbedder {
    endpoint: HttpEndpoint,
    model: String,
    policy: RetryPolicy,
    shutdown: Option<Shutdown>,
    /// The vectors' length, fixed by the first good reply: a reply of
    /// another length (a model swapped behind the URL) is refused.
    dims: AtomicUsize,
    /// False once a failure was logged, until a call succeeds: one warning
    /// per outage, not one per turn.
    healthy: AtomicBool,
}

impl std::fmt::Debug for HttpEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEmbedder")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Embedder for HttpEmbedder {
    async fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError> {
        let result = match purpose {
            EmbedPurpose::Query { budget } => tokio::time::timeout(budget, self.once(texts))
                .await
                .unwrap_or(Err(EmbedError::Timeout { after: budget })),
            EmbedPurpose::Index => self.retried(texts).await,
        };
        self.record(&result, purpose);
        result
    }

    fn model(&self) -> &str {
        &self.model
    }
}

impl HttpEmbedder {
    /// One request, no retry.
    async fn once(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let reply = self.endpoint.post_json(&self.body(texts)).await.map_err(failure)?;
        self.accept(&reply, texts.len())
    }

    /// [`HttpEmbedder::once`] retried on rate limits, 5xx and connection
    /// failures, per the shared policy.
    async fn retried(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let judge = |e: &ModelError| {
            if e.is_retryable() {
                Verdict::Retry(e.retry_after())
            } else {
                Verdict::Fail
            }
        };
        let body = self.body(texts);
        let what = format!("embeddings at {}", self.endpoint.shown_url());
        let reply = self
            .policy
            .run(&what, self.shutdown.as_ref(), judge, || self.endpoint.post_json(&body))
            .await
            .map_err(|e| failure(Gave::into_error(e)))?;
        self.accept(&reply, texts.len())
    }

    fn body(&self, texts: &[String]) -> Value {
        json!({"model": self.model, "input": texts})
    }

    /// The reply's vectors, if they have the length of every earlier
    /// reply's.
    fn accept(&self, reply: &Value, texts: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let vectors = parse(reply, texts)?;
        let dims = vectors.first().map_or(0, Vec::len);
        match self.dims.compare_exchange(0, dims, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => Ok(vectors),
            Err(expected) if expected == dims => Ok(vectors),
            Err(expected) => Err(EmbedError::BadDimension { expected, got: dims }),
        }
    }

    /// Counts the outcome; logs the first failure of an outage and the
    /// first success after one.
    fn record(&self, result: &Result<Vec<Vec<f32>>, EmbedError>, purpose: EmbedPurpose) {
        match result {
            Ok(_) => {
                metrics().recall_embeddings("ok");
                if !self.healthy.swap(true, Ordering::SeqCst) {
                    tracing::info!(endpoint = %self.endpoint.shown_url(), model = %self.model, "recall embeddings work again; recall fuses them with BM25 again");
                }
            }
            Err(e) => {
                metrics().recall_embeddings(e.outcome());
                if self.healthy.swap(false, Ordering::SeqCst) {
                    let purpose = match purpose {
                        EmbedPurpose::Query { .. } => "question",
                        EmbedPurpose::Index => "indexing",
                    };
                    tracing::warn!(endpoint = %self.endpoint.shown_url(), model = %self.model, outcome = e.outcome(), error = %e, %purpose, "recall embeddings failed; recall answers from BM25 alone until they work again (logged once per outage)");
                }
            }
        }
    }
}

/// The model layer's error as an embeddings failure, without any body
/// text (it could quote the input): the kind and the HTTP status.
fn failure(e: ModelError) -> EmbedError {
    let detail = match e {
        ModelError::Timeout { after } => return EmbedError::Timeout { after },
        ModelError::RateLimited { .. } => "rate limited (HTTP 429)".to_string(),
        ModelError::Auth { status, .. } => format!("credentials refused (HTTP {status}); check the key variable"),
        ModelError::BadRequest { status, .. } => {
            format!("request refused (HTTP {status}); check recall.embeddings.model")
        }
        ModelError::Unavailable { .. } => "unavailable (5xx or no connection)".to_string(),
        ModelError::Protocol { .. } => {
            return EmbedError::BadReply {
                detail: "the reply is not JSON".into(),
            };
        }
        ModelError::Command { .. } => "failed".to_string(),
    };
    EmbedError::Failed { detail }
}

/// The vectors of an embeddings reply, in input order.
fn parse(reply: &Value, texts: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = |detail: &str| EmbedError::BadReply { detail: detail.into() };
    let data = reply
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `data` array"))?;
    if data.len() != texts {
        return Err(EmbedError::BadReply {
            detail: format!("{} vectors for {texts} texts", data.len()),
        });
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; texts];
    for (position, item) in data.iter().enumerate() {
        // `index` says which input a vector belongs to; servers that leave
        // it out answer in input order.
        let index = match item.get("index") {
            None => position,
            Some(i) => i
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| bad("an `index` that is not a number"))?,
        };
        let values = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("an item without an `embedding` array (is encoding_format base64?)"))?;
        let mut vector = Vec::with_capacity(values.len());
        for value in values {
            let x = value.as_f64().ok_or_else(|| bad("a value that is not a number"))? as f32;
            if !x.is_finite() {
                return Err(EmbedError::NotFinite);
            }
            vector.push(x);
        }
        match out.get_mut(index) {
            Some(slot @ None) => *slot = Some(vector),
            _ => return Err(bad("an `index` out of range or given twice")),
        }
    }
    let vectors: Vec<Vec<f32>> = out.into_iter().flatten().collect();
    let dims = vectors.first().map_or(0, Vec::len);
    if dims == 0 {
        return Err(bad("empty vectors"));
    }
    if let Some(other) = vectors.iter().find(|v| v.len() != dims) {
        return Err(EmbedError::BadDimension {
            expected: dims,
            got: other.len(),
        });
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_placed_by_index_whatever_the_order_of_the_reply() {
        let reply = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]},
        ]});
        assert_eq!(parse(&reply, 2).unwrap(), vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    }

    #[test]
    fn a_reply_that_cannot_be_trusted_is_refused_by_kind() {
        let one = |embedding: Value| json!({"data": [{"index": 0, "embedding": embedding}]});
        assert_eq!(parse(&one(json!([1e39, 0.0])), 1), Err(EmbedError::NotFinite));
        assert!(matches!(parse(&one(json!([])), 1), Err(EmbedError::BadReply { .. })));
        assert!(matches!(
            parse(&one(json!("AAAA")), 1),
            Err(EmbedError::BadReply { .. })
        ));
        assert!(matches!(
            parse(&json!({"data": []}), 1),
            Err(EmbedError::BadReply { .. })
        ));
        let twice = json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]});
        assert!(matches!(parse(&twice, 2), Err(EmbedError::BadReply { .. })));
        let ragged = json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]});
        assert_eq!(parse(&ragged, 2), Err(EmbedError::BadDimension { expected: 1, got: 2 }));
    }

    #[test]
    fn a_reply_whose_vectors_change_length_is_refused() {
        let cfg: EmbeddingsConfig = serde_json::from_value(
            json!({"provider": "openai", "model": "nomic-embed-text", "baseUrl": "http://localhost:11434/v1"}),
        )
        .unwrap();
        let embedder = build_embedder(&cfg, &|_| None, "recall.embeddings", None).unwrap();
        let reply = |dims: usize| json!({"data": [{"index": 0, "embedding": vec![0.5; dims]}]});
        assert!(embedder.accept(&reply(4), 1).is_ok());
        assert!(embedder.accept(&reply(4), 1).is_ok());
        assert_eq!(
            embedder.accept(&reply(3), 1),
            Err(EmbedError::BadDimension { expected: 4, got: 3 })
        );
    }

    #[test]
    fn the_endpoint_is_checked_like_the_summarizer_section() {
        let cfg: EmbeddingsConfig = serde_json::from_value(json!({
            "provider": "openai", "model": "nomic-embed-text", "baseUrl": "ftp://x"
        }))
        .unwrap();
        let err = build_embedder(&cfg, &|_| None, "recall.embeddings", None).unwrap_err();
        assert!(err.to_string().starts_with("recall.embeddings.baseUrl:"), "{err}");
        let remote: EmbeddingsConfig =
            serde_json::from_value(json!({"provider": "openai", "model": "text-embedding-3-small"})).unwrap();
        let err = build_embedder(&remote, &|_| None, "recall.embeddings", None).unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
        let local: EmbeddingsConfig = serde_json::from_value(
            json!({"provider": "openai", "model": "nomic-embed-text", "baseUrl": "http://localhost:11434/v1"}),
        )
        .unwrap();
        assert!(build_embedder(&local, &|_| None, "recall.embeddings", None).is_ok());
    }
}
