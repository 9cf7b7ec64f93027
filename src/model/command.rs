//! The `command` backend: runs a configured program (e.g. `claude -p
//! --system-prompt {context} {message}`) once per call and answers with its
//! trimmed stdout, as stateless brokers do today.
//!
//! Arguments are passed as a list — never through a shell — so a message
//! like `; rm -rf ~` stays one literal argument. It owns the child's whole
//! life: stdin closed, stdout and stderr read concurrently, killed and
//! reaped on timeout or when the call is dropped. It does not retry (a
//! failing program is the operator's to fix).

use super::config::ModelConfig;
use super::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, StreamPart, redact};
use async_trait::async_trait;
use futures_util::StreamExt;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// How much of stderr an error quotes: enough for the real complaint, which
/// is usually at the end.
const STDERR_TAIL_CHARS: usize = 500;

/// A program that answers on stdout.
#[derive(Debug)]
pub(crate) struct CommandBackend {
    program: String,
    /// With `{context}` / `{message}` placeholders.
    args: Vec<String>,
    timeout: Duration,
}

impl CommandBackend {
    /// `cfg` is validated: `command` is a non-empty list.
    pub fn new(cfg: &ModelConfig) -> Self {
        let mut parts = cfg.command.clone().unwrap_or_default().into_iter();
        CommandBackend {
            program: parts.next().unwrap_or_default(),
            args: parts.collect(),
            timeout: Duration::from_secs(cfg.timeout_secs),
        }
    }

    /// The argument list for one call, placeholders replaced inside each
    /// argument (so `--system={context}` works too).
    fn args_for(&self, request: &ModelRequest) -> Vec<String> {
        let context = request.context.flat();
        self.args
            .iter()
            .map(|arg| substitute(arg, &context, &request.message))
            .collect()
    }

    fn failed(&self, detail: String) -> ModelError {
        ModelError::Command {
            program: self.program.clone(),
            detail: redact(&detail, &[]),
        }
    }

    async fn run(&self, request: &ModelRequest) -> Result<String, ModelError> {
        let mut child = Command::new(&self.program)
            .args(self.args_for(request))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                self.failed(format!(
                    "could not start it ({e}); check the command's first element and PATH"
                ))
            })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let finished = tokio::time::timeout(self.timeout, async {
            tokio::join!(read_all(stdout), read_all(stderr), child.wait())
        })
        .await;
        let Ok((stdout, stderr, status)) = finished else {
            // Kill and reap now, so no process outlives its call; if it has
            // exited meanwhile there is nothing left to kill.
            let _ = child.kill().await;
            return Err(ModelError::Timeout { after: self.timeout });
        };
        let status = status.map_err(|e| self.failed(format!("could not wait for it: {e}")))?;
        let stderr = String::from_utf8_lossy(&stderr);
        if !status.success() {
            let how = match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_string(),
            };
            return Err(self.failed(format!(
                "{how}; stderr ends: {}",
                tail(stderr.trim(), STDERR_TAIL_CHARS)
            )));
        }
        let text = String::from_utf8_lossy(&stdout).trim().to_string();
        if text.is_empty() {
            return Err(self.failed(format!(
                "it printed nothing on stdout; stderr ends: {}",
                tail(stderr.trim(), STDERR_TAIL_CHARS)
            )));
        }
        Ok(text)
    }
}

/// `arg` with `{context}` and `{message}` replaced in one pass, so a
/// placeholder written *inside* the context or the message stays literal.
fn substitute(arg: &str, context: &str, message: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        if let Some(tail) = after.strip_prefix("{context}") {
            out.push_str(context);
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("{message}") {
            out.push_str(message);
            rest = tail;
        } else {
            out.push('{');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Everything a pipe yields. Read errors end the read: what arrived is
/// still the best account of what the program said.
async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes).await;
    }
    bytes
}

/// The last `max` characters of `text`, on a character boundary.
fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let skip = text.char_indices().nth(count - max).map_or(0, |(i, _)| i);
    format!("…{}", &text[skip..])
}

#[async_trait]
impl Model for CommandBackend {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            text: self.run(request).await?,
            usage: None,
            tool_calls: Vec::new(),
        })
    }

    /// One delta with the whole output: the program answers all at once
    /// (so [`Model::streams`] is false and the broker does not stream it).
    async fn stream(&self, request: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let text = self.run(request).await?;
        Ok(futures_util::stream::iter([Ok(StreamPart::Text(text))]).boxed())
    }

    fn describe(&self) -> String {
        let mut shown = vec![self.program.as_str()];
        shown.extend(self.args.iter().map(String::as_str));
        redact(&format!("command {}", shown.join(" ")), &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Provider;

    #[test]
    fn tail_keeps_the_end_of_long_text() {
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(tail("ab", 3), "ab");
        assert_eq!(tail("ééé", 2), "…éé");
    }

    #[test]
    fn placeholders_are_replaced_inside_arguments() {
        let cfg = ModelConfig {
            command: Some(vec!["claude".into(), "--system={context}".into(), "{message}".into()]),
            ..ModelConfig::new(Provider::Command, "")
        };
        let request = ModelRequest::new(
            mnemo_sessions::context::Context {
                system: "Be brief. {message}".into(),
                ..Default::default()
            },
            "hi {context}",
        );
        assert_eq!(
            CommandBackend::new(&cfg).args_for(&request),
            vec!["--system=Be brief. {message}", "hi {context}"]
        );
    }
}
