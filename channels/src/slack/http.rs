//! The Events API over HTTP: a small HTTP/1.1 listener for Slack's signed
//! POSTs to [`EVENTS_PATH`] (JSON event callbacks, the `url_verification`
//! challenge) and [`COMMANDS_PATH`] (form-encoded slash commands).
//!
//! Every request is verified ([`super::signature`]) before its body is
//! parsed; a bad or stale signature gets 401 and nothing else happens. It is
//! deliberately minimal — one request per connection, `Content-Length`
//! bodies up to 1 MiB, a read deadline — because the only client is Slack
//! (normally behind the operator's TLS proxy). Never logs bodies.

use super::Shared;
use super::signature;
use crate::{ChannelError, Inbound, Shutdown};
use slack_morphism::prelude::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub const EVENTS_PATH: &str = "/slack/events";
pub const COMMANDS_PATH: &str = "/slack/commands";

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;
/// Slack gives up after 3 s; a client slower than this is not Slack.
const READ_DEADLINE: Duration = Duration::from_secs(10);

pub(super) async fn run(
    shared: Arc<Shared>,
    secret: String,
    listen: SocketAddr,
    inbox: mpsc::Sender<Inbound>,
    mut shutdown: Shutdown,
) -> Result<(), ChannelError> {
    let fail = |reason: String| ChannelError::Receive {
        channel: "slack".into(),
        reason,
    };
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| fail(format!("could not listen on {listen} (channels.slack.listen): {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| fail(format!("listener has no address: {e}")))?;
    shared.listening.send_replace(Some(addr));
    shared.link.up();
    tracing::info!(%addr, "slack: Events API listening");
    let secret = Arc::new(secret);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (shared, secret, inbox) = (shared.clone(), secret.clone(), inbox.clone());
                    tokio::spawn(async move { serve(stream, &shared, &secret, &inbox).await });
                }
                Err(e) => {
                    // Usually out of file descriptors: pause rather than spin.
                    tracing::warn!(error = %e, "slack: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = super::stopped(&mut shutdown) => break,
            _ = inbox.closed() => break,
        }
    }
    tracing::info!("slack: Events API stopped");
    Ok(())
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Response {
    status: u16,
    body: String,
}

impl Response {
    fn status(status: u16) -> Self {
        Response {
            status,
            body: String::new(),
        }
    }
}

async fn serve(mut stream: TcpStream, shared: &Shared, secret: &str, inbox: &mpsc::Sender<Inbound>) {
    let response = match tokio::time::timeout(READ_DEADLINE, read_request(&mut stream)).await {
        Ok(Ok(request)) => handle(request, shared, secret, inbox, chrono::Utc::now().timestamp()).await,
        Ok(Err(refusal)) => refusal,
        Err(_) => Response::status(408),
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        reason(response.status),
        response.body.len()
    );
    // The peer may already be gone; nothing useful to do about it.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(response.body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    }
}

async fn read_request(stream: &mut TcpStream) -> Result<Request, Response> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(Response::status(431));
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|_| Response::status(400))?;
        if n == 0 {
            return Err(Response::status(400));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| Response::status(400))?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or("").split(' ');
    let (method, target) = (request_line.next().unwrap_or(""), request_line.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut request = Request {
        method: method.to_string(),
        path,
        headers,
        body: Vec::new(),
    };
    if request.header("transfer-encoding").is_some() {
        return Err(Response::status(411));
    }
    let length: usize = match request.header("content-length") {
        Some(v) => v.parse().map_err(|_| Response::status(400))?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(Response::status(413));
    }
    if request
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|_| Response::status(400))?;
    }
    let mut body = buf.split_off(head_end + 4);
    body.truncate(length);
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 * 1024)];
        let n = stream.read(&mut chunk).await.map_err(|_| Response::status(400))?;
        if n == 0 {
            return Err(Response::status(400));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    request.body = body;
    Ok(request)
}

/// Verifies, then routes. `now` is unix seconds (a parameter so the rule is
/// exact in tests).
async fn handle(request: Request, shared: &Shared, secret: &str, inbox: &mpsc::Sender<Inbound>, now: i64) -> Response {
    if request.path != EVENTS_PATH && request.path != COMMANDS_PATH {
        return Response::status(404);
    }
    if request.method != "POST" {
        return Response::status(405);
    }
    let verdict = signature::verify(
        secret,
        request.header("x-slack-request-timestamp"),
        request.header("x-slack-signature"),
        &request.body,
        now,
    );
    if let Err(refused) = verdict {
        tracing::warn!(path = %request.path, reason = %refused, "slack: request refused");
        return Response::status(401);
    }
    let handed = if request.path == EVENTS_PATH {
        match serde_json::from_slice::<SlackPushEvent>(&request.body) {
            Ok(SlackPushEvent::UrlVerification(v)) => {
                return Response {
                    status: 200,
                    body: v.challenge,
                };
            }
            Ok(SlackPushEvent::EventCallback(cb)) => shared.on_event(&cb, inbox).await,
            Ok(SlackPushEvent::AppRateLimited(_)) => {
                tracing::warn!("slack: Slack is dropping events for this app (app_rate_limited)");
                Ok(())
            }
            Err(_) => {
                tracing::warn!("slack: unreadable event body");
                return Response::status(400);
            }
        }
    } else {
        let fields = form_decode(&request.body);
        if fields.iter().any(|(k, _)| k == "ssl_check") {
            return Response::status(200);
        }
        let object: serde_json::Map<String, serde_json::Value> = fields
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        match serde_json::from_value::<SlackCommandEvent>(serde_json::Value::Object(object)) {
            Ok(command) => shared.on_command(&command, inbox).await,
            Err(_) => {
                tracing::warn!("slack: unreadable slash command");
                return Response::status(400);
            }
        }
    };
    match handed {
        Ok(()) => Response::status(200),
        // Not 200, so Slack retries once the broker takes messages again.
        Err(_) => Response::status(503),
    }
}

/// `application/x-www-form-urlencoded` → pairs (`+` is a space, `%XX` a byte).
fn form_decode(body: &[u8]) -> Vec<(String, String)> {
    body.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |&b| b == b'=');
            let key = parts.next().unwrap_or(b"");
            let value = parts.next().unwrap_or(b"");
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < raw.len() => {
                match std::str::from_utf8(&raw[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_decode_plus_and_percent_escapes() {
        let fields =
            form_decode(b"command=%2Fsession&text=forget+my+topic&response_url=https%3A%2F%2Fh.io%2Fx&bad=%zz&end=%4");
        assert_eq!(fields[0], ("command".into(), "/session".into()));
        assert_eq!(fields[1], ("text".into(), "forget my topic".into()));
        assert_eq!(fields[2], ("response_url".into(), "https://h.io/x".into()));
        assert_eq!(fields[3], ("bad".into(), "%zz".into()));
        assert_eq!(fields[4], ("end".into(), "%4".into()));
    }

    #[test]
    fn utf8_survives_percent_decoding() {
        assert_eq!(percent_decode(b"caf%C3%A9"), "café");
    }
}
