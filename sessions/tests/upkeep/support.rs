//! Builders shared by the upkeep specs: a channel in a temp folder, records
//! at exact instants, a fake summarizer that counts its calls, and a full
//! listing of a tree (paths and contents) to prove nothing changed.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::maintenance::{Maintenance, MaintenanceReport};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::summarizer::{SummarizeError, Summarizer, SummaryKind, SummaryOutput, SummaryRequest};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
}

pub fn record(ts: &str, text: &str) -> Record {
    Record {
        ts: utc(ts),
        role: Role::User,
        text: text.to_string(),
        msg_id: format!("{ts}-{text}"),
        channel: "slack".to_string(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

/// A channel over a fresh temp folder (kept alive by the returned guard).
pub fn channel() -> (tempfile::TempDir, Stm) {
    let dir = tempfile::tempdir().unwrap();
    let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
    (dir, stm)
}

pub async fn say(stm: &Stm, user: &str, ts: &str, text: &str) {
    stm.append(&SafeName::of(user), &record(ts, text)).await.unwrap();
}

/// One request the fake saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub kind: SummaryKind,
    pub texts: Vec<String>,
    pub notes: Vec<String>,
}

/// A summarizer that answers with the texts it was given, fails for
/// messages containing any of `failing` markers, and counts calls and the
/// most calls in flight at once.
#[derive(Default)]
pub struct FakeSummarizer {
    pub calls: AtomicUsize,
    pub failing: Mutex<BTreeSet<String>>,
    pub seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    /// Runs inside every call, e.g. to change the disk while a summary is
    /// being made.
    pub during_call: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl FakeSummarizer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn fail_on(&self, marker: &str) {
        self.failing.lock().unwrap().insert(marker.to_string());
    }

    pub fn heal(&self) {
        self.failing.lock().unwrap().clear();
    }
}

#[async_trait]
impl Summarizer for FakeSummarizer {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(hook) = self.during_call.lock().unwrap().as_ref() {
            hook();
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Give other requests the chance to start, so the bound is tested.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let texts: Vec<String> = request.messages.iter().map(|r| r.text.clone()).collect();
        let notes = request.notes.to_vec();
        self.seen.lock().unwrap().push(Seen {
            kind: request.kind,
            texts: texts.clone(),
            notes: notes.clone(),
        });
        let all = texts
            .iter()
            .chain(notes.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ");
        if self.failing.lock().unwrap().iter().any(|m| all.contains(m.as_str())) {
            return Err(SummarizeError::Failed("fake outage".into()));
        }
        Ok(SummaryOutput {
            summary: format!("Summary of: {all}"),
            facts: Vec::new(),
        })
    }
}

pub fn maintenance(stm: &Stm, config: SessionConfig, tz: chrono_tz::Tz, fake: &Arc<FakeSummarizer>) -> Maintenance {
    let summarizer: Arc<dyn Summarizer> = fake.clone();
    Maintenance::new(stm.clone(), config, tz, summarizer)
}

pub async fn run_at(m: &Maintenance, now: &str) -> MaintenanceReport {
    let mut lines = Vec::new();
    let report = m.run(utc(now), &mut |p| lines.push(p.to_string())).await;
    assert!(!lines.is_empty(), "a run always reports progress");
    report
}

/// Every file under `root` with its bytes: compare before and after to prove
/// an action touched nothing.
pub fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            let key = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                out.insert(format!("{key}/"), Vec::new());
                walk(&path, root, out);
            } else {
                out.insert(key, std::fs::read(&path).unwrap());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
