//! The fake Bot API's HTTP plumbing: method names, multipart bodies and
//! JSON answers.

use axum::extract::Multipart;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub(super) fn lower_camel(method: &str) -> String {
    let mut chars = method.chars();
    chars
        .next()
        .map(|first| first.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

pub(super) async fn read_multipart(mut form: Multipart) -> (Value, Option<(String, Vec<u8>)>) {
    let mut fields = serde_json::Map::new();
    let mut file = None;
    while let Some(field) = form.next_field().await.unwrap() {
        let name = field.name().unwrap_or_default().to_string();
        match field.file_name().map(str::to_string) {
            Some(file_name) => file = Some((file_name, field.bytes().await.unwrap().to_vec())),
            None => {
                fields.insert(name, Value::String(field.text().await.unwrap()));
            }
        }
    }
    (Value::Object(fields), file)
}

pub(super) fn reply(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap();
    (status, [("content-type", "application/json")], body).into_response()
}
