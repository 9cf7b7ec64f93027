//! The console channel: `mnemo chat` on stdin/stdout, as the local OS user.
//! One line in is one message; each reply is printed as it comes. Works the
//! same when stdin is a pipe (for scripts and tests): no prompt is printed
//! then, and end of input ends the channel cleanly.

use crate::{Channel, ChannelError, ChatKind, Inbound, Outbound, OutboundBody, Shutdown};
use async_trait::async_trait;
use chrono::Utc;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, mpsc};

/// The console has no real limit; long replies still come in readable pieces.
const CONSOLE_MAX_CHARS: usize = 100_000;

pub struct ConsoleChannel {
    user_id: String,
    interactive: bool,
    /// Serialises writes so a reply and a prompt never interleave mid-line.
    out: Mutex<tokio::io::Stdout>,
    /// Makes message ids unique within a run; the start time makes them
    /// unique across runs.
    seq: AtomicU64,
    started_ms: i64,
}

impl ConsoleChannel {
    /// `user_id` is the local OS user the conversation belongs to.
    pub fn new(user_id: impl Into<String>) -> Self {
        ConsoleChannel {
            user_id: user_id.into(),
            interactive: std::io::stdin().is_terminal() && std::io::stdout().is_terminal(),
            out: Mutex::new(tokio::io::stdout()),
            seq: AtomicU64::new(0),
            started_ms: Utc::now().timestamp_millis(),
        }
    }

    /// The console user: `$USER`, else `$LOGNAME`, else `local`, looked up
    /// in `env` (the broker's one reader of the environment).
    pub fn local_user(env: &dyn Fn(&str) -> Option<String>) -> String {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| env(v).filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| "local".to_string())
    }

    async fn write(&self, text: &str) -> std::io::Result<()> {
        let mut out = self.out.lock().await;
        out.write_all(text.as_bytes()).await?;
        out.flush().await
    }

    async fn prompt(&self) {
        if self.interactive {
            // A failed prompt write is not worth stopping the chat for.
            let _ = self.write("> ").await;
        }
    }

    fn inbound(&self, text: String) -> Inbound {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        Inbound {
            channel: "console".to_string(),
            user_id: self.user_id.clone(),
            user_name: Some(self.user_id.clone()),
            chat_id: "console".to_string(),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: format!("console-{}-{n}", self.started_ms),
            text,
            ts: Utc::now(),
            addressed: true,
            interaction: None,
        }
    }
}

#[async_trait]
impl Channel for ConsoleChannel {
    fn name(&self) -> &str {
        "console"
    }

    fn max_message_chars(&self) -> usize {
        CONSOLE_MAX_CHARS
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        self.prompt().await;
        loop {
            let line = tokio::select! {
                line = lines.next_line() => line,
                _ = shutdown.changed() => return Ok(()),
            };
            let line = line.map_err(|e| ChannelError::Receive {
                channel: "console".into(),
                reason: format!("could not read stdin: {e}"),
            })?;
            let Some(line) = line else { return Ok(()) };
            if line.trim().is_empty() {
                self.prompt().await;
                continue;
            }
            inbox
                .send(self.inbound(line))
                .await
                .map_err(|_| ChannelError::InboxClosed {
                    channel: "console".into(),
                })?;
        }
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        let text = match out.body {
            OutboundBody::Text(text) => text,
            OutboundBody::File { path, caption } => format!("{caption}\n{}", path.display()),
        };
        let framed = if self.interactive {
            format!("{text}\n\n> ")
        } else {
            format!("{text}\n")
        };
        self.write(&framed).await.map_err(|e| ChannelError::Send {
            channel: "console".into(),
            target: "stdout".into(),
            reason: e.to_string(),
        })
    }
}
