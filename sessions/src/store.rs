//! The memory seam: the one way from the broker to where a channel's memory
//! lives. [`MemoryStore`] is one channel's memory (intake, a user's turn,
//! folds, recovery, maintenance); [`UserMemory`] is one user's memory for
//! the length of a turn, holding whatever the store needs to keep that
//! user's turns apart (on Postgres the user's advisory lock; on the files
//! nothing: the broker's own per-user queue serialises them, and each write
//! takes the user's file lock).
//!
//! Everything that is the same on every store is written once above this
//! seam, over these traits: the `/session` commands and their replies
//! ([`crate::commands`]), the memory tools and their argument checks (the
//! broker's `memory_tools`), the context and recall's labels and packing
//! ([`crate::context`], [`crate::recall::pack`]), the rules of a fold
//! ([`crate::compaction::plan`]) and what settles a question
//! ([`crate::pending`]). Below it, each store only stores: the files
//! ([`files::FileStore`]) and PostgreSQL (`mnemo_pg::PgMemory`).
//!
//! The contract of each method is specified once, in the conformance suite
//! (`tests/conformance` of the broker), which every store must pass.
//!
//! What it must not do: know a platform, call the model except through the
//! store's summarizer, or take a user, channel or path from anything but
//! the caller (a [`SafeName`] and the store's own channel).

pub mod files;

use crate::config::SessionConfig;
use crate::documents::{Document, DocumentMeta};
use crate::edits::{EditError, FactLine, Forgotten};
use crate::export::Export;
use crate::kept::{KeptFile, KeptMeta};
use crate::names::SafeName;
use crate::recall::{Item, Recalled};
use crate::record::Record;
use crate::reminders::{Claimed, Finish, Reminder};
use crate::session::{Appended, ContextView};
use crate::summarizer::FactSection;
use crate::usage::{Days, Spent, UsageRow};
use crate::versions::{Author, Version};
use crate::whole::Whole;
use crate::whole::merge::Sides;
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Why a store operation did not happen: an edit refused for its argument
/// (the caller's to fix, said to them), or the storage failed (details
/// for the log only; the user gets a short apology).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An argument the store will not take (size, key shape).
    #[error("{0}")]
    Invalid(&'static str),
    /// No fact or topic note with that key.
    #[error("no fact or topic note with that key")]
    NotFound,
    /// The files or the database failed.
    #[error(transparent)]
    Storage(Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// A storage failure, boxed.
    pub fn storage(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::Storage(Box::new(e))
    }
}

impl From<EditError> for StoreError {
    fn from(e: EditError) -> StoreError {
        match e {
            EditError::Invalid(reason) => StoreError::Invalid(reason),
            EditError::NotFound => StoreError::NotFound,
            other => StoreError::storage(other),
        }
    }
}

/// What intake did with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intake {
    /// Stored (or, on a store several brokers share, stored before by a
    /// broker that may have died with it): its turn answers it, unless
    /// something settled it by then.
    Queue,
    /// A platform's repeat of a message stored and queued here already.
    Repeat,
}

/// Where [`MemoryStore::pending`] looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// Every message in the window, archived or not (at a start).
    Everywhere,
    /// Short-term memory only (a shared store's sweep, every 30 s).
    Unfolded,
}

/// Who edits long-term memory, the profile's size cap, and when.
#[derive(Clone, Copy, Debug)]
pub struct EditBy {
    pub by: Author,
    /// `ltm.maxProfileChars`.
    pub max_chars: usize,
    pub now: DateTime<Utc>,
}

/// What `/session status` tells of a user's memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Messages in short-term memory (not folded).
    pub stm_messages: usize,
    /// Messages folded into the archive.
    pub archived_messages: usize,
    /// When the rolling summary last changed, if there is one.
    pub summary_at: Option<DateTime<Utc>>,
    /// Entries of the profile; `None` when it could not be read.
    pub profile_entries: Option<usize>,
    pub topic_notes: usize,
    /// Bytes and files the user's memory takes, where memory is files.
    pub storage: Option<(u64, u64)>,
    /// The user's own timezone (`/session timezone`), if set.
    pub timezone: Option<String>,
    /// Reminders waiting for their time.
    pub reminders: usize,
    /// Documents the user sent that memory keeps.
    pub documents: usize,
    /// Files the user sent, kept as they were (`attachments.keep`).
    pub kept_files: usize,
}

/// What `/session clear` removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleared {
    pub messages: usize,
    pub had_summary: bool,
}

/// How much a store holds about a user, in its own unit (what `/session
/// clear all` would delete).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub count: usize,
    /// `file` on the files, `stored item` on a database.
    pub unit: &'static str,
}

/// What a maintenance run of a store did, for the log and the metrics.
#[derive(Debug)]
pub struct Maintained {
    /// The part of the store that ran (`files`, `postgres`).
    pub part: &'static str,
    /// `ok`, `partial` or `failed`; `None` when another broker ran it.
    pub outcome: Option<&'static str>,
    /// The steps that failed (retried next run): task and reason.
    pub failures: Vec<(String, String)>,
    /// The run's own one-line report.
    pub report: String,
}

