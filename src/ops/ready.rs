//! Readiness (`/readyz`): the state folder takes a write, every served
//! platform reports its link connected, and the chat model is not failing
//! (fewer than [`metered::FAILING_AFTER`] failed calls in a row). Each check
//! is named in the answer with why it failed; nothing about users.

use super::metered;
use mnemo_channels::{Channel, LinkState};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One named check and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `None` when it passed; otherwise why not.
    pub failure: Option<String>,
}

/// Runs every check; ready when all pass.
pub fn checks(state_root: &Path, channels: &[Arc<dyn Channel>]) -> Vec<Check> {
    let mut out = vec![Check {
        name: "state folder writable".into(),
        failure: probe_write(state_root).err(),
    }];
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
    let failures = metered::answer_failures_in_a_row();
    out.push(Check {
        name: "model".into(),
        failure: (failures >= metered::FAILING_AFTER).then(|| format!("the last {failures} calls failed")),
    });
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

    #[test]
    fn a_missing_state_folder_is_not_ready_and_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let checks = checks(&dir.path().join("absent"), &[]);
        let state = &checks[0];
        assert!(
            state.failure.as_deref().is_some_and(|f| f.contains("absent")),
            "{checks:?}"
        );
        assert!(super::checks(dir.path(), &[])[0].failure.is_none());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }
}
