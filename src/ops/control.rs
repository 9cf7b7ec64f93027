//! The control socket (`<state>/mnemo.sock`, mode 0600): how operator verbs
//! reach a bot that is running on the same state folder. The bot holds the
//! per-user locks in memory and the instance lock on the folder, so a
//! second process must not write there itself; instead `mnemo sessions
//! forget` and `mnemo backup` send one JSON line here and the bot does the
//! work under its own locks, answering with one JSON line.
//!
//! It serves only those requests (and `ping`, which `mnemo health` sends
//! for a container's health check), never reads message text into a
//! reply, and the socket is as private as the state folder (owner only).

use super::keep;
use crate::app::App;
use crate::instance::{LOCK_FILE, SOCKET_FILE};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// What an operator verb asks the running bot to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Delete everything stored about `user` in `channel`.
    Forget { channel: String, user: String },
    /// Write a backup of the whole state folder to `out`, a file directly
    /// in the state folder (the CLI moves it where the operator asked).
    Backup { out: PathBuf },
    /// Whether the bot answers at all (`mnemo health`).
    Ping,
}

/// The bot's answer: a line for the operator, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    pub message: String,
}

pub fn socket_path(state_root: &Path) -> PathBuf {
    state_root.join(SOCKET_FILE)
}

/// Serves the socket until `stop` fires. The caller holds the instance
/// lock, so a socket file left by a crashed bot is stale and replaced.
pub fn start(
    app: App,
    state_root: PathBuf,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let path = socket_path(&state_root);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    restrict(&path)?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let (app, root) = (app.clone(), state_root.clone());
                        tokio::spawn(async move { serve_one(stream, &app, &root).await });
                    }
                    Err(e) => tracing::warn!(error = %e, "control socket: accept failed"),
                },
                _ = crate::shutdown::fired(&mut stop) => break,
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}

#[cfg(unix)]
fn restrict(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

async fn serve_one(stream: UnixStream, app: &App, state_root: &Path) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    if BufReader::new(read).read_line(&mut line).await.is_err() {
        return;
    }
    let response = match serde_json::from_str::<Request>(&line) {
        Ok(request) => answer(request, app, state_root).await,
        Err(e) => Response {
            ok: false,
            message: format!("unreadable request: {e}"),
        },
    };
    let mut text = serde_json::to_string(&response).unwrap_or_default();
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
}

async fn answer(request: Request, app: &App, state_root: &Path) -> Response {
    let result = match request {
        Request::Forget { channel, user } => {
            keep::forget(state_root, &channel, &user, None, Some(app.memories())).await
        }
        // The bot writes only inside its own folder; the CLI moves the file.
        Request::Backup { out } if out.parent() != Some(state_root) => Err(anyhow::anyhow!(
            "a backup is written into the state folder and moved by the CLI, not to {}",
            out.display()
        )),
        Request::Backup { out } => keep::backup(state_root, &out, Some(app.memories())).await,
        Request::Ping => Ok(format!("the bot on {} answers", state_root.display())),
    };
    match result {
        Ok(message) => Response { ok: true, message },
        Err(e) => Response {
            ok: false,
            message: format!("{e:#}"),
        },
    }
}

/// Sends `request` to the bot running on `state_root`; its answer.
pub async fn send(state_root: &Path, request: &Request) -> anyhow::Result<Response> {
    let path = socket_path(state_root);
    let stream = UnixStream::connect(&path).await.map_err(|e| {
        anyhow::anyhow!(
            "another mnemo process holds {} but does not answer on {} ({e}); if it is `mnemo sessions maintain`, \
             try again when it has finished",
            state_root.join(LOCK_FILE).display(),
            path.display()
        )
    })?;
    let (read, mut write) = stream.into_split();
    let mut text = serde_json::to_string(request)?;
    text.push('\n');
    write.write_all(text.as_bytes()).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    Ok(serde_json::from_str(&line)?)
}
