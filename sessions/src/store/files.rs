//! The file store: a channel's memory as the files of DESIGN §3, behind
//! the memory seam ([`super::MemoryStore`]). It holds the channel's
//! session states ([`Sessions`]: what a turn reads, in memory), its recall
//! index ([`Recall`], fed on every append) and its maintenance; each
//! operation takes the user's file lock itself, so a [`FileUser`] holds no
//! lock between calls (the broker's per-user queue keeps a user's turns in
//! order, and intake appends beside a turn in progress).
//!
//! What it must not do: reach a path not computed by [`crate::Layout`] for
//! the caller's own name, or keep a memory copy a write made stale (every
//! change to a user's files drops it: [`Sessions::forget`]).

mod loaded;
mod reminders;
mod usage;
pub mod whole;

pub use reminders::{read_book, write_book};
pub use usage::{read_usage, write_usage};

use super::{Cleared, EditBy, Held, Intake, Look, Maintained, MemoryStore, Status, StoreError, UserMemory};
use crate::compaction::{CompactionOutcome, Compactor, unfolded_recent};
use crate::config::SessionConfig;
use crate::documents::{self, Document, DocumentMeta};
use crate::edits::{Editor, FactLine, Forgotten};
use crate::export::{self, Export};
use crate::fsutil::remove_if_exists;
use crate::kept::{self, KeptFile, KeptMeta};
use crate::maintenance::Maintenance;
use crate::names::SafeName;
use crate::recall::{Item, Recall, Recalled, TurnQuery};
use crate::record::Record;
use crate::reminders::{Claimed, Finish, Reminder};
use crate::session::{Appended, ContextView, Sessions};
use crate::stm::Stm;
use crate::summarizer::{FactSection, NoModel, Summarizer};
use crate::usage::{Days, Spent, UsageRow};
use crate::versions::{self, Author, Version};
use crate::{pending, profile, report, summary, topics};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use std::sync::Arc;

/// One channel's memory in its sessions folder. Cheap to clone.
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    stm: Stm,
    sessions: Sessions,
    recall: Recall,
    maintenance: Maintenance,
    reminders: reminders::FileReminders,
    usage: usage::FileUsage,
}

impl FileStore {
    /// The store of the channel `stm` is for, with its operator `config`;
    /// `summarizer` folds and writes the summaries, days end at midnight
    /// in `tz`, and `rotates_logs` says whether this channel's maintenance
    /// also rotates the state folder's shared `logs/`.
    pub fn new(stm: Stm, config: SessionConfig, summarizer: Arc<dyn Summarizer>, tz: Tz, rotates_logs: bool) -> Self {
        let recall = Recall::of(&stm);
        let compactor = Compactor::new(stm.clone(), config.clone(), summarizer.clone());
        let sessions = Sessions::new(stm.clone(), config.clone(), compactor);
        let maintenance = Maintenance::new(stm.clone(), config, tz, summarizer).rotating_logs(rotates_logs);
        let reminders = reminders::FileReminders::new(stm.layout().clone());
        let usage = usage::FileUsage::new(stm.layout().clone());
        FileStore {
            inner: Arc::new(Inner {
                stm,
                sessions,
                recall,
                maintenance,
                reminders,
                usage,
            }),
        }
    }

    /// The store of a channel's folder for a process without a model (the
    /// CLI acting for a user, tests): a fold it starts fails and changes
    /// nothing, maintenance writes no summary, days end at midnight UTC.
    pub fn without_model(stm: Stm, config: SessionConfig) -> Self {
        FileStore::new(stm, config, Arc::new(NoModel), chrono_tz::UTC, false)
    }

    /// The channel's session states (for benches that seed them).
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// The channel's recall index.
    pub fn recall(&self) -> &Recall {
        &self.inner.recall
    }

    fn stm(&self) -> &Stm {
        &self.inner.stm
    }

    /// Indexes a message just stored for recall. With recall off on the
    /// channel only an index already in use is kept current: no turn pays
    /// for one it does not search, and the next load catches up on the files.
    async fn index(&self, user: &SafeName, record: &Record) {
        if self.config().recall.enabled {
            self.inner.recall.index_async(user, record).await;
        } else {
            self.inner.recall.index_if_in_use(user, record).await;
        }
    }
}

