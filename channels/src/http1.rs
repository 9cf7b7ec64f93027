//! The one HTTP server loop behind mnemo's listeners: the Telegram webhook,
//! the Slack Events API and the ops endpoint (`/healthz`, `/readyz`,
//! `/metrics`). It speaks HTTP/1.1 only.
//!
//! `axum::serve` answers HTTP/2 as well whenever hyper-util's `http2`
//! feature is on, and slack-morphism's client turns that feature on for
//! the whole build, so every listener carried an HTTP/2 server that none
//! of their callers use: Telegram and Slack post over HTTP/1.1, Prometheus
//! scrapes over it, and a TLS-terminating proxy in front speaks it to the
//! backend. Dropping that server half made the binary smaller
//! (BENCHMARKS.md, "Binary size and memory").
//!
//! What it keeps of `axum::serve`: an accept error that concerns one
//! connection is skipped, any other (out of file descriptors) is logged and
//! retried after a second; on `stop` it stops accepting, lets each open
//! connection finish the request it is serving, and returns when all have
//! closed.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;
use tokio::net::TcpListener;

/// Serves `router` on `listener` until `stop` completes, then waits for
/// the open connections to close.
pub async fn serve(listener: TcpListener, router: Router, stop: impl Future<Output = ()>) {
    let connections = GracefulShutdown::new();
    let mut stop = pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if concerns_one_connection(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot accept connections; trying again in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
}

fn concerns_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::{Notify, oneshot};

    /// `/slow` tells `entered` when it starts and answers once `release`
    /// is notified.
    struct Slow {
        entered: Notify,
        release: Notify,
    }

    async fn started(
        stop: oneshot::Receiver<()>,
        slow: Arc<Slow>,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/ping", get(|| async { "pong" })).route(
            "/slow",
            get(move || async move {
                slow.entered.notify_one();
                slow.release.notified().await;
                "done"
            }),
        );
        let served = tokio::spawn(serve(listener, router, async {
            let _ = stop.await;
        }));
        (addr, served)
    }

    fn slow() -> Arc<Slow> {
        Arc::new(Slow {
            entered: Notify::new(),
            release: Notify::new(),
        })
    }

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn answers_http1_and_refuses_the_http2_preface() {
        let (stop_tx, stop) = oneshot::channel();
        let (addr, served) = started(stop, slow()).await;
        let answer = exchange(addr, b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("pong"), "{answer}");
        // Cleartext HTTP/2 with prior knowledge is not spoken: the
        // connection closes with no answer. (An HTTP/2 server answers its
        // SETTINGS frame and waits, so what came within a while is read.)
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        assert!(
            read.is_ok() && answer.is_empty(),
            "answered the HTTP/2 preface: {answer:?}"
        );
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn stop_lets_a_request_in_progress_finish() {
        let (stop_tx, stop) = oneshot::channel();
        let slow = slow();
        let (addr, served) = started(stop, slow.clone()).await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        slow.entered.notified().await;
        stop_tx.send(()).unwrap();
        // The server has the stop and still waits for the request.
        let mut served = served;
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut served)
                .await
                .is_err(),
            "the server returned with a request in progress"
        );
        slow.release.notify_one();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("done"),
            "{answer}"
        );
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .unwrap()
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "still accepting after the stop"
        );
    }
}
