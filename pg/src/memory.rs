//! Long-term memory edits on Postgres: remember, update and forget facts
//! of the profile, forget a topic note, history and undo — for the
//! `/session` commands and the model's memory tools — with the file
//! store's rules, reused from `mnemo_sessions` (argument checks, keys,
//! merge and cap: [`TextEditor`]; the fact log's entries:
//! [`facts::changes_for`] / [`facts::sync_changes`]; version labels).
//!
//! Each edit is **one transaction** on the turn's connection (which holds
//! the user's advisory lock), with the user's row locked `FOR UPDATE` so a
//! fold committing at the same time waits: the fact log is first brought
//! in line with the profile as stored (a profile from before the log, or
//! one `mnemo store copy` wrote, becomes `import`/`operator` entries), the
//! previous profile is kept as a version row, the profile replaced, and
//! what changed appended to the fact log (a forgotten fact's entries
//! deleted). *Invariant:* after each commit the profile's bullets are
//! exactly `facts::live` of the user's `mnemo_facts` rows. Every
//! statement is scoped by channel and user; no text in an error.

use crate::turn::PgTurn;
use crate::{PgError, pg_text};
use chrono::{DateTime, Utc};
use mnemo_sessions::edits::{EditError, FactLine, Forgotten, Saved, TextEditor, check_key};
use mnemo_sessions::facts::{self, FactBy, FactEdit, FactEntry};
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::topics;
use mnemo_sessions::versions::{Author, Version};
use mnemo_sessions::{Layout, SafeName};
use tokio_postgres::Transaction;

pub use mnemo_sessions::store::EditBy;

mod log;
mod search;

pub(crate) use log::{Log, keep_version, name_of, parse_name};
pub(crate) use search::{FACTS_MATCHING, NOTES_MATCHING, fact_hits, note_items};

/// Why an edit did not happen: refused for its argument (the user's to
/// fix) or the database failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error(transparent)]
    Db(#[from] PgError),
}

impl From<tokio_postgres::Error> for MemoryError {
    fn from(e: tokio_postgres::Error) -> MemoryError {
        MemoryError::Db(e.into())
    }
}

/// The profile as the fact log is about to be changed: its body and the
/// log, brought in line (what the log misses recorded as `by`).
pub(crate) struct Profile {
    /// Whether the user has a row.
    pub(crate) exists: bool,
    pub(crate) body: Option<String>,
    pub(crate) log: Log,
}

impl Profile {
    /// Locks the user's row and syncs the log with the stored body.
    pub(crate) async fn lock(
        tx: &Transaction<'_>,
        channel: &str,
        user: &str,
        by: FactBy,
        now: DateTime<Utc>,
    ) -> Result<Profile, PgError> {
        let row = tx
            .query_opt(
                "SELECT profile, profile_at FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
                &[&channel, &user],
            )
            .await?;
        let Some(row) = row else {
            return Ok(Profile {
                exists: false,
                body: None,
                log: Log { rows: Vec::new() },
            });
        };
        let body: Option<String> = row.get(0);
        let at: Option<DateTime<Utc>> = row.get(1);
        let mut log = Log::read(tx, channel, user).await?;
        let started = log.started(tx, channel, user).await?;
        let sync = facts::sync_changes(
            &log.entries(),
            started,
            body.as_deref().unwrap_or(""),
            by,
            at.unwrap_or(now),
        );
        if !sync.is_empty() {
            tracing::info!(
                user = %crate::logged(user),
                changed = sync.len(),
                "profile and fact log differed; the profile's facts recorded"
            );
            log.apply(tx, channel, user, &sync).await?;
        }
        Ok(Profile {
            exists: true,
            body,
            log,
        })
    }

