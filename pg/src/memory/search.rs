//! Search on Postgres: what `memory_search`, `/session search` and a
//! turn's recall find of a user's long-term memory — the profile's
//! facts, topic notes (the user's and the channel's shared ones), the
//! fact log's earlier values and the messages — by full text, with the
//! file store's labels. Reads only; every statement is scoped by channel
//! and user (shared notes by channel).

use super::log::Log;
use crate::PgError;
use crate::turn::PgTurn;
use chrono::{DateTime, Utc};
use mnemo_sessions::recall::{Item, fact_items};
use mnemo_sessions::{frontmatter, topics};

/// The ids of the user's fact-log entries whose key or value holds any
/// word of the query `$3` (a [`crate::words::tsquery`]).
pub(crate) const FACTS_MATCHING: &str = "SELECT id FROM mnemo_facts, to_tsquery('english', $3) AS q
 WHERE channel = $1 AND user_key = $2 AND to_tsvector('english', key || ' ' || value) @@ q";

/// The user's topic notes, then the operator's shared ones, holding any
/// word of the query `$3`, ranked together, at most `$4`.
pub(crate) const NOTES_MATCHING: &str = "SELECT slug, document, updated_at, shared FROM (
     SELECT slug, document, updated_at, false AS shared FROM mnemo_topics
     WHERE channel = $1 AND user_key = $2
     UNION ALL
     SELECT slug, document, updated_at, true FROM mnemo_shared_topics WHERE channel = $1
 ) AS notes, to_tsquery('english', $3) AS q
 WHERE to_tsvector('english', document) @@ q
 ORDER BY ts_rank(to_tsvector('english', document), q) DESC, shared, slug LIMIT $4";

/// The rows of [`NOTES_MATCHING`] as recall items.
pub(crate) fn note_items(rows: &[tokio_postgres::Row]) -> Vec<Item> {
    rows.iter()
        .map(|row| {
            let (slug, document, shared): (String, String, bool) = (row.get(0), row.get(1), row.get(3));
            let body = note_body(&document);
            if shared {
                Item::shared_note(row.get(2), &slug, &body)
            } else {
                Item::note(row.get(2), &slug, &body)
            }
        })
        .collect()
}

/// What the fact log adds about the `matched` entries (ids from
/// [`FACTS_MATCHING`]), newest first, at most `limit`: read only when
/// something matched, which is rare, so the common turn pays one pipelined
/// statement. The turn's lock keeps the user's edits out meanwhile.
pub(crate) async fn fact_hits(
    client: &impl tokio_postgres::GenericClient,
    channel: &str,
    user: &str,
    matched: &[i64],
    limit: usize,
) -> Result<Vec<Item>, PgError> {
    if matched.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let log = Log::read(client, channel, user).await?;
    let mut items: Vec<Item> = fact_items(&log.entries())
        .into_iter()
        .filter(|(i, _)| log.rows.get(*i).is_some_and(|(id, _)| matched.contains(id)))
        .map(|(_, item)| item)
        .collect();
    items.reverse();
    items.truncate(limit);
    Ok(items)
}

impl PgTurn {
    /// The user's messages (short-term and archived) holding any of the
    /// words, best first, at most `limit`; `None` when `words` has no word
    /// to look for.
    pub async fn search_messages(&mut self, words: &str, limit: i64) -> Result<Option<Vec<Item>>, PgError> {
        let Some(query) = crate::words::tsquery(words) else {
            return Ok(None);
        };
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let rows = self
            .conn()
            .query(
                "SELECT ts, role, text FROM mnemo_messages, to_tsquery('english', $3) AS q
                 WHERE channel = $1 AND user_key = $2 AND tsv @@ q
                 ORDER BY ts_rank(tsv, q) DESC, seq DESC LIMIT $4",
                &[&channel, &user, &query, &limit],
            )
            .await?;
        Ok(Some(
            rows.iter()
                .map(|row| Item::message(row.get(0), crate::turn::role_of(row.get(1)), row.get(2)))
                .collect(),
        ))
    }

    /// `memory_search` on the database: the profile's facts holding every
    /// word (`[profile] key: value`, so the model has the key to update or
    /// forget), then the topic notes, the documents' pieces, the fact log's earlier values and the
    /// messages holding any, at most `limit` in all.
    pub async fn search(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, PgError> {
        let mut found: Vec<Item> = self
            .matching(words)
            .await?
            .into_iter()
            .map(|f| Item {
                at: DateTime::<Utc>::UNIX_EPOCH,
                label: "[profile]".to_string(),
                text: format!("{}: {}", f.key, f.value),
            })
            .take(limit)
            .collect();
        let rest = limit.saturating_sub(found.len());
        found.extend(self.search_notes(words, rest).await?);
        let rest = limit.saturating_sub(found.len());
        found.extend(self.search_documents(words, rest).await?);
        let rest = limit.saturating_sub(found.len());
        found.extend(self.search_facts(words, rest).await?);
        let rest = i64::try_from(limit.saturating_sub(found.len())).unwrap_or(0);
        if rest > 0 {
            found.extend(self.search_messages(words, rest).await?.unwrap_or_default());
        }
        Ok(found)
    }

    /// What the fact log adds to the profile for the words: earlier values
    /// of facts (`[day, fact; until …]`), values a change replaced
    /// (`[day, fact; was: …]`) and facts the cap dropped from the profile —
    /// the file store's labels (`recall::fact_items`) — for entries holding
    /// any of the words, newest first, at most `limit`.
    pub async fn search_facts(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, PgError> {
        let Some(query) = crate::words::tsquery(words) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (channel, user) = (self.channel_name().to_string(), self.user().as_str().to_string());
        let conn = self.conn();
        let statement = conn.prepare_cached(FACTS_MATCHING).await?;
        let matched: Vec<i64> = conn
            .query(&statement, &[&channel, &user, &query])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        fact_hits(&***conn, &channel, &user, &matched, limit).await
    }

    /// The user's topic notes and the channel's shared notes holding any of
    /// the words, best first, at most `limit` (`[note: slug] body`,
    /// `[shared note: slug] body`).
    pub async fn search_notes(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, PgError> {
        Ok(note_items(&self.best_matching(NOTES_MATCHING, words, limit).await?))
    }

    /// The pieces of the user's documents holding any of the words, best
    /// first, at most `limit` (`[document name, p. 3, sent day] text`).
    pub async fn search_documents(&mut self, words: &str, limit: usize) -> Result<Vec<Item>, PgError> {
        let rows = self
            .best_matching(crate::documents::PIECES_MATCHING, words, limit)
            .await?;
        Ok(crate::documents::piece_items(&rows))
    }

    /// The rows of `statement` (its parameters: channel, user, a
    /// [`crate::words::tsquery`] of `words`, at most `limit`); none when
    /// `words` has no word to look for or `limit` is 0.
    async fn best_matching(
        &mut self,
        statement: &str,
        words: &str,
        limit: usize,
    ) -> Result<Vec<tokio_postgres::Row>, PgError> {
        let Some(query) = crate::words::tsquery(words) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (channel, user) = self.keys();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = self.conn();
        let statement = conn.prepare_cached(statement).await?;
        Ok(conn.query(&statement, &[&channel, &user, &query, &limit]).await?)
    }
}

/// A note's body: the document after its frontmatter (the whole text if
/// that does not parse).
fn note_body(document: &str) -> String {
    match frontmatter::parse::<topics::TopicMeta>(std::path::Path::new("topic note"), document) {
        Ok(note) => note.body.trim().to_string(),
        Err(_) => document.trim().to_string(),
    }
}
