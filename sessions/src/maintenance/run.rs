//! The body of one maintenance run: the order of the steps — the digests
//! ([`super::digest_pass`], on the state folder's files), saving the state
//! file, expiry, pruning, log rotation — and the report they add up to.

use super::digest_pass::{Digester, FileDigests, digest_pass, failure};
use super::expiry::{self, Expiry};
use super::logs;
use super::prune;
use super::state::MaintenanceState;
use super::{Maintenance, MaintenanceReport, Progress};
use chrono::{DateTime, NaiveDate, Utc};

type ProgressFn<'a> = &'a mut (dyn FnMut(&Progress) + Send);

pub(super) async fn run(m: &Maintenance, now: DateTime<Utc>, progress: ProgressFn<'_>) -> MaintenanceReport {
    let mut report = MaintenanceReport::default();
    let state_path = m.stm.layout().maintenance_state_path();
    match MaintenanceState::load(&state_path) {
        Ok(mut state) => {
            let digester = Digester {
                config: &m.config,
                tz: m.tz,
                summarizer: &m.summarizer,
            };
            let store = FileDigests { stm: &m.stm, tz: m.tz };
            digest_pass(&digester, &store, now, &mut state, &mut report, progress).await;
            state.last_run = Some(now);
            if let Err(e) = state.save(&state_path) {
                report.failures.push(failure(None, "state", e.to_string()));
            }
            expiry_pass(m, now, state.daily_done_through, &mut report, progress).await;
        }
        // Without the state, which days are summarized is unknown, and so is
        // whether an idle STM's last day is: both wait for the operator.
        Err(e) => report.failures.push(failure(None, "state", e.to_string())),
    }

    let logs_dir = m.stm.layout().logs_dir();
    let keep = m.config.scheduler.keep();
    let pruned = prune::prune(&m.stm, m.rotate_logs.then_some(logs_dir.as_path()), now, &keep).await;
    progress(&Progress::Pruned {
        dirs: pruned.dirs.len(),
        temp_files: pruned.temp_files.len(),
        exports: pruned.exports.len(),
        expired: pruned.expired.len(),
    });
    for e in pruned.errors {
        report.failures.push(failure(None, "prune", e.to_string()));
    }
    report.pruned_dirs = pruned.dirs;
    report.removed_temp_files = pruned.temp_files;
    report.removed_exports = pruned.exports;
    report.removed_expired = pruned.expired;

    if m.rotate_logs {
        let rotation = logs::rotate_logs(&logs_dir, now, m.config.scheduler.log_rotate_days);
        for path in &rotation.rotated {
            progress(&Progress::LogRotated { path: path.clone() });
        }
        for e in rotation.errors {
            report.failures.push(failure(None, "logs", e.to_string()));
        }
        report.rotated_logs = rotation.rotated;
    }
    report
}

/// Expires every idle STM of the channel.
async fn expiry_pass(
    m: &Maintenance,
    now: DateTime<Utc>,
    dailies_done_through: Option<NaiveDate>,
    report: &mut MaintenanceReport,
    progress: ProgressFn<'_>,
) {
    let users = match m.stm.users() {
        Ok(users) => users,
        Err(e) => {
            report.failures.push(failure(None, "expiry", e.to_string()));
            return;
        }
    };
    let idle = m.config.scheduler.stm_expiry();
    for user in users {
        match expiry::expire_user(&m.stm, m.tz, &user, now, idle, dailies_done_through).await {
            Ok(Expiry::Active) => {}
            Ok(Expiry::Deferred { .. }) => report.expiry_deferred.push(user),
            Ok(Expiry::Archived { records, .. }) => {
                progress(&Progress::Archived {
                    user: user.clone(),
                    records,
                });
                report.archived_users.push(user);
            }
            Err(e) => report.failures.push(failure(Some(&user), "expiry", e.to_string())),
        }
    }
}