    /// Stores `body` as the profile (keeping the previous one as a
    /// version) and records in the log what changed, with `dropped` cut by
    /// the cap and `batch` the messages it came from (compaction).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn replace(
        &mut self,
        tx: &Transaction<'_>,
        channel: &str,
        user: &SafeName,
        body: &str,
        what: &str,
        dropped: &[facts::LiveFact],
        edit: FactEdit<'_>,
        author: Author,
    ) -> Result<(), PgError> {
        let key = user.as_str();
        if !self.exists {
            tx.execute(
                "INSERT INTO mnemo_users (channel, user_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&channel, &key],
            )
            .await?;
            self.exists = true;
        }
        // What is stored is what the log must match (NUL kept as ␀).
        let stored = pg_text(body);
        let file = Layout::profile_file(user);
        keep_version(tx, channel, key, &file, self.body.as_deref(), (author, what), edit.now).await?;
        tx.execute(
            "UPDATE mnemo_users SET profile = $3, profile_at = $4 WHERE channel = $1 AND user_key = $2",
            &[&channel, &key, &&*stored, &edit.now],
        )
        .await?;
        let changes = facts::changes_for(&self.log.entries(), &stored, dropped, edit);
        self.log.apply(tx, channel, key, &changes).await?;
        self.body = Some(stored.into_owned());
        Ok(())
    }
}

