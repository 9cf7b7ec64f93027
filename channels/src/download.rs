//! Fetching an attachment's bytes, the same way for every adapter: one
//! HTTP GET streamed into a buffer that never grows past the limit, with a
//! stall timeout between chunks. Errors say what failed in words a user
//! can be told, and never carry the URL (a Telegram file URL holds the bot
//! token).

use std::time::Duration;

/// How much one download may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DownloadLimits {
    /// The most bytes accepted; a file declared or found larger is refused.
    pub max_bytes: u64,
    /// The longest wait for the next bytes (or for the answer to start).
    pub stall: Duration,
}

/// Why an attachment could not be downloaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DownloadError {
    /// Larger than the limit (the platform's, or `limits.maxAttachmentBytes`).
    #[error("the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// No bytes came for the stall timeout.
    #[error("the download stalled (nothing arrived for {} s)", .0.as_secs())]
    Stalled(Duration),
    /// The platform refused or the connection failed; the reason has no URL.
    #[error("the download failed: {0}")]
    Failed(String),
    /// The channel cannot fetch files.
    #[error("this channel cannot fetch files")]
    Unsupported,
}

/// Sends `request` and reads its body into memory within `limits`. A
/// declared `Content-Length` over the limit is refused before any byte is
/// read; a body that grows past it is cut off at once.
pub async fn fetch(request: reqwest::RequestBuilder, limits: DownloadLimits) -> Result<Vec<u8>, DownloadError> {
    let stalled = || DownloadError::Stalled(limits.stall);
    let response = tokio::time::timeout(limits.stall, request.send())
        .await
        .map_err(|_| stalled())?
        .map_err(|e| DownloadError::Failed(e.without_url().to_string()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(DownloadError::Failed(format!("HTTP {}", status.as_u16())));
    }
    read_body(response, limits).await
}

/// Reads `response`'s body within `limits`.
async fn read_body(mut response: reqwest::Response, limits: DownloadLimits) -> Result<Vec<u8>, DownloadError> {
    let stalled = || DownloadError::Stalled(limits.stall);
    if response.content_length().is_some_and(|n| n > limits.max_bytes) {
        return Err(DownloadError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    let mut buffer = Vec::with_capacity(response.content_length().unwrap_or(0).min(limits.max_bytes) as usize);
    loop {
        let chunk = tokio::time::timeout(limits.stall, response.chunk())
            .await
            .map_err(|_| stalled())?
            .map_err(|e| DownloadError::Failed(e.without_url().to_string()))?;
        let Some(chunk) = chunk else { break };
        if buffer.len() as u64 + chunk.len() as u64 > limits.max_bytes {
            return Err(DownloadError::TooLarge {
                limit: limits.max_bytes,
            });
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer)
}

/// Like [`fetch`], but a non-success answer is read too (an API that
/// explains a refusal in its JSON body, as Telegram's `getFile` does).
pub async fn fetch_answer(request: reqwest::RequestBuilder, limits: DownloadLimits) -> Result<Vec<u8>, DownloadError> {
    let stalled = || DownloadError::Stalled(limits.stall);
    let response = tokio::time::timeout(limits.stall, request.send())
        .await
        .map_err(|_| stalled())?
        .map_err(|e| DownloadError::Failed(e.without_url().to_string()))?;
    read_body(response, limits).await
}

/// Reads a local file (the console's `/attach PATH`) within `limits.max_bytes`.
pub async fn read_file(path: &std::path::Path, limits: DownloadLimits) -> Result<Vec<u8>, DownloadError> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| DownloadError::Failed(format!("cannot open the file: {e}")))?;
    let mut buffer = Vec::new();
    // One byte more than allowed tells "too large" from "exactly the limit".
    file.take(limits.max_bytes.saturating_add(1))
        .read_to_end(&mut buffer)
        .await
        .map_err(|e| DownloadError::Failed(format!("cannot read the file: {e}")))?;
    if buffer.len() as u64 > limits.max_bytes {
        return Err(DownloadError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::get;

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        #[allow(clippy::disallowed_methods)] // a test server
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn limits(max_bytes: u64) -> DownloadLimits {
        DownloadLimits {
            max_bytes,
            stall: Duration::from_millis(300),
        }
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_and_a_larger_one_refused() {
        let url = serve(Router::new().route("/f", get(|| async { vec![7u8; 1000] }))).await;
        let client = reqwest::Client::new();
        let bytes = fetch(client.get(format!("{url}/f")), limits(1000)).await.unwrap();
        assert_eq!(bytes.len(), 1000);
        let refused = fetch(client.get(format!("{url}/f")), limits(999)).await;
        assert_eq!(refused, Err(DownloadError::TooLarge { limit: 999 }));
    }

    /// A server that answers one request with a chunked body of `chunks`
    /// chunks of 100 bytes, and no length.
    async fn chunked(chunks: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            for _ in 0..chunks {
                let mut chunk = b"64\r\n".to_vec();
                chunk.extend([1u8; 100]);
                chunk.extend(b"\r\n");
                if socket.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            let _ = socket.write_all(b"0\r\n\r\n").await;
        });
        url
    }

    #[tokio::test]
    async fn a_stream_without_a_length_is_cut_off_at_the_limit() {
        let url = chunked(100).await;
        let refused = fetch(reqwest::Client::new().get(format!("{url}/f")), limits(5000)).await;
        assert_eq!(refused, Err(DownloadError::TooLarge { limit: 5000 }));
        let url = chunked(50).await;
        let bytes = fetch(reqwest::Client::new().get(format!("{url}/f")), limits(5000)).await;
        assert_eq!(bytes.map(|b| b.len()), Ok(5000));
    }

    #[tokio::test]
    async fn a_stalled_download_and_a_refusal_say_so_without_the_url() {
        let app = Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route(
                "/secret-token/gone",
                get(|| async { axum::http::StatusCode::NOT_FOUND }),
            );
        let url = serve(app).await;
        let client = reqwest::Client::new();
        let stalled = fetch(client.get(format!("{url}/slow")), limits(10)).await;
        assert_eq!(stalled, Err(DownloadError::Stalled(Duration::from_millis(300))));
        let gone = fetch(client.get(format!("{url}/secret-token/gone")), limits(10))
            .await
            .unwrap_err();
        assert_eq!(gone, DownloadError::Failed("HTTP 404".into()));
        let refused = fetch(client.get("http://127.0.0.1:9/secret-token/x"), limits(10))
            .await
            .unwrap_err();
        assert!(!refused.to_string().contains("secret-token"), "{refused}");
    }

    #[tokio::test]
    async fn a_local_file_is_read_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_file(&path, limits(5)).await.unwrap(), b"12345");
        assert_eq!(
            read_file(&path, limits(4)).await,
            Err(DownloadError::TooLarge { limit: 4 })
        );
        assert!(matches!(
            read_file(&dir.path().join("missing"), limits(4)).await,
            Err(DownloadError::Failed(_))
        ));
    }
}
