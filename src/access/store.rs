//! One channel's access rules as the running broker sees them: the last
//! read of `access.json`, re-read when the file changed. The file is
//! looked at (one `stat` comparing inode, size and mtime; no watcher task
//! to stop) at most once per [`RECHECK`] of message time, not per message,
//! so `mnemo access …` takes effect without a restart, within a second.
//! The bot's own writes (pairing, greetings) update the cache at once, and
//! a stranger's pairing step reads the file as it is on disk, so an
//! approval is honoured at once too. The rules are shared (`Arc`), not
//! copied, per message.
//!
//! A corrupt file is moved aside as `access.json.corrupt-<ts>`, logged at
//! error level, and the channel runs on [`restrictive_fallback`] (strangers
//! get nothing, the last good `allowFrom` keeps talking) until a valid file
//! appears — never on the default, never `open`. A missing file with a
//! quarantined copy beside it counts as still corrupt, so a restart does
//! not loosen access either. It must not decide about messages (that is
//! `decide`).

use super::decide::restrictive_fallback;
use super::file::{self, AccessFile, AccessFileError};
use chrono::{DateTime, Utc};
use mnemo_sessions::fsutil::FileStamp;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the rules are used without looking at the file again (the
/// longest an operator's edit waits to take effect).
pub const RECHECK: Duration = Duration::from_secs(1);

/// Enough of a file's metadata to tell that it changed: an atomic rename
/// gives a new inode, an in-place edit a new size or mtime.
type Stamp = FileStamp;

fn stamp(path: &Path) -> io::Result<Option<Stamp>> {
    FileStamp::at(path)
}

/// The rules in effect, and what they were derived from.
struct Cached {
    /// `None` before the first look.
    seen: Option<Option<Stamp>>,
    /// When the file was last looked at (message time), for [`RECHECK`].
    checked_at: Option<DateTime<Utc>>,
    rules: Arc<AccessFile>,
    /// The last file that parsed, for the fallback's `allowFrom`.
    last_good: Option<AccessFile>,
    /// A corrupt file was quarantined and no valid one has appeared since:
    /// a missing file then means "still broken", not "defaults".
    degraded: bool,
}

pub struct AccessStore {
    path: PathBuf,
    /// How long a look at the file stays good (see [`RECHECK`]).
    recheck: Duration,
    /// A std mutex: held only for a `stat` and at most one small read and
    /// write, never across an `.await`.
    cached: Mutex<Cached>,
}

impl AccessStore {
    /// The store of the `access.json` at `path` (`Layout::access_path`),
    /// looked at no more than once per [`RECHECK`].
    pub fn new(path: PathBuf) -> Self {
        Self::with_recheck(path, RECHECK)
    }

    /// With the file looked at no more than once per `recheck` (zero: on
    /// every message).
    pub fn with_recheck(path: PathBuf, recheck: Duration) -> Self {
        let cached = Cached {
            seen: None,
            checked_at: None,
            rules: Arc::default(),
            last_good: None,
            degraded: false,
        };
        AccessStore {
            path,
            recheck,
            cached: Mutex::new(cached),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rules in effect at `now`: the file is looked at again (and
    /// re-read if it changed) once [`RECHECK`] has passed since the last
    /// look, or if the clock went back.
    pub fn current(&self, now: DateTime<Utc>) -> Arc<AccessFile> {
        let mut cached = self.lock();
        let fresh = cached
            .checked_at
            .and_then(|at| (now - at).to_std().ok())
            .is_some_and(|since| since < self.recheck);
        if !fresh {
            self.refresh(&mut cached, now);
            cached.checked_at = Some(now);
        }
        Arc::clone(&cached.rules)
    }

    /// Whether the channel is running on the restrictive fallback.
    pub fn degraded(&self) -> bool {
        self.lock().degraded
    }

    /// A read-modify-write of the file under the cross-process lock (see
    /// [`file::update`]); the cache takes the result. While degraded nothing
    /// is written (the operator must fix or replace the file first).
    pub fn update<T>(&self, change: impl FnOnce(&mut AccessFile) -> T) -> Result<Option<T>, AccessFileError> {
        let mut cached = self.lock();
        if cached.degraded {
            return Ok(None);
        }
        let (out, rules) = file::update(&self.path, change)?;
        cached.seen = Some(stamp(&self.path).ok().flatten());
        cached.last_good = Some(rules.clone());
        cached.rules = Arc::new(rules);
        Ok(Some(out))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        // Every update of `Cached` is a few assignments: consistent even if
        // a holder panicked.
        self.cached.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn refresh(&self, cached: &mut Cached, now: DateTime<Utc>) {
        let current = match stamp(&self.path) {
            Ok(s) => s,
            Err(e) => {
                if !cached.degraded {
                    tracing::error!(file = %self.path.display(), error = %e, "cannot inspect access.json; running on the restrictive fallback until it is readable");
                }
                self.degrade(cached, None);
                return;
            }
        };
        if cached.seen == Some(current) {
            return;
        }
        let Some(before) = current else {
            // Quarantined and not replaced: still broken, also after a
            // restart (the last good allowFrom is then unknown: nobody).
            if let Some(copy) = quarantined(&self.path).pop() {
                if !cached.degraded {
                    tracing::error!(
                        file = %self.path.display(), quarantined = %copy.display(),
                        "access.json is missing and its last version was corrupt: strangers are refused until a valid access.json is written (`mnemo access list` says how)"
                    );
                }
                self.degrade(cached, None);
                return;
            }
            cached.seen = Some(None);
            if !cached.degraded {
                cached.rules = Arc::default();
                cached.last_good = Some(AccessFile::default());
            }
            return;
        };
        match file::read(&self.path) {
            Ok(Some(rules)) => {
                if cached.degraded {
                    tracing::warn!(file = %self.path.display(), "access.json is valid again; leaving the restrictive fallback");
                }
                cached.seen = Some(Some(before));
                cached.last_good = Some(rules.clone());
                cached.rules = Arc::new(rules);
                cached.degraded = false;
            }
            // Removed between the stat and the read: look again next time.
            Ok(None) => cached.seen = None,
            Err(AccessFileError::Invalid(invalid)) => {
                let (field, reason) = (invalid.field().unwrap_or("(the whole file)"), invalid.reason());
                // Someone may be writing it in place right now: quarantine
                // only a file that stood still while it was read.
                if stamp(&self.path).ok().flatten() != Some(before) {
                    return;
                }
                let moved = self.quarantine(now);
                match &moved {
                    Ok(to) => tracing::error!(
                        file = %self.path.display(), field = %field, reason = %reason, moved_to = %to.display(),
                        "access.json is corrupt: moved aside; strangers are refused and only the last good allowFrom may talk until a valid access.json is written (`mnemo access list` shows the rules)"
                    ),
                    Err(e) => tracing::error!(
                        file = %self.path.display(), field = %field, reason = %reason, error = %e,
                        "access.json is corrupt and could not be moved aside; running on the restrictive fallback until it is fixed"
                    ),
                }
                let stays = if moved.is_ok() { None } else { Some(before) };
                self.degrade(cached, stays);
            }
            Err(e) => {
                tracing::error!(error = %e, "access.json is unreadable; running on the restrictive fallback");
                self.degrade(cached, Some(before));
            }
        }
    }

    fn degrade(&self, cached: &mut Cached, seen: Option<Stamp>) {
        cached.seen = Some(seen);
        cached.rules = Arc::new(restrictive_fallback(cached.last_good.as_ref()));
        cached.degraded = true;
    }

    /// Renames the file to `access.json.corrupt-<YYYYmmddTHHMMSSZ>` (with a
    /// counter if that exists), keeping it for the operator to inspect.
    fn quarantine(&self, now: DateTime<Utc>) -> io::Result<PathBuf> {
        let base = format!("{}.corrupt-{}", file_name(&self.path), now.format("%Y%m%dT%H%M%SZ"));
        let mut target = self.path.with_file_name(&base);
        let mut n = 1;
        while target.exists() {
            n += 1;
            target = self.path.with_file_name(format!("{base}-{n}"));
        }
        fs::rename(&self.path, &target)?;
        Ok(target)
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "access.json".into())
}

/// What `mnemo access list` and `config check` say when the channel runs on
/// the restrictive fallback because of a quarantined file; `None` when it
/// does not (a present file is judged by reading it).
pub fn quarantine_notice(path: &Path) -> Option<String> {
    if path.exists() {
        return None;
    }
    let copy = quarantined(path).pop()?;
    Some(format!(
        "{} is missing and its last version was corrupt (moved to {}): the bot refuses everyone but the \
         allowFrom it last read, and after a restart everyone, until a valid access.json is written — fix the \
         copy and move it back, or start a new file with `mnemo access allow|policy|groups …`",
        path.display(),
        copy.display()
    ))
}

/// The quarantined copies next to `path`, oldest first, for `mnemo access list`.
pub fn quarantined(path: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.corrupt-", file_name(path));
    let Some(dir) = path.parent() else { return Vec::new() };
    // Listed sorted by name, and the names sort by their timestamps.
    let entries = mnemo_sessions::fsutil::list_dir(dir, dir).unwrap_or_default();
    entries
        .iter()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::file::DmPolicy;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 23, 3, 28, 32).unwrap()
    }

    fn setup() -> (tempfile::TempDir, AccessStore) {
        let dir = tempfile::tempdir().unwrap();
        // These specs change the file between looks at the same `now`.
        let store = AccessStore::with_recheck(dir.path().join("access.json"), Duration::ZERO);
        (dir, store)
    }

    fn write_json(path: &Path, json: &str) {
        fs::write(path, json).unwrap();
    }

    #[test]
    fn no_file_means_the_default_pairing_policy() {
        let (_dir, store) = setup();
        assert_eq!(*store.current(now()), AccessFile::default());
        assert!(!store.degraded());
    }

    #[test]
    fn a_changed_file_is_read_again_without_a_restart() {
        let (_dir, store) = setup();
        write_json(store.path(), r#"{"dmPolicy": "open"}"#);
        assert_eq!(store.current(now()).dm_policy, DmPolicy::Open);
        // Same length, new content, via an atomic rename (new inode).
        let mut f = AccessFile {
            dm_policy: DmPolicy::Allowlist,
            ..AccessFile::default()
        };
        f.allow_from.insert("U1".into());
        file::write(store.path(), &f).unwrap();
        assert_eq!(*store.current(now()), f);
        fs::remove_file(store.path()).unwrap();
        assert_eq!(*store.current(now()), AccessFile::default());
    }

    #[test]
    fn the_file_is_looked_at_once_per_recheck_not_per_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = AccessStore::new(dir.path().join("access.json"));
        write_json(store.path(), r#"{"dmPolicy": "open"}"#);
        let t0 = now();
        assert_eq!(store.current(t0).dm_policy, DmPolicy::Open);
        write_json(store.path(), r#"{"dmPolicy": "disabled"}"#);
        let soon = t0 + chrono::TimeDelta::milliseconds(999);
        assert_eq!(
            store.current(soon).dm_policy,
            DmPolicy::Open,
            "within the interval the file is not looked at"
        );
        let later = t0 + chrono::TimeDelta::from_std(RECHECK).unwrap();
        assert_eq!(
            store.current(later).dm_policy,
            DmPolicy::Disabled,
            "an edit is picked up"
        );
        // A clock that went back looks again rather than trusting the cache.
        write_json(store.path(), r#"{"dmPolicy": "allowlist"}"#);
        assert_eq!(store.current(t0).dm_policy, DmPolicy::Allowlist);
    }

    #[test]
    fn a_corrupt_file_is_quarantined_and_the_last_good_allow_from_is_kept() {
        let (dir, store) = setup();
        write_json(
            store.path(),
            r#"{"dmPolicy": "open", "allowFrom": ["U1"], "groups": {"G": {}}}"#,
        );
        store.current(now());
        write_json(store.path(), r#"{"dmPolicy": "open", "allowFrom": ["U1"#);
        let rules = store.current(now());
        assert_eq!(rules.dm_policy, DmPolicy::Allowlist, "never open while corrupt");
        assert!(rules.allow_from.contains("U1") && rules.groups.is_empty());
        assert!(store.degraded());
        let moved = dir.path().join("access.json.corrupt-20260323T032832Z");
        assert_eq!(
            fs::read_to_string(&moved).unwrap(),
            r#"{"dmPolicy": "open", "allowFrom": ["U1"#
        );
        assert!(!store.path().exists());
        assert_eq!(quarantined(store.path()), vec![moved]);

        // Still degraded while the file is missing; no writes either.
        assert_eq!(store.current(now()).dm_policy, DmPolicy::Allowlist);
        assert_eq!(store.update(|f| f.dm_policy = DmPolicy::Open).unwrap(), None);
        assert!(!store.path().exists());

        // A valid file ends it.
        write_json(store.path(), r#"{"dmPolicy": "pairing"}"#);
        assert_eq!(store.current(now()).dm_policy, DmPolicy::Pairing);
        assert!(!store.degraded());
    }

    #[test]
    fn a_file_corrupt_from_the_start_admits_no_one() {
        let (_dir, store) = setup();
        write_json(store.path(), r#"{"dmPolicy": "opne"}"#);
        let rules = store.current(now());
        assert_eq!(rules.dm_policy, DmPolicy::Allowlist);
        assert!(rules.allow_from.is_empty());
        // A second corrupt file in the same second gets its own name.
        write_json(store.path(), "nope");
        store.current(now());
        assert_eq!(quarantined(store.path()).len(), 2);
    }

    #[test]
    fn updates_go_to_disk_and_to_the_cache() {
        let (_dir, store) = setup();
        store.update(|f| f.allow_from.insert("U7".into())).unwrap();
        assert!(file::read(store.path()).unwrap().unwrap().allow_from.contains("U7"));
        assert!(store.current(now()).allow_from.contains("U7"));
    }
}
