//! The seam between recall and a dense embedding model: recall asks an
//! [`Embedder`] for vectors of texts (the messages and notes it indexes,
//! and each turn's question) and never talks to a network itself. The
//! broker implements the trait over any OpenAI-compatible `/v1/embeddings`
//! endpoint (`src/model/embeddings.rs`); tests use the fake in the test kit.
//!
//! What an implementation owes recall: one finite vector per text, all of
//! one length, in the order asked; an error otherwise (recall then answers
//! from BM25 alone). Logging a failure, counting it and holding the turn's
//! budget are the implementation's; recall only adds a hard stop after the
//! budget in case one does not.

use async_trait::async_trait;
use std::time::Duration;

/// Why vectors are asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedPurpose {
    /// A turn's question: a person is waiting, so no retries, and an answer
    /// later than `budget` is worth nothing.
    Query { budget: Duration },
    /// Messages and notes being indexed, in the background: retried like
    /// any other model call.
    Index,
}

/// What went wrong, by kind (the kinds are the metric's outcomes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("the embeddings endpoint did not answer within {after:?}")]
    Timeout { after: Duration },
    #[error("the embeddings endpoint failed: {detail}")]
    Failed { detail: String },
    #[error("the embeddings reply could not be read: {detail}")]
    BadReply { detail: String },
    #[error("the embeddings reply has vectors of {got} dimensions where {expected} were expected")]
    BadDimension { expected: usize, got: usize },
    #[error("the embeddings reply holds a value that is not a finite number (NaN or infinite)")]
    NotFinite,
}

impl EmbedError {
    /// A short fixed word for metrics and logs.
    pub fn outcome(&self) -> &'static str {
        match self {
            EmbedError::Timeout { .. } => "timeout",
            EmbedError::Failed { .. } => "failed",
            EmbedError::BadReply { .. } => "bad_reply",
            EmbedError::BadDimension { .. } => "bad_dimension",
            EmbedError::NotFinite => "not_finite",
        }
    }
}

/// A dense embedding model.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// One vector per text of `texts`, in the same order.
    async fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// The model's name: stored vectors of another model are not compared
    /// with this one's, they are computed again.
    fn model(&self) -> &str;
}

/// Checks what an implementation owes (see the module doc), so a faulty
/// one cannot put a NaN or a vector of another length into an index.
pub(crate) fn checked(texts: usize, vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, EmbedError> {
    if vectors.len() != texts {
        return Err(EmbedError::BadReply {
            detail: format!("{} vectors for {texts} texts", vectors.len()),
        });
    }
    let dims = vectors.first().map_or(0, Vec::len);
    if let Some(bad) = vectors.iter().find(|v| v.len() != dims || v.is_empty()) {
        return Err(EmbedError::BadDimension {
            expected: dims,
            got: bad.len(),
        });
    }
    if vectors.iter().flatten().any(|x| !x.is_finite()) {
        return Err(EmbedError::NotFinite);
    }
    Ok(vectors)
}
