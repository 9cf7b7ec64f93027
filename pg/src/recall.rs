//! Recall on Postgres: the turn's message as a full-text query over the
//! user's stored messages (`tsvector`, English stems and stop words, the
//! same language rules as the file store's index), scoped to the user in
//! the statement itself ([`crate::PgTurn::recall`]). Two round trips
//! (prepared once per connection):
//! 1. the question's stemmed terms and how many of the user's messages
//!    each matches (counted up to [`RARE`], from the per-user index: the
//!    count weighs the term, so a short history's are counted too), pipelined
//!    with the searches of the user's topic notes, documents and fact log (a few of
//!    each go ahead of the messages, see [`crate::memory`]);
//! 2. one statement: the search by the rare terms ranked by all of them,
//!    each weighted by BM25's inverse document frequency from its count
//!    ([`plan`]; the newest [`RANKED`] matches at most are ranked) and, as
//!    the file store's recall does, a second round widened by the rarest
//!    plain words of the best three hits that are not in the question (the
//!    other half of a fact told in two places), its hits weighted 0.6;
//!    pipelined with the matching pieces of the user's daily and weekly
//!    summaries.
//!
//! With `recall.embeddings` and pgvector, the user's nearest message
//! vectors are fused with this ranking ([`crate::vectors`]); without
//! pgvector full text carries recall alone, and the broker says so at
//! start.

use crate::turn::{PgTurn, role_of};
pub use crate::words::{tsquery, words};
use crate::{PgError, pg_text};
use mnemo_sessions::Record;
use mnemo_sessions::maintenance::digests::Period;
use mnemo_sessions::recall::{Item, Recalled};
use std::sync::Arc;
use tokio_postgres::types::ToSql;

/// The question's stemmed terms, the user's message count (ever stored),
/// and how many of the user's messages each
/// matches, counted up to `$4` (`to_tsvector` stems and drops stop words;
/// each term is then matched as the lexeme it is). In a history shorter
/// than `$4` every term is rare and searched, but its count still weighs it
/// in the ranking.
const TERM_COUNTS: &str = "
SELECT t.lexeme, u.next_seq - 1,
       (SELECT count(*) FROM (
           SELECT 1 FROM mnemo_messages m
           WHERE m.channel = $1 AND m.user_key = $2 AND m.tsv @@ to_tsquery('simple', t.lexeme) LIMIT $4) AS s)
FROM unnest(to_tsvector('english', $3)) AS t
JOIN mnemo_users u ON u.channel = $1 AND u.user_key = $2";

/// Full-text recall over the user's whole history, the recent window `$5`
/// left out (it is in the context already), in one statement:
/// - the first round: the newest `$6` messages matching the search terms
///   `$3`, ranked by the `ts_rank` of each of the question's terms `$4`
///   times its weight `$12` (BM25's IDF in the user's history: as the
///   files' index ranks, a rare word's hit before a newer one of a common
///   word, so it is among the best hits the second round starts from),
///   newest first among equals, at most `$7`, a message said again (the same
///   words: the same `tsvector`) once, its newest, so repeats take
///   neither candidate places nor the best hits the second round starts
///   from;
/// - the second round, for the other half of a fact told in two places
///   ("my sister is Ana" … "Ana moved to Lisbon"): the words of the first
///   round's best `$8` hits that are not in the question `$9` (lexemes) —
///   plain words only, so nothing reaches the query parser but letters and
///   digits — each counted in the user's messages; of those that match
///   more than the hit itself and at most `$10` (the files' IDF floor as a
///   count, `recall::widening_df_limit`; below 2 no round), `$11` find the
///   messages they match, ranked by them as the first round's by its terms
///   (each word's IDF among the `$13` messages of the history), the first
///   round's left out, at most `$7`: names first (a word written with a
///   capital inside a sentence: "I met Sam at …", as the files' second
///   round prefers), then the rarest.
///
/// The last column says which round a row is from.
const RECALL: &str = "
WITH weights AS (
    SELECT to_tsquery('simple', w.lexeme) AS q, w.idf FROM unnest($4::text[], $12::real[]) AS w(lexeme, idf)),
