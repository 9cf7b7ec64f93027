//! The Postgres store behind the memory seam ([`MemoryStore`]): a
//! channel's memory in the database ([`PgChannel`]), a user's turn on one
//! connection holding the user's advisory lock ([`PgTurn`]), whichever
//! broker takes it. The broker's state folder still holds the channel's
//! export bundles and the logs, which this store's maintenance prunes and
//! rotates with the file store's own steps (it finds no user memory
//! there); the question's vector for recall comes from the channel's
//! embedder, as on the files.
//!
//! What it must not do: decide what a command says or what a tool may do
//! (that is above the seam), or read another user's rows (every statement
//! is keyed by channel and user).

use crate::memory::MemoryError;
use crate::{PgChannel, PgError, PgTurn};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::documents::{Document, DocumentMeta};
use mnemo_sessions::edits::{FactLine, Forgotten};
use mnemo_sessions::export::Export;
use mnemo_sessions::kept::{KeptFile, KeptMeta};
use mnemo_sessions::maintenance::Maintenance;
use mnemo_sessions::recall::{Item, Recall, Recalled};
use mnemo_sessions::reminders::{BookError, Claimed, Finish, Reminder};
use mnemo_sessions::session::{Appended, ContextView};
use mnemo_sessions::store::{
    Cleared, EditBy, Held, Intake, Look, Maintained, MemoryStore, Status, StoreError, UserMemory,
};
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::usage::{Days, Spent, UsageRow};
use mnemo_sessions::versions::{Author, Version};
use mnemo_sessions::whole::Whole;
use mnemo_sessions::whole::merge::{Sides, merge};
use mnemo_sessions::{Layout, Record, SafeName};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// One channel's memory on Postgres, with the broker's state folder for
/// its exports and logs. Cheap to clone.
#[derive(Clone)]
pub struct PgMemory {
    inner: Arc<Inner>,
}

struct Inner {
    channel: PgChannel,
    /// The channel's folder under the state root: export bundles.
    layout: Layout,
    /// Where the question's vector comes from (`recall.embeddings`).
    recall: Recall,
    /// The state folder's own maintenance: logs and export bundles.
    files: Maintenance,
    /// This broker's name in the maintenance leases.
    holder: String,
}

impl PgMemory {
    /// The memory of `channel`; `layout`, `recall` and `files` are the
    /// channel's state folder, its embedder and that folder's maintenance;
    /// `holder` names this broker among several.
    pub fn new(channel: PgChannel, layout: Layout, recall: Recall, files: Maintenance, holder: &str) -> PgMemory {
        PgMemory {
            inner: Arc::new(Inner {
                channel,
                layout,
                recall,
                files,
                holder: holder.to_string(),
            }),
        }
    }

    /// The channel's rows in the database.
    pub fn database(&self) -> &PgChannel {
        &self.inner.channel
    }
}

fn db(e: PgError) -> StoreError {
    StoreError::storage(e)
}

impl From<MemoryError> for StoreError {
    fn from(e: MemoryError) -> StoreError {
        match e {
            MemoryError::Edit(e) => e.into(),
            MemoryError::Db(e) => db(e),
        }
    }
}

#[async_trait]
impl MemoryStore for PgMemory {
    fn channel(&self) -> &str {
        self.inner.channel.name()
    }

    fn config(&self) -> &SessionConfig {
        self.inner.channel.config()
    }

    fn place(&self) -> String {
        format!("the database (channel `{}`)", self.inner.channel.name())
    }

    fn shared(&self) -> bool {
        true
    }

    /// Without the user's turn lock, on the intake pool. A repeat is
    /// queued all the same: it may be a question a dead broker stored and
    /// never answered, and its turn, under the lock, skips it if settled.
    async fn intake(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        _keep: usize,
    ) -> Result<Intake, StoreError> {
        self.inner.channel.intake(user, record, now).await.map_err(db)?;
        Ok(Intake::Queue)
    }

    async fn user(&self, user: &SafeName) -> Result<Box<dyn UserMemory>, StoreError> {
        let turn = self.inner.channel.begin_turn(user).await.map_err(db)?;
        Ok(Box::new(PgUser {
            turn,
            memory: self.clone(),
        }))
    }

