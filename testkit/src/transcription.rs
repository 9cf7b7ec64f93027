//! A fake OpenAI-compatible transcription endpoint on 127.0.0.1:
//! `POST /v1/audio/transcriptions` with a `multipart/form-data` body of
//! `file` (with a file name) and `model`, answered `{"text": …}` as OpenAI,
//! Groq, whisper.cpp's server and faster-whisper's server answer. Like
//! OpenAI it refuses a request without `Authorization: Bearer <key>`
//! (when the test set a key) with 401, and one without `file` or `model`
//! with 400. What it hears in a file is scripted by the file's bytes
//! ([`FakeTranscriber::speak`]); it can be slowed down or made to fail.

use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One transcription request as it arrived.
#[derive(Clone, Debug)]
pub struct Heard {
    pub model: String,
    pub file_name: String,
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    transcripts: HashMap<Vec<u8>, String>,
    heard: Vec<Heard>,
    key: Option<String>,
    delay: Duration,
    fail_with: Option<u16>,
}

/// The fake server; cheap to clone.
#[derive(Clone)]
pub struct FakeTranscriber {
    /// The base URL to put in `transcription.baseUrl` (ends in `/v1`).
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl FakeTranscriber {
    /// Starts it; with `key`, requests must carry it as a bearer token.
    pub async fn start(key: Option<&str>) -> FakeTranscriber {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = FakeTranscriber {
            url: format!("http://{}/v1", listener.local_addr().unwrap()),
            inner: Arc::new(Mutex::new(Inner {
                key: key.map(str::to_string),
                ..Inner::default()
            })),
        };
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(fake.clone());
        #[allow(clippy::disallowed_methods)] // a fake service, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    /// A file of exactly `audio` says `text`.
    pub fn speak(&self, audio: &[u8], text: &str) {
        self.inner
            .lock()
            .unwrap()
            .transcripts
            .insert(audio.to_vec(), text.into());
    }

    /// Every request so far.
    pub fn heard(&self) -> Vec<Heard> {
        self.inner.lock().unwrap().heard.clone()
    }

    /// Each answer waits `delay` first.
    pub fn set_delay(&self, delay: Duration) {
        self.inner.lock().unwrap().delay = delay;
    }

    /// Every request is answered `status` (an OpenAI-style error) until `None`.
    pub fn fail_with(&self, status: Option<u16>) {
        self.inner.lock().unwrap().fail_with = status;
    }
}

async fn transcribe(State(fake): State<FakeTranscriber>, headers: HeaderMap, mut form: Multipart) -> Response {
    let error = |status: StatusCode, message: &str| {
        (
            status,
            axum::Json(json!({ "error": { "message": message, "type": "invalid_request_error" } })),
        )
            .into_response()
    };
    let expected = fake.inner.lock().unwrap().key.clone();
    if let Some(key) = expected {
        let given = headers.get("authorization").and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {key}").as_str()) {
            return error(StatusCode::UNAUTHORIZED, "Incorrect API key provided");
        }
    }
    let (mut model, mut file) = (None, None);
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("model") => model = field.text().await.ok(),
            Some("file") => {
                let name = field.file_name().map(str::to_string);
                let content_type = field.content_type().map(str::to_string);
                let bytes = field.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                file = name.map(|n| (n, content_type, bytes));
            }
            _ => {}
        }
    }
    let (Some(model), Some((file_name, content_type, bytes))) = (model, file) else {
        return error(StatusCode::BAD_REQUEST, "file and model are required");
    };
    let (delay, fail_with, text) = {
        let mut inner = fake.inner.lock().unwrap();
        let text = inner.transcripts.get(&bytes).cloned().unwrap_or_default();
        inner.heard.push(Heard {
            model,
            file_name,
            content_type,
            bytes,
        });
        (inner.delay, inner.fail_with, text)
    };
    tokio::time::sleep(delay).await;
    if let Some(status) = fail_with {
        return error(StatusCode::from_u16(status).unwrap(), "the server had an error");
    }
    axum::Json(json!({ "text": text })).into_response()
}
