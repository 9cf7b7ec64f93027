//! Voice and audio to text (the app config's `transcription` block): one
//! OpenAI-compatible `POST {baseUrl}/audio/transcriptions` per file, a
//! multipart form with `file` and `model`, answered `{"text": …}` — what
//! OpenAI, Groq, a local whisper.cpp server or faster-whisper's server
//! speak. The audio and the transcript never reach a log line, a metric
//! or an error; the key never leaves the `Authorization` header.

use super::build::api_key;
use super::build_error::BuildError;
use super::config::{FieldError, ModelConfig, Provider};
use super::redact::Secret;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The `transcription` section: shaped like `summarizer`, for a
/// transcription endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptionConfig {
    /// Only `openai` (any OpenAI-compatible server) for now.
    pub provider: Provider,
    /// Including `/v1`; we append `/audio/transcriptions`. Default
    /// `https://api.openai.com/v1`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The *name* of the variable holding the key (default
    /// `OPENAI_API_KEY`; `""` sends none; a server on localhost needs none).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The model the endpoint knows (`whisper-1`, `whisper-large-v3`, …).
    pub model: String,
    /// The longest one transcription may take.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

fn default_timeout_secs() -> u64 {
    60
}

impl TranscriptionConfig {
    /// The field that cannot work, by its path under `transcription`.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.provider != Provider::Openai {
            return Err(FieldError::new(
                "provider",
                format!(
                    "`{}` cannot transcribe; use \"openai\" (any OpenAI-compatible /audio/transcriptions server)",
                    self.provider
                ),
            ));
        }
        if self.model.trim().is_empty() {
            return Err(FieldError::new(
                "model",
                "name the transcription model (e.g. \"whisper-1\")".into(),
            ));
        }
        if self.timeout_secs == 0 {
            return Err(FieldError::new("timeoutSecs", "must be at least 1".into()));
        }
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(FieldError::new("baseUrl", format!("`{url}` is not an http(s) URL")));
        }
        Ok(())
    }

    /// As a model config, for the key rules every backend shares.
    fn as_model(&self) -> ModelConfig {
        ModelConfig {
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            timeout_secs: self.timeout_secs,
            ..ModelConfig::new(Provider::Openai, self.model.clone())
        }
    }
}

/// Why a file could not be transcribed (no text of it inside).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranscribeError {
    #[error("the transcription service did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the transcription service could not be reached")]
    Connect,
    #[error("the transcription service refused the file (HTTP {0})")]
    Status(u16),
    #[error("the transcription service's answer could not be read")]
    Unreadable,
}

impl TranscribeError {
    /// The reason label of `mnemo_transcription_failures`.
    pub fn reason(&self) -> &'static str {
        match self {
            TranscribeError::Timeout(_) => "timeout",
            TranscribeError::Connect => "connect",
            TranscribeError::Status(_) => "status",
            TranscribeError::Unreadable => "unreadable",
        }
    }
}

/// A ready transcription client.
pub struct Transcriber {
    client: reqwest::Client,
    url: String,
    key: Option<Secret>,
    model: String,
    timeout: Duration,
}

impl std::fmt::Debug for Transcriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transcriber({} {})", self.model, self.url)
    }
}

impl Transcriber {
    /// The client for `cfg`, its key read through `env` (the variable
    /// named, unless the server is local or none is to be sent).
    pub fn build(cfg: &TranscriptionConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Transcriber, BuildError> {
        let model = cfg.as_model();
        let key = api_key(&model, env, "transcription")?.map(|(_, secret)| secret);
        let base = model.base_url().unwrap_or("https://api.openai.com/v1");
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| BuildError::Http {
                section: "transcription".into(),
                detail: e.to_string(),
            })?;
        Ok(Transcriber {
            client,
            url: format!("{}/audio/transcriptions", base.trim_end_matches('/')),
            key,
            model: cfg.model.clone(),
            timeout: Duration::from_secs(cfg.timeout_secs),
        })
    }