impl Maintained {
    /// The report of a run of the files' maintenance
    /// ([`crate::maintenance::Maintenance::run`]).
    pub fn of_files(report: &crate::maintenance::MaintenanceReport) -> Maintained {
        Maintained {
            part: "files",
            outcome: Some(if report.failures.is_empty() { "ok" } else { "partial" }),
            failures: report
                .failures
                .iter()
                .map(|f| (f.task.to_string(), f.reason.to_string()))
                .collect(),
            report: report.to_string(),
        }
    }
}

/// One channel's memory, on whatever store keeps it. Cheap to share
/// (`Arc<dyn MemoryStore>`).
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// The channel's name.
    fn channel(&self) -> &str;

    /// The channel's `sessions/config.json`.
    fn config(&self) -> &SessionConfig;

    /// Where this channel's memory is, for an operator: a folder or a
    /// database, never a user's data.
    fn place(&self) -> String;

    /// Whether other brokers share this store: they may die with questions
    /// stored and unanswered, which this broker then sweeps for.
    fn shared(&self) -> bool;

    /// Stores a message as it arrives, durably, without waiting for the
    /// user's turn in progress; a repeat among the user's last `keep`
    /// records is not stored again.
    async fn intake(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        keep: usize,
    ) -> Result<Intake, StoreError>;

    /// Starts `user`'s turn: their memory, theirs only, until dropped.
    async fn user(&self, user: &SafeName) -> Result<Box<dyn UserMemory>, StoreError>;

    /// Folds `user`'s older messages if the rules say so; the metric's
    /// outcome label, `None` when there was nothing to do.
    async fn fold(&self, user: &SafeName, now: DateTime<Utc>) -> Result<Option<&'static str>, StoreError>;

    /// Every user with questions not settled, and those questions, oldest
    /// first: stored after `since` and before `stored_before`.
    async fn pending(
        &self,
        stored_before: DateTime<Utc>,
        since: DateTime<Utc>,
        look: Look,
    ) -> Result<Vec<(SafeName, Vec<Record>)>, StoreError>;

    /// Work to run in the background after a turn answered: what a store
    /// derives from new messages later (vectors on Postgres; the files
    /// index on append, so `None`).
    fn after_answer(&self, _user: &SafeName) -> Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>> {
        None
    }

    /// One maintenance run at `now` (expiry, summaries, retention, logs).
    async fn maintain(&self, now: DateTime<Utc>) -> Vec<Maintained>;

    /// When maintenance is next due after `now`.
    fn next_due(&self, now: DateTime<Utc>) -> DateTime<Utc>;

    /// Claims for this broker up to `limit` reminders due at `now`, each
    /// at most once across brokers and restarts; claims a dead broker
    /// abandoned become missed first ([`crate::reminders`]).
    async fn claim_reminders(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<Claimed>, StoreError>;

    /// Ends this broker's claim of `user`'s reminder `id` as `finish`.
    async fn finish_reminder(&self, user: &SafeName, id: &str, finish: Finish) -> Result<(), StoreError>;

    /// Adds `spent` to `user`'s tokens of their day `days.user` (no user:
    /// the channel's own work, digests) and to the channel's total of its
    /// day `days.channel`; every broker sharing the store sees the sum
    /// ([`crate::usage`]).
    async fn add_usage(&self, user: Option<&SafeName>, days: Days, spent: Spent) -> Result<(), StoreError>;

    /// `user`'s tokens (in + out, every purpose) on their day `day`.
    async fn usage(&self, user: &SafeName, day: NaiveDate) -> Result<u64, StoreError>;

    /// The channel's tokens (every user's and its own) on its day `day`.
    async fn channel_usage(&self, day: NaiveDate) -> Result<u64, StoreError>;

    /// Every row from `since` on: each user's by their day, and the
    /// channel's totals (`user: None`) by its day; by user, day, purpose.
    async fn usage_report(&self, since: NaiveDate) -> Result<Vec<UsageRow>, StoreError>;
}

/// One user's memory during a turn. Every method reaches this user's
/// memory only (and, for search and recall, the channel's `_shared`
/// notes).
#[async_trait]
pub trait UserMemory: Send {
    fn user(&self) -> &SafeName;

    /// Whether the question `msg_id` is settled: a record answers it
    /// ([`crate::pending`]).
    async fn is_settled(&mut self, msg_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// The context's memory: summary, profile and the last `n` unfolded
    /// records, oldest first, read in one consistent snapshot.
    async fn view(&mut self, n: usize, now: DateTime<Utc>) -> Result<ContextView, StoreError>;

    /// The view for answering `msg_id`, or `None` when it is settled.
    async fn question_view(
        &mut self,
        msg_id: &str,
        n: usize,
        now: DateTime<Utc>,
    ) -> Result<Option<ContextView>, StoreError> {
        if self.is_settled(msg_id, now).await? {
            return Ok(None);
        }
        self.view(n, now).await.map(Some)
    }

    /// Stores `record` (durable when this returns) and makes it findable.
    async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<Appended, StoreError>;

    /// What the user's older memory holds for `message`, outside `recent`,
    /// packed under `max_tokens`.
    async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
    ) -> Result<Recalled, StoreError>;

