//! What the Postgres store's test binaries share: a migrated database, the
//! records and summarizers the tests play with, a plain client to look at
//! the rows. Each binary uses a part of it.
#![allow(dead_code)]

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use mnemo_pg::migrate;
use mnemo_pg::{PgChannel, PgStore};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_sessions::{Record, Role};
use mnemo_testkit::pg;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

pub fn store(url: &str) -> PgStore {
    PgStore::connect(url, 8, Duration::from_secs(5)).unwrap()
}

pub async fn migrated() -> (PgStore, String) {
    let url = pg::database().url();
    let store = store(&url);
    migrate::migrate(&store).await.unwrap();
    (store, url)
}

pub fn at(minute: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap() + TimeDelta::minutes(minute)
}

pub fn record(i: i64, text: &str) -> Record {
    Record {
        ts: at(i),
        role: if i % 2 == 0 { Role::User } else { Role::Assistant },
        text: text.to_string(),
        msg_id: format!("m{i}"),
        channel: "telegram".into(),
        thread_id: None,
        chat_id: Some("c1".into()),
        user_name: None,
    }
}

/// Sums up by counting, and learns one fact per batch.
pub struct Counting {
    pub calls: AtomicUsize,
}

#[async_trait]
impl Summarizer for Counting {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(SummaryOutput {
            summary: format!("summary {n}: {} messages folded", request.messages.len()),
            facts: vec![Fact {
                section: FactSection::Facts,
                key: "folds".into(),
                value: n.to_string(),
            }],
        })
    }
}

pub struct Failing;

#[async_trait]
impl Summarizer for Failing {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Err(SummarizeError::Failed("down".into()))
    }
}

/// Waits for a go before answering.
pub struct Gated {
    pub started: Notify,
    pub go: Notify,
}

#[async_trait]
impl Summarizer for Gated {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        self.started.notify_one();
        self.go.notified().await;
        Ok(SummaryOutput {
            summary: "late summary".into(),
            facts: vec![],
        })
    }
}

pub fn config() -> SessionConfig {
    let mut c = SessionConfig::default();
    c.compacting.threshold = 20;
    c.stm.context_window = 5;
    c.stm.max_messages = 30;
    c.stm.max_age_minutes = 100_000;
    c
}

pub fn channel(store: &PgStore, summarizer: Arc<dyn Summarizer>) -> PgChannel {
    PgChannel::new(store.clone(), "telegram", config(), summarizer)
}

pub fn counting() -> Arc<Counting> {
    Arc::new(Counting {
        calls: AtomicUsize::new(0),
    })
}

pub async fn tokio_postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}