#[async_trait]
impl MemoryStore for FileStore {
    fn channel(&self) -> &str {
        self.stm().layout().channel().as_str()
    }

    fn config(&self) -> &SessionConfig {
        self.inner.sessions.config()
    }

    fn place(&self) -> String {
        format!("the files under {}", self.stm().layout().root().display())
    }

    fn shared(&self) -> bool {
        false
    }

    async fn intake(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
        keep: usize,
    ) -> Result<Intake, StoreError> {
        let appended = self.inner.sessions.append_new(user, record, now, keep).await;
        match appended.map_err(StoreError::storage)? {
            Some(_) => {
                self.index(user, record).await;
                Ok(Intake::Queue)
            }
            None => Ok(Intake::Repeat),
        }
    }

    async fn user(&self, user: &SafeName) -> Result<Box<dyn UserMemory>, StoreError> {
        Ok(Box::new(FileUser {
            store: self.clone(),
            user: user.clone(),
        }))
    }

    async fn fold(&self, user: &SafeName, now: DateTime<Utc>) -> Result<Option<&'static str>, StoreError> {
        let result = self.inner.sessions.compact(user, now).await;
        result.map(|outcome| label(&outcome)).map_err(StoreError::storage)
    }

    async fn pending(
        &self,
        stored_before: DateTime<Utc>,
        since: DateTime<Utc>,
        _look: Look,
    ) -> Result<Vec<(SafeName, Vec<Record>)>, StoreError> {
        let stm = self.stm().clone();
        crate::blocking::off_workers(move || scan(&stm, stored_before, since))
            .await
            .unwrap_or_else(|| {
                Err(StoreError::storage(std::io::Error::other(
                    "the runtime is shutting down",
                )))
            })
    }

    async fn maintain(&self, now: DateTime<Utc>) -> Vec<Maintained> {
        let report = self.inner.maintenance.run(now, &mut |_| {}).await;
        vec![Maintained::of_files(&report)]
    }

    fn next_due(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.inner.maintenance.next_due(now)
    }

    async fn claim_reminders(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<Claimed>, StoreError> {
        self.inner.reminders.claim(now, limit).await
    }

    async fn finish_reminder(&self, user: &SafeName, id: &str, finish: Finish) -> Result<(), StoreError> {
        self.inner.reminders.finish(user, id, finish).await
    }

    async fn add_usage(&self, user: Option<&SafeName>, days: Days, spent: Spent) -> Result<(), StoreError> {
        self.inner.usage.add(user, days, spent).await
    }

    async fn usage(&self, user: &SafeName, day: NaiveDate) -> Result<u64, StoreError> {
        self.inner.usage.of_user(user, day).await
    }

    async fn channel_usage(&self, day: NaiveDate) -> Result<u64, StoreError> {
        self.inner.usage.of_channel(day).await
    }

    async fn usage_report(&self, since: NaiveDate) -> Result<Vec<UsageRow>, StoreError> {
        self.inner.usage.report(since).await
    }
}

/// The metric label of a compaction run; `None` when there was nothing
/// to do (not counted).
fn label(outcome: &CompactionOutcome) -> Option<&'static str> {
    use CompactionOutcome as C;
    Some(match outcome {
        C::NotNeeded | C::AlreadyRunning => return None,
        C::Resumed { .. } => "resumed",
        C::Compacted { .. } => "compacted",
        C::Fallback { .. } => "fallback",
        C::SlidingWindow { .. } => "sliding_window",
        C::SummarizerFailed { .. } => "summarizer_failed",
        C::Superseded => "superseded",
    })
}

