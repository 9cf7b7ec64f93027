//! Model backends (DESIGN §7): one [`Model`] trait, chosen in the app config,
//! with three implementations — `openai` (any OpenAI-compatible
//! chat-completions endpoint), `anthropic` (Messages API) and `command` (a
//! CLI run as a subprocess) — wrapped in retries and an optional fallback.
//!
//! This module owns the request/reply types, the typed [`ModelError`] the
//! broker turns into a true sentence for the user, and [`build`], which turns
//! a [`ModelConfig`] into a ready `Arc<dyn Model>`. It never touches memory
//! files and never reads the process environment itself: the environment is
//! a parameter, so tests never mutate it. Secrets never reach a log line or
//! an error message ([`redact`]).

mod anthropic;
mod build;
mod build_error;
mod command;
pub mod config;
pub mod embeddings;
mod http;
pub mod image;
mod openai;
pub mod redact;
mod retry;
mod sse;
mod summarizer;
pub mod tools;
pub mod transcribe;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use mnemo_sessions::context::Context;
use std::time::Duration;

pub use build::{build, build_section, build_serving};
pub use build_error::BuildError;
pub use config::{FieldError, ModelConfig, ModelOverride, NO_MODEL_HELP, Provider, from_env};
pub use redact::redact;
pub use retry::{RetryPolicy, Retrying, WithFallback, policy_for};
pub use summarizer::{MAX_SUMMARY_CHARS, ModelSummarizer, metered};
pub use tools::{ToolCall, ToolExecutor, ToolLimits, ToolOffer, ToolResult, ToolRound, ToolSpec};

/// The parts of a streamed reply, in order. The stream ends with `None`
/// only after the backend's end marker (`[DONE]`, `message_stop`); a reply
/// cut before that ends with an `Err`, never with a silent short "success".
pub type DeltaStream = BoxStream<'static, Result<StreamPart, ModelError>>;

/// One piece of a streamed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamPart {
    /// More of the reply's text.
    Text(String),
    /// A tool call the model asked for, whole: the backend assembles it
    /// from its deltas (OpenAI `tool_calls` deltas, Anthropic `tool_use`
    /// blocks) and yields it once its arguments are complete.
    Call(ToolCall),
    /// Token counts as the backend reported them (for the metrics).
    Usage(Usage),
}

impl StreamPart {
    /// The text of a [`StreamPart::Text`], else `None`.
    pub fn into_text(self) -> Option<String> {
        match self {
            StreamPart::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// A chat model the broker can ask. Object-safe; used as `Arc<dyn Model>`.
#[async_trait]
pub trait Model: Send + Sync {
    /// The whole reply at once.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError>;

    /// The reply as it is written, for edit-in-place messages. Errors before
    /// the first part (connect, HTTP status, no reply text within the
    /// call's timeout, an error event before any text) come back here, so
    /// retries and the fallback can still act; errors after that arrive in
    /// the stream, the call's deadline among them.
    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError>;

    /// Whether [`Model::stream`] really yields the reply as it is written
    /// (the HTTP backends) rather than all at once at the end (a command).
    /// The broker streams answers only from a backend that does.
    fn streams(&self) -> bool {
        false
    }

    /// One line for logs and `mnemo config check`, e.g.
    /// `openai gpt-4o-mini @ https://api.openai.com/v1`. Never a secret.
    fn describe(&self) -> String;

    /// Whether [`ModelRequest::tools`] reaches the model (native tool
    /// calling). A backend without it is never offered tools.
    fn supports_tools(&self) -> bool {
        false
    }
}

/// What one model call is given: the structured context and the message
/// being answered (sent once, as the last user turn — DESIGN §2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelRequest {
    pub context: Context,
    pub message: String,
    /// Per request, not per backend: the summarizer wants JSON, chat does not.
    pub format: ReplyFormat,
    /// Tools offered to the model (only by [`tools::answer`], only to a
    /// backend that [`Model::supports_tools`]).
    pub tools: Option<ToolOffer>,
    /// Tool rounds of this turn so far, sent after the message.
    pub rounds: Vec<ToolRound>,
    /// Photos sent with the message, for a model that sees images: part of
    /// the last user turn of this request only, never of memory.
    pub images: Vec<image::Image>,
}

impl ModelRequest {
    pub fn new(context: Context, message: impl Into<String>) -> Self {
        ModelRequest {
            context,
            message: message.into(),
            format: ReplyFormat::Text,
            tools: None,
            rounds: Vec::new(),
            images: Vec::new(),
        }
    }

    /// Ask for a JSON object (`response_format: json_object` on openai; the
    /// prompt alone elsewhere, which is why callers still parse leniently).
    pub fn json(mut self) -> Self {
        self.format = ReplyFormat::Json;
        self
    }
}

/// The shape of reply asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplyFormat {
    #[default]
    Text,
    Json,
}

/// A finished reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelReply {
    pub text: String,
    /// Present when the backend reports it (HTTP backends do; commands don't).
    pub usage: Option<Usage>,
    /// Tools the model wants called before it answers (empty for a final
    /// reply); only when the request offered tools.
    pub tool_calls: Vec<ToolCall>,
}