first AS (
    SELECT * FROM (
        SELECT DISTINCT ON (c.tsv) c.ts, c.role, c.text,
            (SELECT sum(w.idf * ts_rank(c.tsv, w.q)) FROM weights w)::real AS r, c.seq, c.tsv FROM (
            SELECT ts, role, text, seq, tsv FROM mnemo_messages
            WHERE channel = $1 AND user_key = $2 AND tsv @@ to_tsquery('simple', $3) AND msg_id <> ALL($5)
            ORDER BY seq DESC LIMIT $6) AS c
        ORDER BY c.tsv, c.seq DESC) AS d
    ORDER BY r DESC, seq DESC LIMIT $7),
best AS (SELECT tsv, text FROM first ORDER BY r DESC, seq DESC LIMIT $8),
names AS (
    SELECT DISTINCT x.lexeme FROM best,
        regexp_matches(best.text, '[^.!?[:space:]][[:space:]]+([[:upper:]][[:alnum:]]+)', 'g') AS m,
        unnest(to_tsvector('english', m[1])) AS x),
terms AS (
    SELECT DISTINCT t.lexeme, t.lexeme IN (SELECT lexeme FROM names) AS named FROM best, unnest(best.tsv) AS t
    WHERE $10::bigint >= 2 AND t.lexeme <> ALL($9) AND length(t.lexeme) >= 3 AND t.lexeme ~ '^[[:alnum:]]+$'),
counted AS (
    SELECT w.lexeme, w.named, (SELECT count(*) FROM (
        SELECT 1 FROM mnemo_messages x
        WHERE x.channel = $1 AND x.user_key = $2 AND x.tsv @@ to_tsquery('simple', w.lexeme)
        LIMIT $10::bigint + 1) AS s) AS n
    FROM terms w),
picked AS (
    SELECT to_tsquery('simple', lexeme) AS q, ln(1 + ($13::float8 - n + 0.5) / (n::float8 + 0.5)) AS idf, lexeme FROM counted
    WHERE n > 1 AND n <= $10::bigint
    ORDER BY named DESC, n, lexeme LIMIT $11),
wider AS (SELECT to_tsquery('simple', string_agg(lexeme, ' | ')) AS q FROM picked),
widened AS (
    SELECT m.ts, m.role, m.text, (SELECT sum(p.idf * ts_rank(m.tsv, p.q)) FROM picked p)::real AS r, m.seq
    FROM mnemo_messages m, wider
    WHERE wider.q IS NOT NULL AND m.channel = $1 AND m.user_key = $2 AND m.tsv @@ wider.q
      AND m.msg_id <> ALL($5) AND m.seq NOT IN (SELECT seq FROM first)
    ORDER BY r DESC, m.seq DESC LIMIT $7)
SELECT ts, role, text, r, seq, false FROM first
UNION ALL
SELECT ts, role, text, r, seq, true FROM widened";

/// The pieces of the user's daily and weekly summaries that match the
/// search terms `$3`, ranked by the question's terms `$4` and their
/// weights `$6` as the messages are: a digest is cut into paragraphs and
/// list items (the file store's recall pieces), and only matching pieces
/// are returned, at most `$5`.
const RECALL_DIGESTS: &str = "
WITH weights AS (
    SELECT to_tsquery('simple', w.lexeme) AS q, w.idf FROM unnest($4::text[], $6::real[]) AS w(lexeme, idf))
SELECT d.kind, d.period, p.piece, (SELECT sum(w.idf * ts_rank(v.tsv, w.q)) FROM weights w)::real AS r
FROM mnemo_digests d,
     LATERAL regexp_split_to_table(d.body, '\\n\\s*\\n|\\n(?=[-*#] )') AS p(piece),
     LATERAL to_tsvector('english', p.piece) AS v(tsv)
WHERE d.channel = $1 AND d.user_key = $2 AND d.tsv @@ to_tsquery('simple', $3)
  AND v.tsv @@ to_tsquery('simple', $3)
ORDER BY r DESC, d.period DESC LIMIT $5";

/// First hits whose words widen the second round, words added, and the
/// weight of its hits against the first round's (the file store's 0.6).
const WIDEN_FROM: i64 = 3;
const WIDEN_TERMS: i64 = 6;
const WIDER_WEIGHT: f32 = 0.6;

/// The user's messages nearest to the question's vector `$4` (pgvector's
/// text form) among the vectors of model `$3`, the recent window `$5`
/// left out: cosine distance, at most `$6`, over the user's own vectors
/// only (see `crate::vectors`).
const NEAREST: &str = "
SELECT m.ts, m.role, m.text, v.embedding <=> $4::text::vector AS d
FROM mnemo_vectors v
JOIN mnemo_messages m ON m.channel = v.channel AND m.user_key = v.user_key AND m.seq = v.seq
WHERE v.channel = $1 AND v.user_key = $2 AND v.model = $3 AND m.msg_id <> ALL($5)
ORDER BY d LIMIT $6";