/// Every user's unsettled questions stored between `since` and
/// `stored_before`, from each user's short-term log (a read of every log:
/// at start only).
fn scan(
    stm: &Stm,
    stored_before: DateTime<Utc>,
    since: DateTime<Utc>,
) -> Result<Vec<(SafeName, Vec<Record>)>, StoreError> {
    let mut found = Vec::new();
    for user in stm.users().map_err(StoreError::storage)? {
        let records = match unfolded_recent(stm, &user, usize::MAX) {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(user = %user.log_id(), error = %e, "recovery: a short-term log could not be read; skipped");
                continue;
            }
        };
        let waiting: Vec<Record> = pending::pending(&records)
            .into_iter()
            .filter(|q| q.ts > since && q.ts < stored_before)
            .cloned()
            .collect();
        if !waiting.is_empty() {
            found.push((user, waiting));
        }
    }
    Ok(found)
}

/// One user's memory in the files, for one turn.
pub struct FileUser {
    store: FileStore,
    user: SafeName,
}

impl FileUser {
    fn stm(&self) -> &Stm {
        self.store.stm()
    }

    fn editor(&self, who: EditBy) -> Editor<'_> {
        Editor {
            layout: self.stm().layout(),
            user: &self.user,
            by: who.by,
            max_chars: who.max_chars,
            now: who.now,
        }
    }

    /// Runs `edit` under the user's lock. The session state sees the new
    /// profile at its next use: taking the lock makes it look
    /// ([`Stm::lock`]); recall's file sources follow their stamps.
    async fn edit<T>(&self, edit: impl FnOnce(&Self) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        edit(self)
    }
}

#[async_trait]
impl UserMemory for FileUser {
    fn user(&self) -> &SafeName {
        &self.user
    }

    async fn is_settled(&mut self, msg_id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let sessions = &self.store.inner.sessions;
        sessions
            .is_settled(&self.user, msg_id, now)
            .await
            .map_err(StoreError::storage)
    }

    async fn view(&mut self, n: usize, now: DateTime<Utc>) -> Result<ContextView, StoreError> {
        let sessions = &self.store.inner.sessions;
        sessions
            .turn_view(&self.user, n, now)
            .await
            .map_err(StoreError::storage)
    }

    /// One read of the session state: the view, checked for the answer.
    async fn question_view(
        &mut self,
        msg_id: &str,
        n: usize,
        now: DateTime<Utc>,
    ) -> Result<Option<ContextView>, StoreError> {
        let view = self.view(n, now).await?;
        Ok((!pending::is_settled(&view.recent, msg_id)).then_some(view))
    }

    async fn append(&mut self, record: &Record, now: DateTime<Utc>) -> Result<Appended, StoreError> {
        let sessions = &self.store.inner.sessions;
        let appended = sessions
            .append(&self.user, record, now)
            .await
            .map_err(StoreError::storage)?;
        self.store.index(&self.user, record).await;
        Ok(appended)
    }

