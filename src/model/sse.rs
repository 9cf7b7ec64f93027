//! Server-sent events, as both HTTP backends stream them: a byte-level
//! decoder ([`SseDecoder`]) and [`open_stream`], which drives a response
//! body through a backend's [`StreamProtocol`] into a [`DeltaStream`]
//! ([`whole_reply`] makes one of a reply that came whole instead).
//!
//! It knows no provider's JSON; that is the protocol's job. It owns the two
//! rules both share: a body that ends before the protocol's end marker is
//! an error, never a short "success"; and the call's deadline holds
//! whatever the server sends meanwhile (keep-alive comments, words without
//! end): no first part by then fails the call, a reply still being written
//! then ends in [`ModelError::Timeout`] after what came.

use super::http::error_chain;
use super::{DeltaStream, ModelError, ModelReply, StreamPart};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// One dispatched event: its `event:` name, if any, and its `data:` lines
/// joined with `\n`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Incremental SSE parser. Chunks may split lines and events anywhere.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes after the last newline seen.
    partial: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(chunk);
        let mut done = Vec::new();
        while let Some(newline) = self.partial.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.partial.drain(..=newline).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut done);
        }
        done
    }

    /// The body ended: an unterminated last line and event still count, so
    /// a server that omits the final blank line loses nothing.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut done = Vec::new();
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
            self.line(line.trim_end_matches('\r'), &mut done);
        }
        self.line("", &mut done);
        done
    }

    fn line(&mut self, line: &str, done: &mut Vec<SseEvent>) {
        if line.is_empty() {
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                done.push(SseEvent { event, data });
            }
            return;
        }
        if line.starts_with(':') {
            return; // a comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }
}

/// A backend's reading of its event stream.
pub(crate) trait StreamProtocol: Send + 'static {
    /// Reads one event, pushing the parts it completes onto `out`;
    /// `Ok(true)` when it is the end marker (the reply is complete).
    fn on_event(&mut self, event: SseEvent, out: &mut Vec<StreamPart>) -> Result<bool, ModelError>;

    /// The body ended without the end marker. An error unless the protocol
    /// can prove the reply complete by other means.
    fn on_eof(&mut self) -> Result<(), ModelError>;
}

struct Reader<P> {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: SseDecoder,
    pending: VecDeque<SseEvent>,
    /// Parts read but not yet handed out.
    parts: VecDeque<StreamPart>,
    protocol: P,
    /// The call's timeout (for the error) and when it runs out.
    limit: Duration,
    deadline: Instant,
    body_ended: bool,
    finished: bool,
}

/// The parts of `response`'s SSE body, once its first part has come: the
/// wait for it is part of opening the stream (so an error or the deadline
/// before any part is the call's error, which retries and the fallback
/// see). The whole reply must come by `deadline`, the call's `limit` after
/// it was sent; keep-alive comments do not move it.
pub(crate) async fn open_stream<P: StreamProtocol>(
    response: reqwest::Response,
    limit: Duration,
    deadline: Instant,
    protocol: P,
) -> Result<DeltaStream, ModelError> {
    let mut reader = Reader {
        body: response.bytes_stream().boxed(),
        decoder: SseDecoder::default(),
        pending: VecDeque::new(),
        parts: VecDeque::new(),
        protocol,
        limit,
        deadline,
        body_ended: false,
        finished: false,
    };
    let first = match reader.next_item().await {
        Some(Err(e)) => return Err(e),
        Some(Ok(part)) => Some(Ok(part)),
        None => None,
    };
    let rest = futures_util::stream::unfold(reader, |mut r| async move {
        let item = r.next_item().await?;
        Some((item, r))
    });
    Ok(futures_util::stream::iter(first).chain(rest).boxed())
}

/// A reply that came whole (a server that ignored `stream: true`) as the
/// stream of its parts: its text, its tool calls, its usage.
pub(crate) fn whole_reply(reply: ModelReply) -> DeltaStream {
    let text = Some(reply.text).filter(|t| !t.is_empty()).map(StreamPart::Text);
    let calls = reply.tool_calls.into_iter().map(StreamPart::Call);
    let usage = reply.usage.map(StreamPart::Usage);
    let parts: Vec<_> = text.into_iter().chain(calls).chain(usage).map(Ok).collect();
    futures_util::stream::iter(parts).boxed()
}

impl<P: StreamProtocol> Reader<P> {
    /// The next part or error; `None` once the stream is over. After an
    /// error the stream is over too.
    async fn next_item(&mut self) -> Option<Result<StreamPart, ModelError>> {
        loop {
            if let Some(part) = self.parts.pop_front() {
                return Some(Ok(part));
            }
            if self.finished {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                let mut out = Vec::new();
                let done = match self.protocol.on_event(event, &mut out) {
                    Ok(done) => done,
                    Err(e) => return self.fail(e),
                };
                let empty = |p: &StreamPart| matches!(p, StreamPart::Text(t) if t.is_empty());
                self.parts.extend(out.into_iter().filter(|p| !empty(p)));
                self.finished = done;
                continue;
            }
            if self.body_ended {
                self.finished = true;
                return self.protocol.on_eof().err().map(Err);
            }
            match tokio::time::timeout_at(self.deadline, self.body.next()).await {
                Err(_) => return self.fail(ModelError::Timeout { after: self.limit }),
                Ok(Some(Ok(chunk))) => self.pending.extend(self.decoder.push(&chunk)),
                Ok(Some(Err(e))) => {
                    let detail = format!("the reply stream was cut: {}", error_chain(&e));
                    return self.fail(ModelError::Protocol { detail });
                }
                Ok(None) => {
                    self.body_ended = true;
                    self.pending.extend(self.decoder.finish());
                }
            }
        }
    }

    fn fail(&mut self, error: ModelError) -> Option<Result<StreamPart, ModelError>> {
        self.finished = true;
        Some(Err(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: name.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"event: content_block_delta\r\nda").is_empty());
        assert!(decoder.push(b"ta: {\"a\":").is_empty());
        assert_eq!(
            decoder.push(b"1}\r\n\r\ndata: [DONE]\n\n"),
            vec![event(Some("content_block_delta"), "{\"a\":1}"), event(None, "[DONE]")]
        );
    }

    #[test]
    fn comments_are_skipped_and_multi_line_data_is_joined() {
        let mut decoder = SseDecoder::default();
        let events = decoder.push(b": keep-alive\n\ndata: one\ndata:two\n\n");
        assert_eq!(events, vec![event(None, "one\ntwo")]);
    }

    #[test]
    fn a_last_event_without_its_blank_line_still_counts() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: [DONE]").is_empty());
        assert_eq!(decoder.finish(), vec![event(None, "[DONE]")]);
    }
}
