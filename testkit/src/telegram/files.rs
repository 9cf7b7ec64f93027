//! The fake's files, served as the Bot API serves them to bots: `getFile`
//! turns a `file_id` into a `file_path` (refusing a file over 20 MB with
//! Telegram's "Bad Request: file is too big", and an unknown id with
//! "Bad Request: invalid file_id"), and `GET /file/bot<token>/<file_path>`
//! returns its bytes with its content type (404 for a wrong token or
//! path). A file can be set to stall: its download sends the headers and
//! then nothing.

use super::{FakeBotApi, TOKEN, reply};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The Bot API's download limit for bots.
const BOT_DOWNLOAD_LIMIT: usize = 20 * 1024 * 1024;

/// The files the fake serves, by `file_id`, and the downloads made.
#[derive(Default)]
pub(super) struct Files {
    by_id: std::collections::HashMap<String, FakeFile>,
    downloads: usize,
}

/// One file the fake serves.
#[derive(Clone)]
pub(super) struct FakeFile {
    path: String,
    bytes: Vec<u8>,
    content_type: String,
    stall: bool,
}

impl FakeBotApi {
    /// Serves `bytes` as the file `file_id` (its path under `voice/`,
    /// `photos/` … as Telegram names them), with `content_type`.
    pub fn add_file(&self, file_id: &str, path: &str, bytes: Vec<u8>, content_type: &str) {
        self.inner.lock().unwrap().files.by_id.insert(
            file_id.into(),
            FakeFile {
                path: path.into(),
                bytes,
                content_type: content_type.into(),
                stall: false,
            },
        );
    }

    /// Like [`FakeBotApi::add_file`], but its download never sends a byte
    /// after the headers.
    pub fn add_stalling_file(&self, file_id: &str, path: &str) {
        self.add_file(file_id, path, vec![0; 1000], "application/octet-stream");
        if let Some(file) = self.inner.lock().unwrap().files.by_id.get_mut(file_id) {
            file.stall = true;
        }
    }

    /// How many file downloads (`/file/…` GETs) were made, answered or not.
    pub fn file_downloads(&self) -> usize {
        self.inner.lock().unwrap().files.downloads
    }
}

/// `getFile`'s answer for `params`: the file's `file_path`, or Telegram's 400.
pub(super) fn get_file(api: &FakeBotApi, params: &Value) -> Response {
    let id = params["file_id"].as_str().unwrap_or_default();
    let inner = api.inner.lock().unwrap();
    let refused = |description: &str| {
        reply(
            400,
            json!({"ok": false, "error_code": 400, "description": description}).to_string(),
        )
    };
    let Some(file) = inner.files.by_id.get(id) else {
        return refused("Bad Request: invalid file_id");
    };
    if file.bytes.len() > BOT_DOWNLOAD_LIMIT {
        return refused("Bad Request: file is too big");
    }
    let result = json!({
        "file_id": id, "file_unique_id": format!("u-{id}"),
        "file_size": file.bytes.len(), "file_path": file.path,
    });
    reply(200, json!({ "ok": true, "result": result }).to_string())
}

/// `GET /file/bot<token>/<file_path>`.
pub(super) async fn download(State(api): State<FakeBotApi>, Path((token, path)): Path<(String, String)>) -> Response {
    let found = {
        let mut inner = api.inner.lock().unwrap();
        inner.files.downloads += 1;
        inner.files.by_id.values().find(|f| f.path == path).cloned()
    };
    let file = match found {
        Some(file) if token == format!("bot{TOKEN}") => file,
        _ => {
            return reply(
                404,
                json!({"ok": false, "error_code": 404, "description": "Not Found"}).to_string(),
            );
        }
    };
    if file.stall {
        // Headers, then a body that never sends a byte.
        let never = futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>();
        return (
            [("content-type", file.content_type)],
            axum::body::Body::from_stream(never),
        )
            .into_response();
    }
    ([("content-type", file.content_type)], file.bytes).into_response()
}