    async fn fold(&self, user: &SafeName, now: DateTime<Utc>) -> Result<Option<&'static str>, StoreError> {
        let folded = self.inner.channel.compact(user, now).await.map_err(db)?;
        Ok(folded.label())
    }

    async fn pending(
        &self,
        stored_before: DateTime<Utc>,
        since: DateTime<Utc>,
        look: Look,
    ) -> Result<Vec<(SafeName, Vec<Record>)>, StoreError> {
        self.inner.channel.pending(stored_before, since, look).await.map_err(db)
    }

    /// With `recall.embeddings` and pgvector: the vectors of the user's
    /// new messages (`crate::vectors::fill`: one fill per user at a time,
    /// picking up whatever has none yet).
    fn after_answer(&self, user: &SafeName) -> Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>> {
        let (embedder, _) = self.inner.recall.embedder()?;
        let (channel, user) = (self.inner.channel.clone(), user.clone());
        Some(Box::pin(async move {
            if let Err(e) = crate::vectors::fill(&channel, &user, embedder.as_ref()).await {
                tracing::warn!(user = %user.log_id(), error = %e, "storing message vectors failed; filled at a later turn");
            }
        }))
    }

    /// The database's run, on whichever broker holds the channel's lease,
    /// then the state folder's (logs, export bundles).
    async fn maintain(&self, now: DateTime<Utc>) -> Vec<Maintained> {
        let database = match crate::maintain::run(&self.inner.channel, &self.inner.holder, now).await {
            Ok(report) => {
                let outcome = if report.failed == 0 && report.digest_failures.is_empty() {
                    "ok"
                } else {
                    "partial"
                };
                Maintained {
                    part: "postgres",
                    outcome: report.held_by.is_none().then_some(outcome),
                    failures: report
                        .digest_failures
                        .iter()
                        .map(|f| (f.task.to_string(), f.reason.to_string()))
                        .collect(),
                    report: report.to_string(),
                }
            }
            Err(e) => Maintained {
                part: "postgres",
                outcome: Some("failed"),
                failures: vec![("maintenance".to_string(), e.to_string())],
                report: "failed".to_string(),
            },
        };
        let files = self.inner.files.run(now, &mut |_| {}).await;
        vec![database, Maintained::of_files(&files)]
    }

    /// The files' schedule: the daily summary hour or
    /// `cleanupIntervalMinutes`.
    fn next_due(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.inner.files.next_due(now)
    }

    async fn claim_reminders(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<Claimed>, StoreError> {
        let inner = &self.inner;
        inner
            .channel
            .claim_reminders(now, limit, &inner.holder)
            .await
            .map_err(db)
    }

    async fn finish_reminder(&self, user: &SafeName, id: &str, finish: Finish) -> Result<(), StoreError> {
        let inner = &self.inner;
        inner
            .channel
            .finish_reminder(user, id, finish, &inner.holder)
            .await
            .map_err(db)
    }

    async fn add_usage(&self, user: Option<&SafeName>, days: Days, spent: Spent) -> Result<(), StoreError> {
        self.inner.channel.add_usage(user, days, spent).await.map_err(db)
    }

    async fn usage(&self, user: &SafeName, day: NaiveDate) -> Result<u64, StoreError> {
        self.inner.channel.usage(user, day).await.map_err(db)
    }

    async fn channel_usage(&self, day: NaiveDate) -> Result<u64, StoreError> {
        self.inner.channel.channel_usage(day).await.map_err(db)
    }

    async fn usage_report(&self, since: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        self.inner.channel.usage_report(since).await.map_err(db)
    }
}

/// One user's turn on Postgres: the turn's connection, holding the user's
/// lock until dropped.
pub struct PgUser {
    turn: PgTurn,
    memory: PgMemory,
}

#[async_trait]
impl UserMemory for PgUser {
    fn user(&self) -> &SafeName {
        self.turn.user()
    }

    async fn is_settled(&mut self, msg_id: &str, _now: DateTime<Utc>) -> Result<bool, StoreError> {
        self.turn.is_settled(msg_id).await.map_err(db)
    }

    async fn view(&mut self, n: usize, _now: DateTime<Utc>) -> Result<ContextView, StoreError> {
        self.turn.view(n).await.map_err(db)
    }

    async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<Appended, StoreError> {
        let appended = self.turn.append(record, now).await.map_err(db)?;
        Ok(Appended {
            fold_due: appended.fold_due,
            over_bound: appended.over_bound,
        })
    }

