//! Message attachments as Discord's CDN serves them:
//! `GET /attachments/<channel>/<attachment>/<filename>?ex=…&is=…&hm=…`.
//! No token (the CDN is public), but the URL must be the signed one
//! Discord handed out: without its `ex`, `is` and `hm` parameters the CDN
//! answers 404 "This content is no longer available.".

use super::{FakeDiscord, Inner};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;

impl FakeDiscord {
    /// Serves `bytes` as attachment `id` in `channel`; returns its signed
    /// CDN URL (what a message's `attachments[].url` holds).
    pub fn add_attachment(
        &self,
        channel: &str,
        id: &str,
        filename: &str,
        bytes: Vec<u8>,
        content_type: &str,
    ) -> String {
        let path = format!("{channel}/{id}/{filename}");
        self.inner
            .cdn
            .lock()
            .expect("lock")
            .insert(path.clone(), (bytes, content_type.to_string()));
        format!(
            "{}/attachments/{path}?ex=6a1b2c3d&is=6a0a1b2c&hm=0f1e2d3c4b5a",
            self.inner.base
        )
    }

    /// CDN downloads so far, by path.
    pub fn cdn_downloads(&self) -> Vec<String> {
        self.inner.cdn_downloads.lock().expect("lock").clone()
    }
}

pub(super) async fn attachment(
    State(inner): State<Arc<Inner>>,
    Path(path): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    inner.cdn_downloads.lock().expect("lock").push(path.clone());
    let signed = ["ex", "is", "hm"].iter().all(|k| query.contains_key(*k));
    let file = inner.cdn.lock().expect("lock").get(&path).cloned();
    match (signed, file) {
        (true, Some((bytes, content_type))) => ([("content-type", content_type)], bytes).into_response(),
        _ => (StatusCode::NOT_FOUND, "This content is no longer available.").into_response(),
    }
}
