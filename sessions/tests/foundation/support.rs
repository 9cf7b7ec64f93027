//! Small builders shared by the foundation specs.

use chrono::{DateTime, TimeZone, Utc};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, Record, Role};

/// A fixed instant plus `seconds`, so tests are exact.
pub fn at(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 23, 3, 0, 0).unwrap() + chrono::TimeDelta::seconds(seconds)
}

/// A user record `n` seconds after the fixed instant.
pub fn record(n: i64, text: &str) -> Record {
    Record {
        ts: at(n),
        role: if n % 2 == 0 { Role::User } else { Role::Assistant },
        text: text.to_string(),
        msg_id: format!("m{n}"),
        channel: "slack".to_string(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

/// An STM over a fresh temp folder (kept alive by the returned guard).
pub fn stm(fsync: bool) -> (tempfile::TempDir, Stm) {
    let dir = tempfile::tempdir().unwrap();
    let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), fsync);
    (dir, stm)
}