/// Digest pieces a recall looks at beside the messages.
const RECALL_DIGEST_PIECES: i64 = 8;

/// Candidates a recall looks at before packing them under the budget.
const RECALL_CANDIDATES: i64 = 48;
/// Topic notes a turn's recall offers at most (matching any word of the
/// message, best first), ahead of the messages.
const RECALLED_NOTES: usize = 3;
/// Fact-log entries a turn's recall offers at most (earlier or dropped
/// values, newest first), after the notes.
const RECALLED_FACTS: usize = 3;

impl PgTurn {
    /// What the user said before that matches `message`, outside `recent`,
    /// the user's topic notes that match (at most `RECALLED_NOTES` (3)) and
    /// the fact log's earlier values that do (at most `RECALLED_FACTS` (3)),
    /// packed under `max_tokens` (the file store's budget rule and labels):
    /// the full-text ranking, fused by reciprocal rank with the user's
    /// nearest vectors when `vector` (the embedding model's name and the
    /// question's vector) is given and pgvector is in use. A failed vector
    /// search is logged and recall goes on with full text alone.
    pub async fn recall(
        &mut self,
        message: &str,
        recent: &[Arc<Record>],
        max_tokens: usize,
        vector: Option<(&str, &[f32])>,
    ) -> Result<Recalled, PgError> {
        let skip: Vec<String> = recent.iter().map(|r| pg_text(&r.msg_id).into_owned()).collect();
        let lexical = self.full_text(message, &skip).await?;
        let dense = match vector {
            Some((model, vector)) if self.channel().vectors_in_use().await => {
                match self.nearest(model, vector, &skip).await {
                    Ok(hits) => hits,
                    Err(e) => {
                        tracing::warn!(user = %self.user().log_id(), error = %e, "vector recall failed; full text alone this turn");
                        Vec::new()
                    }
                }
            }
            _ => Vec::new(),
        };
        let items = if dense.is_empty() {
            lexical
        } else {
            mnemo_sessions::recall::fuse_by_rank(&lexical, &dense)
                .into_iter()
                .map(|(item, _)| item)
                .collect()
        };
        Ok(mnemo_sessions::recall::pack(items, max_tokens))
    }

