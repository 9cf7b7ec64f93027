//! The HTTP half both web backends share: one reqwest client per endpoint,
//! the per-call timeout (the whole call, streamed or not), and the mapping of HTTP statuses and transport
//! failures onto [`ModelError`] (429 → rate limited, 401/403 → auth, other
//! 4xx → bad request, 5xx/408/connect → unavailable).
//!
//! It must not know any provider's request or reply JSON, and it must never
//! let the key out: headers holding it are marked sensitive, error details
//! are redacted with it, and URLs are shown only redacted.

use super::build_error::BuildError;
use super::redact::Secret;
use super::{ModelError, Unreached, redact};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest error detail we keep from a response body.
const MAX_DETAIL_CHARS: usize = 300;

/// Where and how one backend posts its requests.
pub(crate) struct HttpEndpoint {
    client: reqwest::Client,
    url: Url,
    /// Auth and extra headers; auth values are marked sensitive.
    headers: HeaderMap,
    timeout: Duration,
    /// Redacted from every error detail.
    key: Option<Secret>,
}

impl std::fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEndpoint")
            .field("url", &self.shown_url())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A header carrying the key, marked so it never shows in Debug output.
pub(crate) fn secret_header(value: &str, section: &str, var: &str) -> Result<HeaderValue, BuildError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| BuildError::BadApiKey {
        section: section.to_string(),
        var: var.to_string(),
    })?;
    header.set_sensitive(true);
    Ok(header)
}

impl HttpEndpoint {
    /// `url` is the full endpoint; `auth` the backend's key headers.
    pub fn new(
        url: Url,
        auth: HeaderMap,
        extra: &BTreeMap<String, String>,
        timeout: Duration,
        key: Option<Secret>,
        section: &str,
    ) -> Result<Self, BuildError> {
        let mut headers = auth;
        for (name, value) in extra {
            let bad = |reason: &str| {
                BuildError::Config(super::FieldError {
                    field: format!("{section}.extraHeaders.{name}"),
                    reason: reason.to_string(),
                })
            };
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("is not a valid header name"))?;
            let value = HeaderValue::from_str(value).map_err(|_| bad("is not a valid header value"))?;
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .user_agent(concat!("mnemo/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| BuildError::Http {
                section: section.to_string(),
                detail: error_chain(&e),
            })?;
        Ok(HttpEndpoint {
            client,
            url,
            headers,
            timeout,
            key,
        })
    }

    /// The endpoint URL with credentials redacted, for `describe` and errors.
    pub fn shown_url(&self) -> String {
        self.redact(self.url.as_str())
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `text` with the key and credential-looking values removed.
    pub fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) => redact(text, &[key.expose()]),
            None => redact(text, &[]),
        }
    }

    /// Posts `body` and returns the parsed JSON reply; the whole exchange,
    /// body included, must finish within the timeout.
    pub async fn post_json(&self, body: &impl serde::Serialize) -> Result<serde_json::Value, ModelError> {
        let exchange = async {
            let response = self.send(body).await?;
            self.read_json(response).await
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(ModelError::Timeout { after: self.timeout }))
    }

    /// Posts `body`, asking for a stream, by `deadline` (the call's whole
    /// time, [`Self::deadline`]). A success comes back as the response to
    /// read as a stream, or — from a server or proxy that ignores
    /// `stream: true` and answers `Content-Type: application/json` — as
    /// the whole reply, read by the same deadline.
    pub async fn post_for_stream(
        &self,
        body: &impl serde::Serialize,
        deadline: tokio::time::Instant,
    ) -> Result<Opened, ModelError> {
        let exchange = async {
            let response = self.send(body).await?;
            if is_json(response.headers()) {
                return Ok(Opened::Whole(self.read_json(response).await?));
            }
            Ok(Opened::Stream(response))
        };
        tokio::time::timeout_at(deadline, exchange)
            .await
            .unwrap_or(Err(ModelError::Timeout { after: self.timeout }))
    }

    /// When a call starting now must be over: the timeout bounds the
    /// whole call, streamed or not.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout
    }

    async fn read_json(&self, response: reqwest::Response) -> Result<serde_json::Value, ModelError> {
        let bytes = response.bytes().await.map_err(|e| ModelError::Protocol {
            detail: format!("the reply body was cut: {}", error_chain(&e)),
        })?;
        serde_json::from_slice(&bytes).map_err(|e| ModelError::Protocol {
            detail: format!(
                "the reply is not JSON ({e}): {}",
                self.redact(&clip(&String::from_utf8_lossy(&bytes)))
            ),
        })
    }

    async fn send(&self, body: &impl serde::Serialize) -> Result<reqwest::Response, ModelError> {
        let response = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers().clone();
        // The error body is only for the detail; a broken one is not worth
        // hiding the status over.
        let body = response.bytes().await.unwrap_or_default();
        Err(status_error(status, &headers, &body, |t| self.redact(t)))
    }

    fn transport_error(&self, error: &reqwest::Error) -> ModelError {
        let url = self.shown_url();
        let chain = self.redact(&error_chain(error));
        if error.is_connect() || error.is_timeout() {
            ModelError::Unavailable {
                detail: format!("could not connect to {url}: {chain}"),
                retry_after: None,
                cause: Unreached::Connect,
            }
        } else if error.is_body() || error.is_decode() {
            ModelError::Protocol {
                detail: format!("the reply from {url} was cut: {chain}"),
            }
        } else {
            ModelError::Unavailable {
                detail: format!("the request to {url} failed: {chain}"),
                retry_after: None,
                cause: Unreached::Connect,
            }
        }
    }
}