impl PgTurn {
    /// Runs one edit of the profile in one transaction: `edit` gets the
    /// body as stored and returns its result and the new body, if any.
    async fn edit_profile<T>(
        &mut self,
        who: EditBy,
        edit: impl FnOnce(TextEditor<'_>) -> Result<(T, Option<Saved>), EditError>,
    ) -> Result<T, MemoryError> {
        let user = self.user().clone();
        let channel = self.channel_name().to_string();
        let tx = self.conn().transaction().await?;
        let mut profile = Profile::lock(&tx, &channel, user.as_str(), FactBy::Operator, who.now).await?;
        let body = profile.body.clone().unwrap_or_default();
        let editor = TextEditor {
            body: &body,
            max_chars: who.max_chars,
        };
        let (out, saved) = edit(editor)?;
        if let Some(saved) = saved {
            let fact_edit = FactEdit {
                by: who.by.into(),
                batch: &[],
                now: who.now,
            };
            profile
                .replace(
                    &tx,
                    &channel,
                    &user,
                    &saved.body,
                    &saved.what,
                    &saved.dropped,
                    fact_edit,
                    who.by,
                )
                .await?;
        }
        tx.commit().await?;
        Ok(out)
    }

    /// The profile's facts, in order.
    pub async fn facts(&mut self) -> Result<Vec<FactLine>, PgError> {
        let body = self.profile_body().await?;
        Ok(TextEditor {
            body: &body,
            max_chars: usize::MAX,
        }
        .facts())
    }

    /// Facts holding every word of `words` ([`TextEditor::matching`]).
    pub async fn matching(&mut self, words: &str) -> Result<Vec<FactLine>, PgError> {
        let body = self.profile_body().await?;
        Ok(TextEditor {
            body: &body,
            max_chars: usize::MAX,
        }
        .matching(words))
    }

    async fn profile_body(&mut self) -> Result<String, PgError> {
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let row = self
            .conn()
            .query_opt(
                "SELECT profile FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                &[&channel, &user],
            )
            .await?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)).unwrap_or_default())
    }

    /// Adds `text` as a new fact under `section`; returns its key.
    pub async fn remember(&mut self, who: EditBy, section: FactSection, text: &str) -> Result<String, MemoryError> {
        self.edit_profile(who, |e| {
            let (key, saved) = e.remember(section, text)?;
            Ok((key, Some(saved)))
        })
        .await
    }

    /// Replaces the text of the fact `key`.
    pub async fn update(&mut self, who: EditBy, key: &str, text: &str) -> Result<(), MemoryError> {
        self.edit_profile(who, |e| Ok(((), e.update(key, text)?))).await
    }

    /// Removes the facts with these keys in one change; returns how many went.
    pub async fn forget_facts(&mut self, who: EditBy, keys: &[&str]) -> Result<usize, MemoryError> {
        self.edit_profile(who, |e| Ok(e.forget_facts(keys))).await
    }

    /// Forgets the fact `key`, or else the topic note of that name.
    pub async fn forget(&mut self, who: EditBy, key: &str) -> Result<Forgotten, MemoryError> {
        let key = check_key(key)?;
        if self.forget_facts(who, &[key.as_str()]).await? > 0 {
            return Ok(Forgotten::Fact { key });
        }
        let Ok(slug) = topics::parse_slug(&key) else {
            return Err(EditError::NotFound.into());
        };
        if self.forget_topic(who, slug.as_str()).await? {
            Ok(Forgotten::Topic {
                slug: slug.as_str().to_string(),
            })
        } else {
            Err(EditError::NotFound.into())
        }
    }

    /// Deletes the topic note `slug` (a checked slug), keeping it as a
    /// version; whether there was one.
    async fn forget_topic(&mut self, who: EditBy, slug: &str) -> Result<bool, PgError> {
        let user = self.user().clone();
        let channel = self.channel_name().to_string();
        let tx = self.conn().transaction().await?;
        let locked = tx
            .query_opt(
                "SELECT 1 FROM mnemo_users WHERE channel = $1 AND user_key = $2 FOR UPDATE",
                &[&channel, &user.as_str()],
            )
            .await?;
        if locked.is_none() {
            return Ok(false);
        }
        let row = tx
            .query_opt(
                "DELETE FROM mnemo_topics WHERE channel = $1 AND user_key = $2 AND slug = $3 RETURNING document",
                &[&channel, &user.as_str(), &slug],
            )
            .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        let document: String = row.get(0);
        let what = format!("forgot topic `{slug}`");
        let file = topic_file(&user, slug);
        keep_version(
            &tx,
            &channel,
            user.as_str(),
            &file,
            Some(&document),
            (who.by, &what),
            who.now,
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The slugs of the user's topic notes, sorted.
    pub async fn topic_slugs(&mut self) -> Result<Vec<String>, PgError> {
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let rows = self
            .conn()
            .query(
                "SELECT slug FROM mnemo_topics WHERE channel = $1 AND user_key = $2 ORDER BY slug",
                &[&channel, &user],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The user's kept versions, newest first.
    pub async fn history(&mut self) -> Result<Vec<Version>, PgError> {
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let rows = self
            .conn()
            .query(
                "SELECT seq, ts, by, what, file, before, undone_at FROM mnemo_versions
                 WHERE channel = $1 AND user_key = $2 ORDER BY seq DESC",
                &[&channel, &user],
            )
            .await?;
        Ok(rows.iter().filter_map(|row| version_of(row, &user)).collect())
    }

    /// Puts back the newest kept version not yet undone (profile or topic
    /// note) and marks it undone, recording in the fact log what that changed (`by`);
    /// `None` when there is nothing to undo.
    pub async fn undo(&mut self, by: Author, now: DateTime<Utc>) -> Result<Option<Version>, PgError> {
        let user = self.user().clone();
        let channel = self.channel_name().to_string();
        let key = user.as_str();
        let tx = self.conn().transaction().await?;
        let mut profile = Profile::lock(&tx, &channel, key, FactBy::Operator, now).await?;
        if !profile.exists {
            return Ok(None);
        }
        let rows = tx
            .query(
                "SELECT seq, ts, by, what, file, before, undone_at FROM mnemo_versions
                 WHERE channel = $1 AND user_key = $2 AND undone_at IS NULL ORDER BY seq DESC",
                &[&channel, &key],
            )
            .await?;
        // A row this build cannot read is skipped, as the files skip an
        // unreadable record.
        let Some(version) = rows.iter().find_map(|row| version_of(row, key)) else {
            tx.commit().await?;
            return Ok(None);
        };
        let seq = i64::try_from(version.seq).unwrap_or(i64::MAX);
        tx.execute(
            "UPDATE mnemo_versions SET undone_at = $4 WHERE channel = $1 AND user_key = $2 AND seq = $3",
            &[&channel, &key, &seq, &now],
        )
        .await?;
        let version = Version {
            undone: Some(now),
            ..version
        };
        if version.file == Layout::profile_file(&user) {
            tx.execute(
                "UPDATE mnemo_users SET profile = $3, profile_at = $4 WHERE channel = $1 AND user_key = $2",
                &[&channel, &key, &version.before, &now],
            )
            .await?;
            let body = version.before.as_deref().unwrap_or("");
            let sync = facts::sync_changes(&profile.log.entries(), true, body, by.into(), now);
            profile.log.apply(&tx, &channel, key, &sync).await?;
        } else if let Some(slug) = topic_slug(&user, &version.file) {
            match &version.before {
                Some(document) => {
                    tx.execute(
                        "INSERT INTO mnemo_topics (channel, user_key, slug, document, updated_at)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (channel, user_key, slug) DO UPDATE SET document = $4, updated_at = $5",
                        &[&channel, &key, &slug, document, &now],
                    )
                    .await?
                }
                None => {
                    tx.execute(
                        "DELETE FROM mnemo_topics WHERE channel = $1 AND user_key = $2 AND slug = $3",
                        &[&channel, &key, &slug],
                    )
                    .await?
                }
            };
        } else {
            tracing::warn!(
                user = %crate::logged(key),
                seq,
                "version of a document that is not this user's; dropped"
            );
            tx.commit().await?;
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(version))
    }

    /// The user's fact log, in order (for export and tests).
    pub async fn fact_log(&mut self) -> Result<Vec<FactEntry>, PgError> {
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let log = Log::read(&***self.conn(), &channel, &user).await?;
        Ok(log.entries())
    }
}

/// Records an ongoing topic compaction found in the user's topic note
/// (`topics::merge_fact_text`: the files' rules), keeping the previous note
/// as a version. A note that does not parse is reported and left alone,
/// as on the files.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn merge_topic(
    tx: &Transaction<'_>,
    channel: &str,
    user: &SafeName,
    key: &str,
    value: &str,
    max_chars: usize,
    now: DateTime<Utc>,
) -> Result<(), PgError> {
    let slug = topics::slug_for_key(key);
    let file = topic_file(user, slug.as_str());
    let existing: Option<String> = tx
        .query_opt(
            "SELECT document FROM mnemo_topics WHERE channel = $1 AND user_key = $2 AND slug = $3",
            &[&channel, &user.as_str(), &slug.as_str()],
        )
        .await?
        .map(|row| row.get(0));
    let merged = topics::merge_fact_text(
        std::path::Path::new(&file),
        existing.as_deref(),
        user,
        key,
        value,
        max_chars,
        now,
    );
    let document = match merged {
        Ok(Some(document)) => document,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "ongoing topic not recorded in a topic note");
            return Ok(());
        }
    };
    let what = (Author::Compaction, "ongoing topic from older messages");
    keep_version(tx, channel, user.as_str(), &file, existing.as_deref(), what, now).await?;
    tx.execute(
        "INSERT INTO mnemo_topics (channel, user_key, slug, document, updated_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (channel, user_key, slug) DO UPDATE SET document = $4, updated_at = $5",
        &[&channel, &user.as_str(), &slug.as_str(), &&*pg_text(&document), &now],
    )
    .await?;
    Ok(())
}

/// A topic note's path under `ltm/`, as the files name it.
fn topic_file(user: &SafeName, slug: &str) -> String {
    format!("topics/{user}/{slug}.md")
}

/// The slug of `file` if it is one of `user`'s topic notes.
fn topic_slug(user: &SafeName, file: &str) -> Option<String> {
    let rest = file
        .strip_prefix("topics/")?
        .strip_prefix(user.as_str())?
        .strip_prefix('/')?;
    let slug = rest.strip_suffix(".md")?;
    topics::parse_slug(slug).ok().map(|s| s.as_str().to_string())
}

pub(crate) fn version_of(row: &tokio_postgres::Row, user: &str) -> Option<Version> {
    let seq: i64 = row.get(0);
    let by: String = row.get(2);
    let Some(by) = parse_name(&by) else {
        tracing::warn!(user = %crate::logged(user), seq, "version row with an unknown author; skipped");
        return None;
    };
    Some(Version {
        seq: u64::try_from(seq).unwrap_or_default(),
        ts: row.get(1),
        by,
        what: row.get(3),
        file: row.get(4),
        before: row.get(5),
        undone: row.get(6),
    })
}