    async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
    ) -> Result<Recalled, StoreError> {
        let query = TurnQuery {
            message,
            recent,
            max_tokens,
        };
        Ok(self.store.inner.recall.for_turn_async(&self.user, &query).await)
    }

    async fn search(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, StoreError> {
        // On the blocking pool: a user's first search may load their index.
        let (recall, user, words) = (self.store.inner.recall.clone(), self.user.clone(), words.to_string());
        Ok(
            crate::blocking::off_workers(move || recall.search(&user, &words, limit))
                .await
                .unwrap_or_default(),
        )
    }

    async fn remember(&mut self, who: EditBy, section: FactSection, text: &str) -> Result<String, StoreError> {
        self.edit(|me| Ok(me.editor(who).remember(section, text)?)).await
    }

    async fn update(&mut self, who: EditBy, key: &str, text: &str) -> Result<(), StoreError> {
        self.edit(|me| Ok(me.editor(who).update(key, text)?)).await
    }

    async fn forget(&mut self, who: EditBy, key: &str) -> Result<Forgotten, StoreError> {
        self.edit(|me| Ok(me.editor(who).forget(key)?)).await
    }

    async fn matching(&mut self, words: &str) -> Result<Vec<FactLine>, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        // An editor reads the profile; who and when only matter to a write.
        let who = EditBy {
            by: Author::Command,
            max_chars: self.store.config().ltm.max_profile_chars,
            now: DateTime::<Utc>::UNIX_EPOCH,
        };
        Ok(self.editor(who).matching(words)?)
    }

    async fn forget_facts(&mut self, who: EditBy, keys: &[&str]) -> Result<usize, StoreError> {
        self.edit(|me| Ok(me.editor(who).forget_facts(keys)?)).await
    }

    async fn topic_slugs(&mut self) -> Result<Vec<String>, StoreError> {
        let listed = topics::list(self.stm().layout(), &self.user).map_err(StoreError::storage)?;
        Ok(listed.into_iter().map(|t| t.slug).collect())
    }

    async fn history(&mut self) -> Result<Vec<Version>, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        versions::history(self.stm().layout(), &self.user).map_err(StoreError::storage)
    }

    async fn undo(&mut self, by: Author, now: DateTime<Utc>) -> Result<Option<Version>, StoreError> {
        let who = EditBy {
            by,
            max_chars: self.store.config().ltm.max_profile_chars,
            now,
        };
        self.edit(|me| Ok(me.editor(who).undo()?)).await
    }

    async fn status(&mut self) -> Result<Status, StoreError> {
        let (layout, user) = (self.stm().layout(), &self.user);
        let storage = report::user_storage(self.stm(), user).map_err(StoreError::storage)?;
        let profile_entries = match profile::read(layout, user) {
            Ok(Some(p)) => Some(profile::entries_of_body(&p.body)),
            Ok(None) => Some(0),
            Err(e) => {
                tracing::warn!(user = %user.log_id(), error = %e, "profile unreadable for status");
                None
            }
        };
        Ok(Status {
            stm_messages: storage.stm_messages,
            archived_messages: storage.archived_messages,
            summary_at: summary_time(self.stm(), user),
            profile_entries,
            topic_notes: topics::list(layout, user).map_err(StoreError::storage)?.len(),
            storage: Some((storage.bytes, storage.files)),
            timezone: self.store.inner.reminders.timezone(user).await?,
            reminders: self.store.inner.reminders.pending(user).await?.len(),
            documents: documents::list(layout, user).map_err(StoreError::storage)?.len(),
            kept_files: kept::list(layout, user).map_err(StoreError::storage)?.len(),
        })
    }

    async fn profile(&mut self) -> Result<Option<String>, StoreError> {
        profile::read_body(self.stm().layout(), &self.user).map_err(StoreError::storage)
    }

    /// Removes the user's STM folder: the log, the rolling summary and any
    /// quarantined lines. Long-term memory stays.
    async fn clear(&mut self) -> Result<Cleared, StoreError> {
        let (stm, user) = (self.stm(), &self.user);
        let guard = stm.lock(user).await;
        let messages = stm.count(user).map_err(StoreError::storage)?;
        let had_summary = stm.layout().summary_path(user).exists();
        stm.remove_locked(&guard, user).map_err(StoreError::storage)?;
        remove_if_exists(stm.layout().state_root(), &stm.layout().stm_dir(user)).map_err(StoreError::storage)?;
        // At once: the cleared messages must not come back through recall.
        self.store.inner.recall.forget(user).map_err(StoreError::storage)?;
        drop(guard);
        self.store.inner.sessions.forget(user).await;
        Ok(Cleared { messages, had_summary })
    }

    async fn held(&mut self) -> Result<Held, StoreError> {
        let mut count = 0usize;
        for root in report::user_roots(self.stm().layout(), &self.user).map_err(StoreError::storage)? {
            count += report::files_under(&root).map_err(StoreError::storage)?.len();
        }
        Ok(Held { count, unit: "file" })
    }

    /// Removes everything stored about the user (see
    /// [`report::user_roots`]) and their recall index.
    async fn clear_all(&mut self) -> Result<Held, StoreError> {
        let (stm, user) = (self.stm(), &self.user);
        let layout = stm.layout();
        let guard = stm.lock(user).await;
        let roots = report::user_roots(layout, user).map_err(StoreError::storage)?;
        let mut count = 0usize;
        for root in &roots {
            count += report::files_under(root).map_err(StoreError::storage)?.len();
        }
        stm.remove_locked(&guard, user).map_err(StoreError::storage)?;
        for root in &roots {
            remove_if_exists(layout.state_root(), root).map_err(StoreError::storage)?;
        }
        // After the files: an index rebuilt in between would bring them back.
        self.store.inner.recall.forget(user).map_err(StoreError::storage)?;
        drop(guard);
        self.store.inner.sessions.forget(user).await;
        self.store.inner.reminders.forget(user).await;
        self.store.inner.usage.forget(user).await?;
        Ok(Held { count, unit: "file" })
    }

    async fn whole(&mut self) -> Result<crate::whole::Whole, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        Ok(whole::read(self.stm().layout(), &self.user)?.memory)
    }

    /// [`whole::merge_in`].
    async fn merge_in(
        &mut self,
        other: &crate::whole::Whole,
        sides: crate::whole::merge::Sides<'_>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        whole::merge_in(self, other, sides, now).await
    }

    /// Bundles the user's files under their lock, so the bundle is one
    /// consistent snapshot. The recall index is derived from these files
    /// and not bundled.
    async fn export(&mut self, now: DateTime<Utc>) -> Result<Export, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        export::export_user(self.stm().layout(), &self.user, now, &[]).map_err(StoreError::storage)
    }

    async fn timezone(&mut self) -> Result<Option<String>, StoreError> {
        self.store.inner.reminders.timezone(&self.user).await
    }

    async fn set_timezone(&mut self, zone: &str) -> Result<(), StoreError> {
        self.store.inner.reminders.set_timezone(&self.user, zone).await
    }

    async fn reminders(&mut self) -> Result<Vec<Reminder>, StoreError> {
        self.store.inner.reminders.pending(&self.user).await
    }

    async fn add_reminder(&mut self, reminder: &Reminder, max: usize) -> Result<(), StoreError> {
        self.store.inner.reminders.add(&self.user, reminder, max).await
    }

    async fn cancel_reminder(&mut self, id: &str) -> Result<bool, StoreError> {
        self.store.inner.reminders.cancel(&self.user, id).await
    }

    async fn take_missed(&mut self, chat_id: &str) -> Result<Vec<Reminder>, StoreError> {
        self.store.inner.reminders.take_missed(&self.user, chat_id).await
    }

    /// Written under the user's lock, like every other change to their
    /// memory; recall sees the file at its next refresh (the folder's stamp
    /// moved).
    async fn add_document(&mut self, doc: &Document) -> Result<bool, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        let layout = self.stm().layout();
        if documents::has(layout, &self.user, &doc.meta.id) {
            return Ok(false);
        }
        documents::write(layout, &self.user, doc).map_err(StoreError::storage)?;
        Ok(true)
    }

    async fn documents(&mut self) -> Result<Vec<DocumentMeta>, StoreError> {
        documents::list(self.stm().layout(), &self.user).map_err(StoreError::storage)
    }

    async fn forget_document(&mut self, id: &str) -> Result<bool, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        documents::remove(self.stm().layout(), &self.user, id).map_err(StoreError::storage)
    }

    async fn keep_file(&mut self, file: &KeptFile) -> Result<bool, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        kept::keep(self.stm().layout(), &self.user, file).map_err(StoreError::storage)
    }

    async fn kept_files(&mut self) -> Result<Vec<KeptMeta>, StoreError> {
        kept::list(self.stm().layout(), &self.user).map_err(StoreError::storage)
    }

    async fn forget_kept(&mut self, id: &str) -> Result<bool, StoreError> {
        let _guard = self.stm().lock(&self.user).await;
        kept::remove(self.stm().layout(), &self.user, id).map_err(StoreError::storage)
    }
}

/// When the rolling summary last changed: its `last_compacted`, else the
/// file's modification time.
fn summary_time(stm: &Stm, user: &SafeName) -> Option<DateTime<Utc>> {
    let layout = stm.layout();
    match summary::read(layout, user) {
        Ok(Some(doc)) => doc.meta.last_compacted.or_else(|| {
            std::fs::metadata(layout.summary_path(user))
                .and_then(|m| m.modified())
                .ok()
                .map(DateTime::<Utc>::from)
        }),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "rolling summary unreadable for status");
            None
        }
    }
}
