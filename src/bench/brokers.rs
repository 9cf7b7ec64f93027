//! `mnemo bench --store postgres --brokers N`: N brokers on one database,
//! as N `mnemo run` processes behind a load balancer would be — here N
//! real [`App`]s in the one process, each with its own connection pool
//! (one [`mnemo_pg::PgStore`] each, as separate processes would connect),
//! its own state folder and its own instance lock. User `u` talks to
//! broker `u % N` for the whole run, as a balancer with per-user affinity
//! sends them: a user's turns stay in order on one broker, and the brokers
//! share only the database. With one broker everything is as before.

use super::instant::TimedChannel;
use super::{Options, app_parts, prepare_channel};
use crate::app::{App, AppParts};
use crate::instance::InstanceLock;
use anyhow::{Context as _, Result};
use mnemo_channels::Channel;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One broker of the run: its app, the channel that times its replies,
/// and the lock on its state folder (held for the run).
pub struct Broker {
    pub app: App,
    pub channel: Arc<TimedChannel>,
    _instance: InstanceLock,
}

/// A state folder taken for one broker (locked, its bench channel
/// written), before its app is opened on it.
pub struct Folder {
    root: PathBuf,
    instance: InstanceLock,
}

/// Which broker serves user `u` of `brokers`: always the same one.
pub fn broker_of(u: usize, brokers: usize) -> usize {
    u % brokers.max(1)
}

/// Broker `b`'s state folder: `root` itself for a single broker (as
/// before), else its own `root/broker-<b>` (one broker owns a state folder).
pub fn state_folder(root: &Path, b: usize, brokers: usize) -> PathBuf {
    if brokers == 1 {
        root.to_path_buf()
    } else {
        root.join(format!("broker-{b}"))
    }
}

/// Locks and prepares each broker's state folder (refusing one that
/// already has a bench channel, before anything else is touched).
pub fn take_folders(root: &Path, options: &Options) -> Result<Vec<Folder>> {
    (0..options.brokers())
        .map(|b| {
            let root = state_folder(root, b, options.brokers());
            let instance = InstanceLock::acquire(&root)?;
            prepare_channel(&root, options.fsync, options.recall)?;
            Ok(Folder { root, instance })
        })
        .collect()
}

/// Opens each broker's app on its folder, with its own pool.
pub fn open(folders: Vec<Folder>, options: &Options) -> Result<Vec<Broker>> {
    folders
        .into_iter()
        .enumerate()
        .map(|(b, folder)| {
            let channel = Arc::new(TimedChannel::new());
            let parts = AppParts {
                store: options.stores.get(b).cloned(),
                ..app_parts(&folder.root)
            };
            let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>])
                .with_context(|| format!("opening broker {b}"))?;
            Ok(Broker {
                app,
                channel,
                _instance: folder.instance,
            })
        })
        .collect()
}

/// Waits for every broker's last turns to be stored and its background
/// work (folds) to be done.
pub async fn settle(brokers: &[Broker]) {
    for broker in brokers {
        broker.app.wait_turns(Duration::from_secs(30)).await;
    }
    for broker in brokers {
        broker.app.wait_background(Duration::from_secs(30)).await;
    }
}

/// What one broker served. Serialized in the report's `per_broker`.
#[derive(Clone, Debug, Serialize)]
pub struct BrokerReport {
    /// Its number, 0 to N − 1 (users `u` with `u % N` equal to it).
    pub broker: usize,
    pub users: usize,
    /// Turns it answered.
    pub total_turns: usize,
    /// Its turns over the whole run's wall time.
    pub turns_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// Each broker's figures from every user's turn times (`per_user[u]`).
pub fn per_broker(per_user: &[Vec<u64>], brokers: usize, elapsed: Duration) -> Vec<BrokerReport> {
    let secs = elapsed.as_secs_f64();
    (0..brokers)
        .map(|b| {
            let users: Vec<&Vec<u64>> = per_user
                .iter()
                .enumerate()
                .filter(|(u, _)| broker_of(*u, brokers) == b)
                .map(|(_, times)| times)
                .collect();
            let times = super::Sorted::new(users.iter().flat_map(|t| t.iter().copied()).collect());
            let n = times.0.len();
            BrokerReport {
                broker: b,
                users: users.len(),
                total_turns: n,
                turns_per_s: if secs > 0.0 { n as f64 / secs } else { 0.0 },
                p50_us: times.at(50),
                p99_us: times.at(99),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_keep_one_broker_and_the_brokers_share_them_evenly() {
        let on = |n| (0..8).map(|u| broker_of(u, n)).collect::<Vec<_>>();
        assert_eq!(on(1), [0; 8]);
        assert_eq!(on(2), [0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(on(4), [0, 1, 2, 3, 0, 1, 2, 3]);
        let root = Path::new("/s");
        assert_eq!(state_folder(root, 0, 1), root);
        assert_eq!(state_folder(root, 1, 2), root.join("broker-1"));
    }

    #[test]
    fn each_broker_reports_its_own_users_turns() {
        let per_user = vec![vec![10, 20], vec![30, 40], vec![50, 60]];
        let r = per_broker(&per_user, 2, Duration::from_secs(2));
        assert_eq!((r[0].users, r[0].total_turns), (2, 4));
        assert_eq!((r[1].users, r[1].total_turns), (1, 2));
        assert_eq!((r[0].p50_us, r[0].p99_us), (50, 60));
        assert_eq!((r[1].p50_us, r[1].p99_us), (40, 40));
        assert!((r[0].turns_per_s - 2.0).abs() < 1e-9);
    }
}
