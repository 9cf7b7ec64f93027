//! Server-sent events, as both HTTP backends stream them: a byte-level
//! decoder ([`SseDecoder`]) and [`delta_stream`], which drives a response
//! body through a backend's [`StreamProtocol`] into a [`DeltaStream`].
//!
//! It knows no provider's JSON; that is the protocol's job. It owns the one
//! rule both share: a body that ends before the protocol's end marker is an
//! error, never a short "success".

use super::http::error_chain;
use super::{DeltaStream, ModelError, StreamPart};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::VecDeque;
use std::time::Duration;

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
    idle: Duration,
    body_ended: bool,
    finished: bool,
}

/// The deltas of `response`'s SSE body. `idle` bounds the wait for each
/// chunk (not the whole reply, which may legitimately take minutes).
pub(crate) fn delta_stream<P: StreamProtocol>(response: reqwest::Response, idle: Duration, protocol: P) -> DeltaStream {
    let reader = Reader {
        body: response.bytes_stream().boxed(),
        decoder: SseDecoder::default(),
        pending: VecDeque::new(),
        parts: VecDeque::new(),
        protocol,
        idle,
        body_ended: false,
        finished: false,
    };
    futures_util::stream::unfold(reader, |mut r| async move {
        let item = r.next_item().await?;
        Some((item, r))
    })
    .boxed()
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
            match tokio::time::timeout(self.idle, self.body.next()).await {
                Err(_) => return self.fail(ModelError::Timeout { after: self.idle }),
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