/// Token counts as the backend reported them, for logs and cost tracking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why a model call failed. Typed so the broker can tell the user something
/// true ([`ModelError::user_message`]) and so retries and the fallback act
/// only where trying again can help. Every `detail` is redacted before it is
/// stored here: Display and Debug are safe to log.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the model did not answer within {after:?}; raise timeoutSecs if replies are long")]
    Timeout { after: Duration },
    #[error("the model is rate limiting requests{}: {detail}", retry_hint(.retry_after))]
    RateLimited {
        retry_after: Option<Duration>,
        detail: String,
    },
    #[error("the model refused our credentials (HTTP {status}): {detail}; check the API key variable")]
    Auth { status: u16, detail: String },
    #[error("the model rejected the request (HTTP {status}): {detail}")]
    BadRequest { status: u16, detail: String },
    #[error("the model is unavailable{}: {detail}", retry_hint(.retry_after))]
    Unavailable {
        detail: String,
        retry_after: Option<Duration>,
        /// Where it came from (the `status` label of the failure metric).
        cause: Unreached,
    },
    #[error("the model's reply could not be read: {detail}")]
    Protocol { detail: String },
    #[error("the model command `{program}` failed: {detail}")]
    Command { program: String, detail: String },
}

/// Why a model was unavailable: an HTTP status (408, 5xx), no connection
/// (refused, reset, a DNS or TLS failure), or an error the server reported
/// inside its reply stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreached {
    Status(u16),
    Connect,
    InStream,
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(after) => format!(" (retry after {after:?})"),
        None => String::new(),
    }
}

impl ModelError {
    /// One short sentence for the person waiting for a reply. By the time a
    /// model is called their message is already in STM, so each says so.
    pub fn user_message(&self) -> &'static str {
        match self {
            ModelError::Timeout { .. } => {
                "The model took too long to answer. Your message is saved; please try again in a moment."
            }
            ModelError::RateLimited { .. } => {
                "The model is busy right now (rate limited). Your message is saved; please try again in a minute."
            }
            ModelError::Auth { .. } => {
                "The bot's model credentials were refused. Your message is saved; please tell the operator."
            }
            ModelError::BadRequest { .. } => {
                "The model rejected this request. Your message is saved; if it keeps happening, please tell the operator."
            }
            ModelError::Unavailable { .. } => {
                "The model is unavailable right now. Your message is saved; please try again later."
            }
            ModelError::Protocol { .. } => {
                "The model's reply was cut off or unreadable. Your message is saved; please try again."
            }
            ModelError::Command { .. } => "The model program failed. Your message is saved; please tell the operator.",
        }
    }

    /// Worth the same call again after a pause: rate limits, server errors,
    /// connection failures. Not timeouts (the person already waited a whole
    /// `timeoutSecs`), not 4xx, not a failed command.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ModelError::RateLimited { .. } | ModelError::Unavailable { .. })
    }

    /// Worth asking the fallback model: anything but our own mistakes. A bad
    /// key or a malformed request is the operator's to fix, and hiding it
    /// behind a fallback would keep it from ever being noticed.
    pub fn allows_fallback(&self) -> bool {
        !matches!(self, ModelError::Auth { .. } | ModelError::BadRequest { .. })
    }

    /// The failure's `status` label in the metrics: the HTTP status when
    /// there was one (`"429"`, `"401"`, `"503"`), else `timeout`,
    /// `connect`, `stream_error` (an error event in the reply stream),
    /// `unreadable` or `command`. A small fixed set; never a detail.
    pub fn status_label(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow;
        match self {
            ModelError::Timeout { .. } => Cow::Borrowed("timeout"),
            ModelError::RateLimited { .. } => Cow::Borrowed("429"),
            ModelError::Auth { status, .. } | ModelError::BadRequest { status, .. } => Cow::Owned(status.to_string()),
            ModelError::Unavailable { cause, .. } => match cause {
                Unreached::Status(status) => Cow::Owned(status.to_string()),
                Unreached::Connect => Cow::Borrowed("connect"),
                Unreached::InStream => Cow::Borrowed("stream_error"),
            },
            ModelError::Protocol { .. } => Cow::Borrowed("unreadable"),
            ModelError::Command { .. } => Cow::Borrowed("command"),
        }
    }

    /// How long the server asked us to wait, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after, .. } | ModelError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_errors_are_retried_and_only_our_mistakes_skip_the_fallback() {
        let auth = ModelError::Auth {
            status: 401,
            detail: String::new(),
        };
        let busy = ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(1)),
            detail: String::new(),
        };
        let timeout = ModelError::Timeout {
            after: Duration::from_secs(1),
        };
        assert!(!auth.is_retryable() && !auth.allows_fallback());
        assert!(busy.is_retryable() && busy.allows_fallback());
        assert!(!timeout.is_retryable() && timeout.allows_fallback());
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_rate_limit_and_a_refused_key_have_different_status_labels() {
        let auth = ModelError::Auth {
            status: 401,
            detail: String::new(),
        };
        let busy = ModelError::RateLimited {
            retry_after: None,
            detail: String::new(),
        };
        let down = |cause| ModelError::Unavailable {
            detail: String::new(),
            retry_after: None,
            cause,
        };
        assert_eq!(auth.status_label(), "401");
        assert_eq!(busy.status_label(), "429");
        assert_eq!(down(Unreached::Status(503)).status_label(), "503");
        assert_eq!(down(Unreached::Connect).status_label(), "connect");
        let timeout = ModelError::Timeout {
            after: Duration::from_secs(1),
        };
        assert_eq!(timeout.status_label(), "timeout");
    }
}