    /// The question's vector from the channel's embedder (the same
    /// `recall.embeddings` as on the files), when set.
    async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
    ) -> Result<Recalled, StoreError> {
        let recall = &self.memory.inner.recall;
        let vector = recall.query_vector(message).await;
        let model = recall.embedder().map(|(e, _)| e.model().to_string());
        let asked = match (&model, &vector) {
            (Some(model), Some(vector)) => Some((model.as_str(), vector.as_slice())),
            _ => None,
        };
        self.turn.recall(message, recent, max_tokens, asked).await.map_err(db)
    }

    async fn search(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, StoreError> {
        self.turn.search(words, limit).await.map_err(db)
    }

    async fn remember(&mut self, who: EditBy, section: FactSection, text: &str) -> Result<String, StoreError> {
        Ok(self.turn.remember(who, section, text).await?)
    }

    async fn update(&mut self, who: EditBy, key: &str, text: &str) -> Result<(), StoreError> {
        Ok(self.turn.update(who, key, text).await?)
    }

    async fn forget(&mut self, who: EditBy, key: &str) -> Result<Forgotten, StoreError> {
        Ok(self.turn.forget(who, key).await?)
    }

    async fn matching(&mut self, words: &str) -> Result<Vec<FactLine>, StoreError> {
        self.turn.matching(words).await.map_err(db)
    }

    async fn forget_facts(&mut self, who: EditBy, keys: &[&str]) -> Result<usize, StoreError> {
        Ok(self.turn.forget_facts(who, keys).await?)
    }

    async fn topic_slugs(&mut self) -> Result<Vec<String>, StoreError> {
        self.turn.topic_slugs().await.map_err(db)
    }

    async fn history(&mut self) -> Result<Vec<Version>, StoreError> {
        self.turn.history().await.map_err(db)
    }

    async fn undo(&mut self, by: Author, now: DateTime<Utc>) -> Result<Option<Version>, StoreError> {
        self.turn.undo(by, now).await.map_err(db)
    }

    async fn status(&mut self) -> Result<Status, StoreError> {
        self.turn.status().await.map_err(db)
    }

    async fn profile(&mut self) -> Result<Option<String>, StoreError> {
        let profile = self.turn.profile().await.map_err(db)?;
        Ok(profile.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()))
    }

    async fn clear(&mut self) -> Result<Cleared, StoreError> {
        self.turn.clear().await.map_err(db)
    }

    async fn held(&mut self) -> Result<Held, StoreError> {
        self.turn.held().await.map_err(db)
    }

    async fn clear_all(&mut self) -> Result<Held, StoreError> {
        let held = self.turn.clear_all().await.map_err(db)?;
        let user = self.turn.user().clone();
        self.memory.inner.channel.forget_usage(&user).await.map_err(db)?;
        Ok(held)
    }

    async fn whole(&mut self) -> Result<Whole, StoreError> {
        let (channel, key) = self.turn.keys();
        let tx = crate::snapshot(self.turn.conn()).await.map_err(db)?;
        let whole = crate::copy::read_in(&tx, &channel, &key).await.map_err(db)?;
        tx.commit().await.map_err(|e| db(e.into()))?;
        Ok(whole.unwrap_or_default())
    }

    /// On the turn's own connection (which holds the user's turn lock), in
    /// one transaction that first locks the user's row, so intake's next
    /// append waits for it: read, merged, written whole, compared.
    async fn merge_in(&mut self, other: &Whole, sides: Sides<'_>, now: DateTime<Utc>) -> Result<(), StoreError> {
        let (channel, key) = self.turn.keys();
        let tx = self.turn.with_user_row().await.map_err(db)?;
        tx.execute(
            "SELECT 1 FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
            &[&channel, &key],
        )
        .await
        .map_err(|e| db(e.into()))?;
        let mine = crate::copy::read_in(&tx, &channel, &key).await.map_err(db)?;
        let merged = merge(mine.unwrap_or_default(), other.clone(), sides, now);
        crate::copy::write_in(&tx, &channel, &key, &merged, true)
            .await
            .map_err(StoreError::storage)?;
        tx.commit().await.map_err(|e| db(e.into()))
    }

    async fn export(&mut self, now: DateTime<Utc>) -> Result<Export, StoreError> {
        let inner = &self.memory.inner;
        let user = self.turn.user().clone();
        let book = self.turn.book().await.map_err(db)?;
        let usage = inner.channel.user_usage(&user).await.map_err(db)?;
        crate::export::export(
            inner.channel.store(),
            inner.channel.name(),
            &inner.layout,
            &user,
            (&book, &usage),
            now,
        )
        .await
    }

    async fn timezone(&mut self) -> Result<Option<String>, StoreError> {
        self.turn.timezone().await.map_err(db)
    }

    async fn set_timezone(&mut self, zone: &str) -> Result<(), StoreError> {
        self.turn.set_timezone(zone).await.map_err(db)
    }

    async fn reminders(&mut self) -> Result<Vec<Reminder>, StoreError> {
        self.turn.reminders().await.map_err(db)
    }

    async fn add_reminder(&mut self, reminder: &Reminder, max: usize) -> Result<(), StoreError> {
        match self.turn.add_reminder(reminder, max).await.map_err(db)? {
            Ok(()) => Ok(()),
            Err(BookError::Full) => Err(StoreError::Invalid(mnemo_sessions::reminders::FULL)),
            Err(e @ BookError::Taken) => Err(StoreError::storage(e)),
        }
    }

    async fn cancel_reminder(&mut self, id: &str) -> Result<bool, StoreError> {
        self.turn.cancel_reminder(id).await.map_err(db)
    }

    async fn take_missed(&mut self, chat_id: &str) -> Result<Vec<Reminder>, StoreError> {
        self.turn.take_missed(chat_id).await.map_err(db)
    }

    async fn add_document(&mut self, doc: &Document) -> Result<bool, StoreError> {
        self.turn.add_document(doc).await.map_err(db)
    }

    async fn documents(&mut self) -> Result<Vec<DocumentMeta>, StoreError> {
        self.turn.documents().await.map_err(db)
    }

    async fn forget_document(&mut self, id: &str) -> Result<bool, StoreError> {
        self.turn.forget_document(id).await.map_err(db)
    }

    async fn keep_file(&mut self, file: &KeptFile) -> Result<bool, StoreError> {
        self.turn.keep_file(file).await.map_err(db)
    }

    async fn kept_files(&mut self) -> Result<Vec<KeptMeta>, StoreError> {
        self.turn.kept_files().await.map_err(db)
    }

    async fn forget_kept(&mut self, id: &str) -> Result<bool, StoreError> {
        self.turn.forget_kept(id).await.map_err(db)
    }
}
