//! Readiness (`/readyz`): whether this broker can take messages now — the
//! state folder takes a write, the database answers (on the Postgres
//! store), and every served platform reports its link connected. Each check
//! is named in the answer with why it failed; nothing about users.
//!
//! The model's health is not a check, on purpose: when every broker is
//! unready no message reaches any (a Service sends none to unready pods),
//! so none would ever see the model recover. It is reported on its own
//! (`/healthz`'s `model` line, `mnemo_model_healthy`; see `metered`).

use mnemo_channels::{Channel, LinkState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long the database may take to answer the readiness ping.
const DATABASE_PING: Duration = Duration::from_secs(2);

/// One named check and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `None` when it passed; otherwise why not.
    pub failure: Option<String>,
}

/// Runs every check; ready when all pass.
pub async fn checks(
    state_root: PathBuf,
    store: Option<&mnemo_pg::PgStore>,
    channels: &[Arc<dyn Channel>],
) -> Vec<Check> {
    let written = tokio::task::spawn_blocking(move || probe_write(&state_root))
        .await
        .unwrap_or_else(|_| Err("the write probe did not finish".into()));
    let mut out = vec![Check {
        name: "state folder writable".into(),
        failure: written.err(),
    }];
    if let Some(store) = store {
        let failure = match tokio::time::timeout(DATABASE_PING, store.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {DATABASE_PING:?}")),
        };
        out.push(Check {
            name: "database".into(),
            failure,
        });
    }
    for channel in channels {
        let failure = match channel.link().state {
            LinkState::Connected => None,
            LinkState::Connecting => Some("not connected yet".to_string()),
            LinkState::Down => Some("connection down; retrying".to_string()),
        };
        out.push(Check {
            name: format!("platform {}", channel.name()),
            failure,
        });
    }
    out
}

/// Creates, writes and removes a small file in the state folder.
fn probe_write(state_root: &Path) -> Result<(), String> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    let path = state_root.join(format!(".readyz-{}-{n}", std::process::id()));
    let written = std::fs::write(&path, b"ok").map_err(|e| format!("{}: {e}", state_root.display()));
    let _ = std::fs::remove_file(&path);
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_state_folder_is_not_ready_and_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let checks = checks(dir.path().join("absent"), None, &[]).await;
        let state = &checks[0];
        assert!(
            state.failure.as_deref().is_some_and(|f| f.contains("absent")),
            "{checks:?}"
        );
        assert!(super::checks(dir.path().into(), None, &[]).await[0].failure.is_none());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }
}
