//! Shared fixtures: a temp sessions folder, fixed clocks, and a snapshot of
//! every file under a folder to prove an operation touched nothing.

use chrono::{DateTime, TimeZone, Utc};
use mnemo_sessions::Layout;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub layout: Layout,
}

pub fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "slack");
    Sandbox { dir, layout }
}

/// 2026-03-01 at `h`:`m` UTC.
pub fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, h, m, 0).unwrap()
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every file and folder under `root` with its bytes and mtime.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let bytes = if meta.is_dir() {
                stack.push(entry.path());
                Vec::new()
            } else {
                std::fs::read(entry.path()).unwrap()
            };
            out.insert(entry.path(), (bytes, meta.modified().unwrap()));
        }
    }
    out
}