    /// The full-text ranking (best first): the user's matching topic notes,
    /// document pieces and fact-log entries (a few each, ahead), then the messages matching
    /// the question, the second round's, and the matching pieces of their
    /// daily and weekly summaries.
    async fn full_text(&mut self, message: &str, skip: &[String]) -> Result<Vec<Item>, PgError> {
        let words = crate::recall::words(message);
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.client();
        let (channel, user) = (self.channel().name(), self.user().as_str());
        let (counting, recall, digests, notes, facts, documents) = futures_util::try_join!(
            conn.prepare_cached(TERM_COUNTS),
            conn.prepare_cached(RECALL),
            conn.prepare_cached(RECALL_DIGESTS),
            conn.prepare_cached(crate::memory::NOTES_MATCHING),
            conn.prepare_cached(crate::memory::FACTS_MATCHING),
            conn.prepare_cached(crate::documents::PIECES_MATCHING)
        )?;
        // The term counts, and the user's topic notes and fact-log entries
        // that match (a few of each go ahead of the messages), in one
        // round trip.
        // The same words as `recall::tsquery` makes of the message.
        let query = words.join(" | ");
        let joined = words.join(" ");
        let note_limit = RECALLED_NOTES as i64;
        let count_params: [&(dyn ToSql + Sync); 4] = [&channel, &user, &joined, &crate::recall::RARE];
        let note_params: [&(dyn ToSql + Sync); 4] = [&channel, &user, &query, &note_limit];
        let fact_params: [&(dyn ToSql + Sync); 3] = [&channel, &user, &query];
        let piece_limit = crate::documents::RECALLED_PIECES as i64;
        let piece_params: [&(dyn ToSql + Sync); 4] = [&channel, &user, &query, &piece_limit];
        let (rows, note_rows, fact_rows, piece_rows) = futures_util::try_join!(
            conn.query(&counting, &count_params),
            conn.query(&notes, &note_params),
            conn.query(&facts, &fact_params),
            conn.query(&documents, &piece_params),
        )?;
        let matched: Vec<i64> = fact_rows.iter().map(|row| row.get(0)).collect();
        let mut notes = crate::memory::note_items(&note_rows);
        notes.extend(crate::documents::piece_items(&piece_rows));
        notes.extend(crate::memory::fact_hits(&***conn, channel, user, &matched, RECALLED_FACTS).await?);
        let mut counts: Vec<(String, i64)> = rows.iter().map(|row| (row.get(0), row.get(2))).collect();
        let history = rows.first().map_or(0, |row| row.get::<_, i64>(1));
        if history < crate::recall::RARE {
            // No term of a history this short is common: each is searched
            // (a summary may hold a word no message has), weighed by its
            // count, at least 1.
            counts.iter_mut().for_each(|(_, n)| *n = (*n).max(1));
        }
        let Some((search, rank)) = crate::recall::plan(&counts) else {
            return Ok(notes);
        };
        let docs = usize::try_from(history).unwrap_or(0);
        let widening = mnemo_sessions::recall::widening_df_limit(docs) as i64;
        let question: Vec<&str> = counts.iter().map(|(t, _)| t.as_str()).collect();
        let weights = weights(&counts, &rank, docs);
        let history = docs as f64;
        let message_params: [&(dyn ToSql + Sync); 13] = [
            &channel,
            &user,
            &search,
            &rank,
            &skip,
            &crate::recall::RANKED,
            &RECALL_CANDIDATES,
            &WIDEN_FROM,
            &question,
            &widening,
            &WIDEN_TERMS,
            &weights,
            &history,
        ];
        let digest_params: [&(dyn ToSql + Sync); 6] =
            [&channel, &user, &search, &rank, &RECALL_DIGEST_PIECES, &weights];
        let (messages, pieces) = futures_util::try_join!(
            conn.query(&recall, &message_params),
            conn.query(&digests, &digest_params),
        )?;
        let ranked = ranked(&messages, &pieces);
        // Notes first: a few distilled lines, before the messages' ranks.
        notes.extend(ranked.into_iter().map(|(_, item)| item));
        Ok(notes)
    }

    /// The user's messages nearest to `vector` among those embedded by
    /// `model` (cosine), cut as the file store cuts its dense hits.
    async fn nearest(&mut self, model: &str, vector: &[f32], skip: &[String]) -> Result<Vec<Item>, PgError> {
        let conn = self.client();
        let (channel, user) = (self.channel().name(), self.user().as_str());
        let literal = crate::vectors::literal(vector);
        let limit = mnemo_sessions::recall::DENSE_CANDIDATES as i64;
        let rows = conn
            .query(NEAREST, &[&channel, &user, &model, &literal, &skip, &limit])
            .await?;
        let hits = rows
            .iter()
            .map(|row| {
                let distance: f64 = row.get(3);
                let role = role_of(row.get(1));
                ((1.0 - distance) as f32, Item::message(row.get(0), role, row.get(2)))
            })
            .collect();
        Ok(mnemo_sessions::recall::strong_dense(hits))
    }
}

/// A query term narrows the search only if it matches fewer of the user's
/// messages than this (counted up to it): the database's stand-in for
/// BM25's inverse document frequency, so "build" in half of a long history
/// does not make every turn rank that half.
pub const RARE: i64 = 500;

/// At most this many matches are ranked, the newest first, when every
/// term of the question is common.
pub const RANKED: i64 = 2_000;

/// Messages (`RECALL`'s rows) and summary pieces (`RECALL_DIGESTS`'s) by
/// one rank (the same weighted `ts_rank` of the same terms), best first;
/// the second round's hits at a lower weight. Each round's hits weaker
/// than a share of its best are noise, as the files cut each query's
/// (`recall::MIN_SHARE`).
fn ranked(messages: &[tokio_postgres::Row], pieces: &[tokio_postgres::Row]) -> Vec<(f32, Item)> {
    let best = |wider: bool| {
        let of_round = messages.iter().filter(|row| row.get::<_, bool>(5) == wider);
        of_round.map(|row| row.get::<_, f32>(3)).fold(0.0, f32::max)
    };
    let floors = [best(false), best(true)].map(|b| b * mnemo_sessions::recall::MIN_SHARE);
    let mut ranked: Vec<(f32, Item)> = messages
        .iter()
        .filter(|row| row.get::<_, f32>(3) >= floors[usize::from(row.get::<_, bool>(5))])
        .map(|row| {
            let role = role_of(row.get(1));
            let weight = if row.get::<_, bool>(5) { WIDER_WEIGHT } else { 1.0 };
            (
                weight * row.get::<_, f32>(3),
                Item::message(row.get(0), role, row.get(2)),
            )
        })
        .collect();
    ranked.extend(pieces.iter().filter_map(|row| {
        let (kind, period): (&str, &str) = (row.get(0), row.get(1));
        let at = Period::parse(kind, period)?.noon()?;
        Some((row.get(3), Item::summary(at, period, row.get::<_, &str>(2).trim())))
    }));
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked
}

