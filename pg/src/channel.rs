//! One channel's users on the Postgres store: turns, folds and the
//! `/session` commands answered from the database (all but `export`,
//! which the broker bundles), with the file store's replies
//! (`mnemo_sessions::commands::memory` for remember, forget, history,
//! undo; their edits in [`crate::memory`]).

use crate::memory::{EditBy, MemoryError};
use crate::turn::PgTurn;
use crate::{PgError, PgStore};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use mnemo_sessions::commands::{HELP, STORAGE_PROBLEM, SessionCommand, memory};
use mnemo_sessions::config::SessionConfig;
use mnemo_sessions::edits::EditError;
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::summarizer::Summarizer;
use mnemo_sessions::versions::Author;
use mnemo_sessions::{Record, SafeName};
use std::sync::Arc;

/// One channel's memory in the database. Cheap to clone.
#[derive(Clone)]
pub struct PgChannel {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: PgStore,
    name: String,
    config: SessionConfig,
    summarizer: Arc<dyn Summarizer>,
    /// Where local days begin and end for daily summaries.
    tz: Tz,
    /// Whether pgvector carries embeddings here, known after the first
    /// successful look (a migration that sets it up later takes a restart).
    vectors: Arc<tokio::sync::OnceCell<bool>>,
}

/// Said for a `/session` command this type does not answer itself:
/// `export` is the broker's (it bundles files), so this is said only to a
/// caller that asks here anyway.
pub const NOT_ON_POSTGRES: &str = "That /session command is not available on this bot's database storage yet. \
     /session status, clear, clear all, profile, search, remember, forget, history, undo and export are.";

impl PgChannel {
    pub fn new(store: PgStore, name: &str, config: SessionConfig, summarizer: Arc<dyn Summarizer>) -> PgChannel {
        PgChannel {
            inner: Arc::new(Inner {
                store,
                name: name.to_string(),
                config,
                summarizer,
                tz: Tz::UTC,
                vectors: Arc::default(),
            }),
        }
    }

    /// Cuts daily summaries at midnight in `tz` (the app's `timezone`;
    /// UTC until set).
    pub fn with_tz(mut self, tz: Tz) -> PgChannel {
        Arc::make_mut(&mut self.inner).tz = tz;
        self
    }

    pub fn tz(&self) -> Tz {
        self.inner.tz
    }

    /// Whether recall's embeddings are stored and searched here (pgvector
    /// set up by `mnemo store migrate`). A failed look counts as no, and
    /// is tried again next time.
    pub async fn vectors_in_use(&self) -> bool {
        let looked = self
            .inner
            .vectors
            .get_or_try_init(|| async { self.store().vectors().await.map(|v| v == crate::Vectors::InUse) })
            .await;
        looked.copied().unwrap_or(false)
    }

    pub fn store(&self) -> &PgStore {
        &self.inner.store
    }