    /// The text spoken in `audio` (named `name`, of type `mime`).
    pub async fn transcribe(&self, audio: &[u8], name: &str, mime: &str) -> Result<String, TranscribeError> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, self.call(audio, name, mime))
            .await
            .unwrap_or(Err(TranscribeError::Timeout(self.timeout)));
        let metrics = crate::ops::metrics::metrics();
        match &result {
            Ok(_) => metrics.transcribed(started.elapsed()),
            Err(e) => metrics.transcription_failed(e.reason()),
        }
        result
    }

    async fn call(&self, audio: &[u8], name: &str, mime: &str) -> Result<String, TranscribeError> {
        let (boundary, body) = multipart(audio, name, mime, &self.model);
        let mut request = self
            .client
            .post(&self.url)
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                TranscribeError::Timeout(self.timeout)
            } else {
                TranscribeError::Connect
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(TranscribeError::Status(status.as_u16()));
        }
        #[derive(Deserialize)]
        struct Answer {
            text: String,
        }
        let answer: Answer = response.json().await.map_err(|_| TranscribeError::Unreadable)?;
        Ok(answer.text.trim().to_string())
    }
}

/// A `multipart/form-data` body with the fields `model` and `file`; the
/// boundary is random, so no audio can contain it by chance.
fn multipart(audio: &[u8], name: &str, mime: &str, model: &str) -> (String, Vec<u8>) {
    let boundary = format!("mnemo-{:032x}", rand::random::<u128>());
    // A header value cannot hold a quote or a line break.
    let name: String = name
        .chars()
        .map(|c| if c == '"' || c.is_control() { '_' } else { c })
        .collect();
    let mut body = Vec::with_capacity(audio.len() + 512);
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n").as_bytes(),
    );
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {mime}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(audio);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (boundary, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> TranscriptionConfig {
        let mut base = serde_json::json!({ "provider": "openai", "model": "whisper-1" });
        base.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn a_config_that_cannot_work_is_refused_by_its_field() {
        assert!(config(serde_json::json!({})).validate().is_ok());
        let field = |c: TranscriptionConfig| c.validate().unwrap_err().to_string();
        assert!(field(config(serde_json::json!({ "provider": "anthropic" }))).contains("provider"));
        assert!(field(config(serde_json::json!({ "model": " " }))).contains("model"));
        assert!(field(config(serde_json::json!({ "timeoutSecs": 0 }))).contains("timeoutSecs"));
        assert!(field(config(serde_json::json!({ "baseUrl": "ftp://x" }))).contains("baseUrl"));
        assert!(
            serde_json::from_value::<TranscriptionConfig>(
                serde_json::json!({ "provider": "openai", "model": "m", "nope": 1 })
            )
            .is_err()
        );
    }

    #[test]
    fn the_key_is_required_for_a_remote_server_and_not_for_a_local_one() {
        let none = |_: &str| None;
        assert!(Transcriber::build(&config(serde_json::json!({})), &none).is_err());
        let local = config(serde_json::json!({ "baseUrl": "http://127.0.0.1:8080/v1" }));
        let t = Transcriber::build(&local, &none).unwrap();
        assert_eq!(t.url, "http://127.0.0.1:8080/v1/audio/transcriptions");
        assert!(t.key.is_none());
        let keyless = config(serde_json::json!({ "apiKeyEnv": "" }));
        assert!(Transcriber::build(&keyless, &none).is_ok());
    }

    #[test]
    fn the_form_holds_the_model_and_the_file_with_a_safe_name() {
        let (boundary, body) = multipart(b"OggS-audio", "we\"ird\nname.ogg", "audio/ogg", "whisper-1");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"model\"\r\n\r\nwhisper-1\r\n"));
        assert!(text.contains("filename=\"we_ird_name.ogg\"\r\nContent-Type: audio/ogg\r\n\r\nOggS-audio\r\n"));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