/// A streaming request's answer: a stream to read, or a whole JSON reply.
pub(crate) enum Opened {
    Stream(reqwest::Response),
    Whole(serde_json::Value),
}

/// Whether a response says its body is one JSON document
/// (`application/json`, any parameters), not a stream.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// The typed error for a non-success status.
pub(crate) fn status_error(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    redact: impl Fn(&str) -> String,
) -> ModelError {
    let detail = redact(&error_detail(status, body));
    let code = status.as_u16();
    match code {
        429 => ModelError::RateLimited {
            retry_after: retry_after(headers),
            detail,
        },
        401 | 403 => ModelError::Auth { status: code, detail },
        408 | 500..=599 => ModelError::Unavailable {
            detail: format!("HTTP {code}: {detail}"),
            retry_after: retry_after(headers),
            cause: Unreached::Status(code),
        },
        400..=499 => ModelError::BadRequest { status: code, detail },
        _ => ModelError::Protocol {
            detail: format!("unexpected HTTP {code}: {detail}"),
        },
    }
}

/// The provider's own error message when the body has one (`error.message`
/// in both OpenAI's and Anthropic's shape), else the clipped body.
fn error_detail(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error"))
            .or_else(|| json.get("message"))
            .or_else(|| json.get("detail"));
        if let Some(message) = message.and_then(|m| m.as_str()) {
            return clip(message);
        }
    }
    match text.trim() {
        "" => status.canonical_reason().unwrap_or("no details").to_string(),
        text => clip(text),
    }
}

/// How long the server asked us to wait: `retry-after-ms` (OpenAI), else
/// `Retry-After` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// At most [`MAX_DETAIL_CHARS`] characters, on a character boundary.
pub(crate) fn clip(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// A reqwest error and its causes, without the URL (which may carry a key
/// in its query), redacted for good measure.
pub(crate) fn error_chain(error: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut current: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = current {
        let line = match e.downcast_ref::<reqwest::Error>() {
            Some(re) => strip_url(re),
            None => e.to_string(),
        };
        if !line.is_empty() && !text.contains(&line) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&line);
        }
        current = e.source();
    }
    redact(&text, &[])
}

fn strip_url(error: &reqwest::Error) -> String {
    let mut line = error.to_string();
    if let Some(url) = error.url() {
        line = line.replace(&format!(" for url ({url})"), "");
        line = line.replace(url.as_str(), "");
    }
    line
}

/// `base` with `segments` appended to its path, its query (some gateways
/// authenticate there) kept.
pub(crate) fn endpoint_url(base: &str, segments: &[&str], section: &str) -> Result<reqwest::Url, BuildError> {
    let bad = || {
        BuildError::Config(super::FieldError {
            field: format!("{section}.baseUrl"),
            reason: "must be an http:// or https:// URL".into(),
        })
    };
    let mut url = reqwest::Url::parse(base).map_err(|_| bad())?;
    url.path_segments_mut()
        .map_err(|_| bad())?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn endpoint_url_appends_the_path_and_keeps_the_query() {
        let url = endpoint_url("https://gw.example/v1/?key=k", &["chat", "completions"], "model").unwrap();
        assert_eq!(url.as_str(), "https://gw.example/v1/chat/completions?key=k");
        let url = endpoint_url("http://localhost:11434/v1", &["chat", "completions"], "model").unwrap();
        assert_eq!(url.as_str(), "http://localhost:11434/v1/chat/completions");
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        let past = "Wed, 21 Oct 2015 07:28:00 GMT";
        assert_eq!(retry_after(&headers(&[("retry-after", past)])), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
    }

    #[test]
    fn statuses_map_to_the_error_the_user_should_hear() {
        let none = HeaderMap::new();
        let same = |t: &str| t.to_string();
        let err = |code: u16| status_error(StatusCode::from_u16(code).unwrap(), &none, b"", same);
        assert!(matches!(err(429), ModelError::RateLimited { .. }));
        assert!(matches!(err(401), ModelError::Auth { status: 401, .. }));
        assert!(matches!(err(403), ModelError::Auth { status: 403, .. }));
        assert!(matches!(err(404), ModelError::BadRequest { status: 404, .. }));
        assert!(matches!(err(408), ModelError::Unavailable { .. }));
        assert!(matches!(err(529), ModelError::Unavailable { .. }));
    }

    #[test]
    fn error_detail_prefers_the_providers_message() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
        assert_eq!(error_detail(StatusCode::BAD_REQUEST, body), "max_tokens: required");
        assert_eq!(error_detail(StatusCode::BAD_GATEWAY, b""), "Bad Gateway");
    }

    #[test]
    fn only_a_json_content_type_is_read_as_a_whole_reply() {
        assert!(is_json(&headers(&[("content-type", "application/json")])));
        assert!(is_json(&headers(&[(
            "content-type",
            "Application/JSON; charset=utf-8"
        )])));
        assert!(!is_json(&headers(&[("content-type", "text/event-stream")])));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn clip_cuts_long_details_on_a_character_boundary() {
        let long = "é".repeat(MAX_DETAIL_CHARS + 10);
        assert_eq!(clip(&long).chars().count(), MAX_DETAIL_CHARS + 1);
    }
}
