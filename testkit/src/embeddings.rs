//! A fake OpenAI-compatible embeddings server (`POST /v1/embeddings`) on
//! 127.0.0.1, for recall's tests and benchmark.
//!
//! It answers like the real API: `input` a string or an array of strings,
//! the reply `{"object": "list", "data": [{"object": "embedding", "index",
//! "embedding": [...]}], "model", "usage"}` in input order, 400 with an
//! `error` object for a request without `model` or `input`. Its vectors are
//! deterministic and meaningful enough to test retrieval: a hashed bag of
//! *concepts* — words lowercased, plural/past endings cut, stop words
//! dropped, and a small built-in thesaurus mapping synonyms to one concept
//! ([`SYNONYMS`]: "automobile" and "car" are one, "parked" and "left" are
//! one) — so a paraphrase is near its original where BM25, matching words,
//! finds nothing. It is a test fake, not a model: say so wherever its
//! numbers are reported.
//!
//! The test can take it down (503), slow it, make it answer vectors of
//! another length, or `NaN` values (as Python's `json.dumps` writes them).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Length of the fake's vectors.
pub const DIMS: usize = 64;

/// Words the fake treats as one concept (word, concept).
pub const SYNONYMS: &[(&str, &str)] = &[
    ("automobile", "car"),
    ("vehicle", "car"),
    ("left", "park"),
    ("leave", "park"),
    ("physician", "doctor"),
    ("medic", "doctor"),
    ("spouse", "wife"),
    ("husband", "wife"),
    ("partner", "wife"),
    ("feline", "cat"),
    ("kitten", "cat"),
    ("puppy", "dog"),
    ("canine", "dog"),
    ("allergy", "allergic"),
    ("job", "work"),
    ("employer", "work"),
    ("occupation", "work"),
    ("pal", "friend"),
    ("buddy", "friend"),
    ("residence", "home"),
    ("house", "home"),
    ("apartment", "home"),
    ("flat", "home"),
];

const STOP: &[&str] = &[
    "a", "an", "the", "i", "my", "me", "you", "your", "is", "are", "was", "were", "be", "did", "do", "does", "to",
    "of", "in", "on", "at", "and", "or", "it", "that", "this", "what", "where", "when", "who", "how", "which", "for",
    "with", "again", "we", "our", "so", "have", "has", "had",
];

/// What the fake does with the next requests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Mode {
    /// Answers good vectors.
    #[default]
    Serving,
    /// 503, like a server being restarted.
    Down,
    /// Answers good vectors after this long.
    Slow(Duration),
    /// Answers vectors of this many dimensions instead of [`DIMS`].
    Dims(usize),
    /// Writes `NaN` into every vector (invalid JSON, as some servers send).
    NaN,
}

/// The fake server's state, shared with the test.
#[derive(Clone, Default)]
pub struct FakeEmbeddings {
    pub mode: Arc<Mutex<Mode>>,
    /// Every request body, in order.
    pub requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeEmbeddings {
    /// Starts the server; returns it and its base URL (`http://…/v1`).
    pub async fn start() -> (FakeEmbeddings, String) {
        let fake = FakeEmbeddings::default();
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        #[allow(clippy::disallowed_methods)] // a fake platform, not one of mnemo's listeners
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, url)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Texts embedded so far, across requests.
    pub fn inputs(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| inputs_of(r).unwrap_or_default())
            .collect()
    }

    /// Number of requests so far.
    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// The fake's vector of `text`: a bag of concepts hashed into [`DIMS`]
/// counts (not normalised, as real APIs need not be).
pub fn vector_of(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; DIMS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if STOP.contains(&word.as_str()) {
            continue;
        }
        let concept = concept(&word);
        vector[(fnv(concept.as_bytes()) % DIMS as u64) as usize] += 1.0;
    }
    vector
}

fn concept(word: &str) -> String {
    let lookup = |w: &str| SYNONYMS.iter().find(|(s, _)| *s == w).map(|(_, c)| c.to_string());
    if let Some(c) = lookup(word) {
        return c;
    }
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(stem) = word.strip_suffix(suffix)
            && stem.len() >= 3
        {
            return lookup(stem).unwrap_or_else(|| stem.to_string());
        }
    }
    word.to_string()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn inputs_of(body: &Value) -> Option<Vec<String>> {
    match body.get("input")? {
        Value::String(one) => Some(vec![one.clone()]),
        Value::Array(many) => many.iter().map(|v| v.as_str().map(str::to_string)).collect(),
        _ => None,
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (status, Json(body)).into_response()
}

async fn embeddings(State(fake): State<FakeEmbeddings>, Json(body): Json<Value>) -> Response {
    fake.requests.lock().unwrap().push(body.clone());
    let mode = *fake.mode.lock().unwrap();
    let Some(model) = body.get("model").and_then(Value::as_str).map(str::to_string) else {
        return error(StatusCode::BAD_REQUEST, "you must provide a model parameter");
    };
    let Some(inputs) = inputs_of(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "'input' must be a string or an array of strings",
        );
    };
    let dims = match mode {
        Mode::Down => return (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response(),
        Mode::Slow(delay) => {
            tokio::time::sleep(delay).await;
            DIMS
        }
        Mode::Dims(n) => n,
        Mode::Serving | Mode::NaN => DIMS,
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut vector = vector_of(text);
            vector.resize(dims, 0.5);
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|t| t.split_whitespace().count()).sum();
    let reply = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    if mode == Mode::NaN {
        let text = reply.to_string().replace("\"embedding\":[", "\"embedding\":[NaN,");
        return ([("content-type", "application/json")], text).into_response();
    }
    Json(reply).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn a_paraphrase_is_nearer_than_an_unrelated_sentence() {
        let told = vector_of("I parked the automobile on level three of the north garage");
        let asked = vector_of("Where did I leave my car?");
        let other = vector_of("The weather was lovely at the beach today");
        assert!(cosine(&told, &asked) > 0.3, "{}", cosine(&told, &asked));
        assert!(cosine(&other, &asked) < 0.1);
    }

    #[tokio::test]
    async fn it_answers_a_batch_in_input_order_like_the_real_api() {
        let (fake, url) = FakeEmbeddings::start().await;
        let client = reqwest_free_post(&url, json!({"model": "m", "input": ["cat", "dog"]})).await;
        assert_eq!(client["data"][1]["index"], 1);
        assert_eq!(client["data"][0]["embedding"].as_array().unwrap().len(), DIMS);
        assert_eq!(fake.inputs(), ["cat", "dog"]);
    }

    /// A minimal HTTP/1.1 POST over a TCP stream (the test kit has no
    /// HTTP client dependency).
    async fn reqwest_free_post(url: &str, body: Value) -> Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = url.trim_start_matches("http://").trim_end_matches("/v1");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = body.to_string();
        let request = format!(
            "POST /v1/embeddings HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        let json = reply.split("\r\n\r\n").nth(1).unwrap();
        serde_json::from_str(json).unwrap()
    }
}
