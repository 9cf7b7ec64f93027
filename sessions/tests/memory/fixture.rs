//! A user's short-term memory in a temp folder, numbered messages, and
//! readers that show exactly what is in the log, the archive (duplicates
//! included) and the summary.

use super::fake::FakeSummarizer;
use super::support::{Sandbox, at, sandbox};
use chrono::{DateTime, TimeDelta, Utc};
use flate2::read::GzDecoder;
use mnemo_sessions::compaction::Compactor;
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::summarizer::Summarizer;
use mnemo_sessions::summary::{self, SummaryFile};
use mnemo_sessions::{Record, Role, SafeName, archive};
use std::io::{BufRead, BufReader};
use std::sync::Arc;

pub struct Memory {
    pub sb: Sandbox,
    pub stm: Stm,
    pub user: SafeName,
    pub config: SessionConfig,
}

/// threshold / contextWindow / maxMessages; no ageing unless a test sets it.
pub fn config(threshold: usize, window: usize, max: usize) -> SessionConfig {
    let mut c = SessionConfig::default();
    c.compacting.threshold = threshold;
    c.stm.context_window = window;
    c.stm.max_messages = max;
    c.stm.max_age_minutes = 100_000;
    c.stm.fsync = false;
    c
}

pub fn memory(config: SessionConfig) -> Memory {
    let sb = sandbox();
    let stm = Stm::new(sb.layout.clone(), LockRegistry::new(), false);
    Memory {
        sb,
        stm,
        user: SafeName::of("U1"),
        config,
    }
}

/// Message `i`: ten seconds apart from 09:00, user and assistant in turn.
pub fn rec(i: usize) -> Record {
    Record {
        ts: at(9, 0) + TimeDelta::seconds(10 * i as i64),
        role: if i.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        text: format!("message {i}"),
        msg_id: format!("m{i}"),
        channel: "slack".into(),
        thread_id: None,
        chat_id: None,
        user_name: i.is_multiple_of(2).then(|| "Kevin".to_string()),
    }
}

pub fn recs(range: std::ops::Range<usize>) -> Vec<Record> {
    range.map(rec).collect()
}

pub fn ids(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.msg_id.clone()).collect()
}

pub fn now() -> DateTime<Utc> {
    at(12, 0)
}

impl Memory {
    pub fn compactor(&self, s: &Arc<FakeSummarizer>) -> Compactor {
        Compactor::new(self.stm.clone(), self.config.clone(), s.clone() as Arc<dyn Summarizer>)
    }

    pub async fn append(&self, range: std::ops::Range<usize>) {
        for i in range {
            self.stm.append(&self.user, &rec(i)).await.unwrap();
        }
    }

    pub fn log(&self) -> Vec<Record> {
        self.stm.read_all(&self.user).unwrap().records
    }

    /// Every archived record, file by file, without removing duplicates.
    pub fn archived(&self) -> Vec<Record> {
        let mut out = Vec::new();
        for path in archive::files(&self.sb.layout, &self.user).unwrap() {
            let reader = BufReader::new(GzDecoder::new(std::fs::File::open(path).unwrap()));
            for line in reader.lines() {
                out.push(serde_json::from_str(&line.unwrap()).unwrap());
            }
        }
        out
    }

    pub fn archive_names(&self) -> Vec<String> {
        let files = archive::files(&self.sb.layout, &self.user).unwrap();
        files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    pub fn summary(&self) -> Option<SummaryFile> {
        summary::read(&self.sb.layout, &self.user).unwrap()
    }

    /// Archive then log: every message that ever arrived, as the user sees it.
    pub fn everything(&self) -> Vec<Record> {
        let mut all = self.archived();
        all.extend(self.log());
        all
    }
}