/// The weight of each of `rank`'s terms: BM25's inverse document
/// frequency of its count (up to [`RARE`]) among the `docs` messages of
/// the user's history, as the files' index weighs it.
fn weights(counts: &[(String, i64)], rank: &[&str], docs: usize) -> Vec<f32> {
    rank.iter()
        .map(|term| {
            let n = counts.iter().find(|(t, _)| t == term).map_or(0, |(_, n)| *n);
            mnemo_sessions::recall::idf(docs, usize::try_from(n).unwrap_or(0))
        })
        .collect()
}

/// The terms to search (a `to_tsquery` text) and to rank by, from each
/// stemmed term of the question and how many of the user's messages it
/// matches (up to [`RARE`]): search by the rare ones (all, when none is
/// rare), rank by all that match anything. `None` when no term matches
/// anything.
pub fn plan(counts: &[(String, i64)]) -> Option<(String, Vec<&str>)> {
    let matched: Vec<&str> = counts.iter().filter(|(_, n)| *n > 0).map(|(t, _)| t.as_str()).collect();
    if matched.is_empty() {
        return None;
    }
    let rare: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| *n > 0 && *n < RARE)
        .map(|(t, _)| t.as_str())
        .collect();
    let search = if rare.is_empty() { &matched } else { &rare };
    Some((search.join(" | "), matched))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::words::{MAX_TERM_CHARS, MAX_TERMS};

    #[test]
    fn rare_terms_narrow_the_search_and_all_matching_terms_rank() {
        let counts = |v: &[(&str, i64)]| v.iter().map(|(t, n)| (t.to_string(), *n)).collect::<Vec<_>>();
        let some = counts(&[("build", RARE), ("dentist", 3), ("zebra", 0)]);
        assert_eq!(plan(&some), Some(("dentist".into(), vec!["build", "dentist"])));
        let common = counts(&[("build", RARE), ("step", RARE)]);
        let planned = plan(&common);
        assert_eq!(
            planned,
            Some(("build | step".into(), vec!["build", "step"])),
            "all common: all search"
        );
        assert_eq!(plan(&counts(&[("zebra", 0)])), None);
        assert_eq!(plan(&[]), None);
    }

    #[test]
    fn a_rank_term_weighs_by_its_rarity_as_in_the_files_index() {
        let counts: Vec<(String, i64)> = [("old", 9), ("brother", 1), ("zebra", 0)]
            .iter()
            .map(|(t, n)| (t.to_string(), *n))
            .collect();
        let (_, rank) = plan(&counts).unwrap();
        let w = weights(&counts, &rank, 80);
        assert_eq!(rank, ["old", "brother"]);
        assert!(w[1] > w[0] && w[0] > 0.0, "{w:?}");
        assert_eq!(w[0], mnemo_sessions::recall::idf(80, 9));
    }

    #[test]
    fn a_query_is_its_distinct_words_or_ed() {
        assert_eq!(
            tsquery("Where is Dr. Okafor's office?").as_deref(),
            Some("where | is | dr | okafor | s | office")
        );
        assert_eq!(tsquery("a A a").as_deref(), Some("a"));
        assert_eq!(tsquery("?! -- ...").as_deref(), None);
    }

    #[test]
    fn query_syntax_in_a_message_is_only_words() {
        let q = tsquery("x' & !y | (z:*) <-> 'w'\0").unwrap();
        assert!(q.chars().all(|c| c.is_alphanumeric() || c == ' ' || c == '|'), "{q}");
        assert_eq!(q, "x | y | z | w");
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        let long = "b".repeat(10_000);
        assert_eq!(tsquery(&long).unwrap().chars().count(), MAX_TERM_CHARS);
        let many: String = (0..1000).map(|i| format!("w{i} ")).collect();
        assert_eq!(tsquery(&many).unwrap().split(" | ").count(), MAX_TERMS);
    }
}