    /// The best `limit` items of the user's memory for `words`.
    async fn search(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, StoreError>;

    /// Adds a fact to the profile; its key.
    async fn remember(&mut self, who: EditBy, section: FactSection, text: &str) -> Result<String, StoreError>;

    /// Replaces the fact `key`'s value.
    async fn update(&mut self, who: EditBy, key: &str, text: &str) -> Result<(), StoreError>;

    /// Forgets the fact `key`, or the topic note of that name.
    async fn forget(&mut self, who: EditBy, key: &str) -> Result<Forgotten, StoreError>;

    /// The profile's facts holding every word of `words`.
    async fn matching(&mut self, words: &str) -> Result<Vec<FactLine>, StoreError>;

    /// Forgets the facts `keys` in one change; how many went.
    async fn forget_facts(&mut self, who: EditBy, keys: &[&str]) -> Result<usize, StoreError>;

    /// The user's topic notes' names.
    async fn topic_slugs(&mut self) -> Result<Vec<String>, StoreError>;

    /// The kept versions of the user's long-term memory, newest first.
    async fn history(&mut self) -> Result<Vec<Version>, StoreError>;

    /// Takes back the last change; the version restored, if any.
    async fn undo(&mut self, by: Author, now: DateTime<Utc>) -> Result<Option<Version>, StoreError>;

    /// The numbers `/session status` shows.
    async fn status(&mut self) -> Result<Status, StoreError>;

    /// The profile's body, if there is one.
    async fn profile(&mut self) -> Result<Option<String>, StoreError>;

    /// Forgets short-term memory and the rolling summary.
    async fn clear(&mut self) -> Result<Cleared, StoreError>;

    /// How much is stored about the user (what `clear_all` would delete).
    async fn held(&mut self) -> Result<Held, StoreError>;

    /// Deletes everything stored about the user (their usage rows too;
    /// the channel's totals hold no user and stay); how much was there.
    async fn clear_all(&mut self) -> Result<Held, StoreError>;

    /// Everything stored about the user, bundled as the files hold it.
    async fn export(&mut self, now: DateTime<Utc>) -> Result<Export, StoreError>;

    /// The user's own IANA timezone, if they set one.
    async fn timezone(&mut self) -> Result<Option<String>, StoreError>;

    /// Sets the user's timezone (an IANA name the caller checked).
    async fn set_timezone(&mut self, zone: &str) -> Result<(), StoreError>;

    /// The user's reminders waiting for their time, soonest first.
    async fn reminders(&mut self) -> Result<Vec<Reminder>, StoreError>;

    /// Adds a reminder the caller checked, unless `max` are waiting
    /// ([`StoreError::Invalid`] with [`crate::reminders::FULL`]).
    async fn add_reminder(&mut self, reminder: &Reminder, max: usize) -> Result<(), StoreError>;

    /// Cancels the waiting reminder `id`; whether there was one.
    async fn cancel_reminder(&mut self, id: &str) -> Result<bool, StoreError>;

    /// The missed times of reminders set in `chat_id`, each given once.
    async fn take_missed(&mut self, chat_id: &str) -> Result<Vec<Reminder>, StoreError>;

    /// Keeps a document the caller took the text out of, findable by
    /// recall and search at once; `false` when the same file (same id) is
    /// kept already, which is left as it is.
    async fn add_document(&mut self, doc: &Document) -> Result<bool, StoreError>;

    /// The user's documents, oldest first.
    async fn documents(&mut self) -> Result<Vec<DocumentMeta>, StoreError>;

    /// Deletes document `id` and its text; whether there was one.
    async fn forget_document(&mut self, id: &str) -> Result<bool, StoreError>;

    /// Keeps a file the user sent as it was (`attachments.keep`); `false`
    /// when one of its id is kept already.
    async fn keep_file(&mut self, file: &KeptFile) -> Result<bool, StoreError>;

    /// The user's kept files, oldest first.
    async fn kept_files(&mut self) -> Result<Vec<KeptMeta>, StoreError>;

    /// Deletes kept file `id`; whether there was one.
    async fn forget_kept(&mut self, id: &str) -> Result<bool, StoreError>;

    /// Everything stored about the user as one value ([`crate::whole`]),
    /// read in one consistent snapshot: linking reads both accounts'
    /// memories with it to merge them.
    async fn whole(&mut self) -> Result<Whole, StoreError>;

    /// Merges `other` (another account's whole memory, as its store's
    /// [`UserMemory::whole`] read it) into this user's by
    /// [`crate::whole::merge`], in one step under the user's lock, so
    /// nothing stored meanwhile is missed: in one transaction on Postgres
    /// (intake waits for it); on the files, each file replaced by one that
    /// holds more or added, versions first (a crash leaves the memory as it
    /// was or with part of the merge, never with less), read back and
    /// compared, the recall index rebuilt on first use.
    async fn merge_in(&mut self, other: &Whole, sides: Sides<'_>, now: DateTime<Utc>) -> Result<(), StoreError>;
}
