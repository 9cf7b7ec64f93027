//! Shared files as Slack serves them: `GET /files-pri/<team>-<file>/…`
//! (the `url_private_download` of a message's `files`) returns the bytes
//! with their content type only with `Authorization: Bearer <bot token>`;
//! without it Slack answers 200 with its HTML sign-in page, not the file.

use super::{BOT_TOKEN, FakeSlack, Inner};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// What Slack sends instead of a private file to a request without the token.
pub const SIGN_IN_PAGE: &str =
    "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to your workspace</body></html>";

impl FakeSlack {
    /// Serves `bytes` as a private file named `name`; returns its
    /// `url_private_download`.
    pub fn add_file(&self, id: &str, name: &str, bytes: Vec<u8>, content_type: &str) -> String {
        let path = format!("T1-{id}/download/{name}");
        self.inner
            .files
            .lock()
            .unwrap()
            .insert(path.clone(), (bytes, content_type.to_string()));
        format!("{}/files-pri/{path}", self.api_url.trim_end_matches("/api"))
    }

    /// File downloads so far: (path, whether they carried the bot token).
    pub fn file_downloads(&self) -> Vec<(String, bool)> {
        self.inner.file_downloads.lock().unwrap().clone()
    }
}

pub(super) async fn download(State(fake): State<Arc<Inner>>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    let authorized = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {BOT_TOKEN}"));
    fake.file_downloads.lock().unwrap().push((path.clone(), authorized));
    let file = fake.files.lock().unwrap().get(&path).cloned();
    match (authorized, file) {
        (true, Some((bytes, content_type))) => ([("content-type", content_type)], bytes).into_response(),
        (true, None) => (axum::http::StatusCode::NOT_FOUND, "file_not_found").into_response(),
        (false, _) => ([("content-type", "text/html; charset=utf-8".to_string())], SIGN_IN_PAGE).into_response(),
    }
}