    /// The channel's name, as the rows are keyed.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn config(&self) -> &SessionConfig {
        &self.inner.config
    }

    pub(crate) fn summarizer(&self) -> &Arc<dyn Summarizer> {
        &self.inner.summarizer
    }

    /// Starts `user`'s turn: waits for the user's lock (held by another
    /// turn of theirs, on any broker) and keeps it until the turn is dropped.
    pub async fn begin_turn(&self, user: &SafeName) -> Result<PgTurn, PgError> {
        PgTurn::begin(self, user).await
    }

    /// Stores a message as it arrives (intake), without the user's turn
    /// lock (see [`crate::turn::append_on`]), on the intake pool's
    /// connections. A repeat (`duplicate`) adds nothing.
    pub async fn intake(
        &self,
        user: &SafeName,
        record: &Record,
        now: DateTime<Utc>,
    ) -> Result<crate::turn::PgAppended, PgError> {
        let conn = self.store().intake_conn().await?;
        crate::turn::append_on(&conn, self, user, record, now).await
    }

    /// Folds `user`'s older messages if the rules say so ([`crate::fold`]).
    pub async fn compact(&self, user: &SafeName, now: DateTime<Utc>) -> Result<crate::fold::PgFold, PgError> {
        crate::fold::compact(self, user, now).await
    }

    /// Answers a `/session` command for the user of `turn` from the
    /// database, on the turn's connection: inside the user's lock, and
    /// without a second connection (a flood of commands cannot exhaust the
    /// pool waiting for one).
    pub async fn command(
        &self,
        turn: &mut PgTurn,
        command: &SessionCommand,
        now: DateTime<Utc>,
    ) -> Result<String, PgError> {
        let user = turn.user().clone();
        let (channel, key) = (self.name(), user.as_str());
        let conn = turn.conn();
        Ok(match command {
            SessionCommand::Status => {
                let row = conn
                    .query_opt(
                        "SELECT count(*) FILTER (WHERE m.fold IS NULL), count(m.seq), u.summary_at,
                                length(coalesce(u.profile, '')),
                                (SELECT count(*) FROM mnemo_topics t
                                 WHERE t.channel = $1 AND t.user_key = $2)
                         FROM mnemo_users u LEFT JOIN mnemo_messages m USING (channel, user_key)
                         WHERE u.channel = $1 AND u.user_key = $2 GROUP BY u.summary_at, u.profile",
                        &[&channel, &key],
                    )
                    .await?;
                let Some(row) = row else {
                    return Ok("Your memory here: nothing stored yet.".into());
                };
                let (short, all): (i64, i64) = (row.get(0), row.get(1));
                let summary: Option<DateTime<Utc>> = row.get(2);
                let profile: i32 = row.get(3);
                let notes: i64 = row.get(4);
                let summary = summary.map_or("no rolling summary yet".to_string(), |at| {
                    format!("rolling summary updated {}", mnemo_sessions::commands::ago(now - at))
                });
                format!(
                    "Your memory here:\n\
                     • {short} message{} in short-term memory, {} archived\n\
                     • {summary}\n\
                     • profile: {profile} characters, {notes} topic note{}",
                    plural(short),
                    all - short,
                    plural(notes)
                )
            }
            SessionCommand::Clear => {
                let tx = conn.transaction().await?;
                let n = tx
                    .execute(
                        "DELETE FROM mnemo_messages WHERE channel = $1 AND user_key = $2 AND fold IS NULL",
                        &[&channel, &key],
                    )
                    .await?;
                let summary = tx
                    .execute(
                        "UPDATE mnemo_users SET summary = NULL, summary_at = NULL
                         WHERE channel = $1 AND user_key = $2 AND summary IS NOT NULL",
                        &[&channel, &key],
                    )
                    .await?;
                tx.commit().await?;
                if n + summary == 0 {
                    "There was nothing in your short-term memory. Your long-term notes are kept.".to_string()
                } else {
                    format!(
                        "Cleared our recent conversation ({n} message{}) and its summary. Your long-term profile is kept.",
                        plural(i64::try_from(n).unwrap_or(i64::MAX))
                    )
                }
            }
            SessionCommand::ClearAll => {
                let n: i64 = conn
                    .query_one(
                        "SELECT count(*) FROM mnemo_messages WHERE channel = $1 AND user_key = $2",
                        &[&channel, &key],
                    )
                    .await?
                    .get(0);
                format!(
                    "This would delete everything I store about you here: {n} message{} (short-term and archived), \
                     the summary, your profile with its history and your topic notes. It cannot be undone. \
                     To do it, send `/session clear all confirm`.",
                    plural(n)
                )
            }
            SessionCommand::ClearAllConfirmed => {
                let n = conn
                    .execute(
                        "DELETE FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                        &[&channel, &key],
                    )
                    .await?;
                if n == 0 {
                    "I had nothing stored about you.".to_string()
                } else {
                    "Deleted everything I stored about you here: messages, summary, profile, topic notes and archive. \
                     This cannot be undone."
                        .to_string()
                }
            }
            SessionCommand::Profile => {
                let profile: Option<String> = conn
                    .query_opt(
                        "SELECT profile FROM mnemo_users WHERE channel = $1 AND user_key = $2",
                        &[&channel, &key],
                    )
                    .await?
                    .and_then(|row| row.get(0));
                let mut text = match profile.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()) {
                    Some(body) => format!("What I remember about you:\n\n{body}"),
                    None => "I have no long-term profile for you yet.".to_string(),
                };
                let topics = turn.topic_slugs().await?;
                if !topics.is_empty() {
                    text.push_str(&format!("\n\nYour topic notes: {}", topics.join(", ")));
                }
                text
            }
            SessionCommand::Search { words } => {
                let Some(found) = turn.search_messages(words, 10).await? else {
                    return Ok("Give me a word to look for: /session search <words>".into());
                };
                if found.is_empty() {
                    "I found nothing with those words in your memory.".to_string()
                } else {
                    let lines: Vec<String> = found.iter().map(|item| item.line()).collect();
                    format!("What I found in your memory:\n{}", lines.join("\n"))
                }
            }
            SessionCommand::Remember { text } => {
                let who = self.edit_by(Author::Command, now);
                replied(
                    turn.remember(who, FactSection::Notes, text)
                        .await
                        .map(|key| memory::remembered(&key)),
                )?
            }
            SessionCommand::Forget { topic } => self.forget(turn, topic, now).await?,
            SessionCommand::ForgetConfirmed { words } => {
                let who = self.edit_by(Author::Command, now);
                let keys: Vec<String> = turn.matching(words).await?.into_iter().map(|f| f.key).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                replied(turn.forget_facts(who, &keys).await.map(memory::forgot_confirmed))?
            }
            SessionCommand::History { topic } => memory::history_text(turn.history().await?, topic.as_deref()),
            SessionCommand::Undo => memory::undone(turn.undo(Author::Command, now).await?.as_ref()),
            SessionCommand::Help => HELP.to_string(),
            SessionCommand::Unknown { .. } => format!("I don't know that /session command.\n\n{HELP}"),
            SessionCommand::Export => NOT_ON_POSTGRES.to_string(),
        })
    }

    fn edit_by(&self, by: Author, now: DateTime<Utc>) -> EditBy {
        EditBy {
            by,
            max_chars: self.config().ltm.max_profile_chars,
            now,
        }
    }

    /// `/session forget <what>`: by exact key or topic name at once
    /// (undoable); otherwise the facts holding all the words are listed
    /// and nothing goes until `/session forget confirm <words>`.
    async fn forget(&self, turn: &mut PgTurn, what: &str, now: DateTime<Utc>) -> Result<String, PgError> {
        match turn.forget(self.edit_by(Author::Command, now), what).await {
            Ok(forgotten) => return Ok(memory::forgot(&forgotten)),
            Err(MemoryError::Edit(EditError::NotFound | EditError::Invalid(_))) => {}
            Err(e) => return replied(Err(e)),
        }
        let matches = turn.matching(what).await?;
        let topics = if matches.is_empty() {
            turn.topic_slugs().await?
        } else {
            Vec::new()
        };
        Ok(memory::forget_preview(&matches, what, &topics))
    }
}

/// The reply to an edit: its own, or the file store's words for an
/// argument refused; a database failure is the caller's error.
fn replied(result: Result<String, MemoryError>) -> Result<String, PgError> {
    match result {
        Ok(reply) => Ok(reply),
        Err(MemoryError::Edit(EditError::Invalid(reason))) => Ok(memory::invalid(reason)),
        Err(MemoryError::Edit(EditError::NotFound)) => Ok(memory::NOT_FOUND.to_string()),
        Err(MemoryError::Edit(e)) => {
            // File errors: not raised by the database's edits.
            tracing::warn!(error = %e, "memory edit failed");
            Ok(STORAGE_PROBLEM.to_string())
        }
        Err(MemoryError::Db(e)) => Err(e),
    }
}

fn plural(n: i64) -> &'static str {
    if n == 1 { "" } else { "s" }
}
