//! Recall's dense embeddings on Postgres, with the pgvector extension:
//! one vector per stored message in `mnemo_vectors` (keyed like the
//! message, deleted with it), filled in the background after a turn, and
//! the nearest of the user's vectors fused with the full-text ranking the
//! way the file store fuses its dense and BM25 rankings.
//!
//! pgvector is optional. `mnemo store migrate` creates the extension and
//! the table when the server offers the extension ([`ensure`]; run it
//! again after installing pgvector); without them a channel with
//! `recall.embeddings` recalls by full text alone, and the broker says so
//! at start. Vectors of another model than the one configured are not
//! compared: they are computed again and replaced.
//!
//! The search is exact, over the user's own vectors only (the primary
//! key's prefix; cosine distance `<=>`): no approximate index over every
//! user's vectors, which would find other users' neighbours first and
//! filter them out after. Vectors go to the server as pgvector's text
//! form (`[0.1,0.2,…]`), so no client-side type is needed.

use crate::channel::PgChannel;
use crate::{PgError, lock_key, pg_text};
use mnemo_sessions::SafeName;
use mnemo_sessions::recall::{EMBED_BATCH, EmbedPurpose, Embedder, clip_for_embedding, embedding_batch_len};
use std::fmt::Write as _;

/// Messages embedded per request while filling: the file store's bound
/// (its character cap too), so a turn's question and answer, or 128
/// messages of a long history, go in one request.
const BATCH: i64 = EMBED_BATCH as i64;
/// Requests per fill: a long history is embedded over several turns
/// rather than holding one turn's background work for minutes (256
/// messages at most a fill, as with the earlier 8 requests of 32).
const BATCHES_PER_FILL: usize = 2;

const CREATE: &str = "
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS mnemo_vectors (
    channel   text   NOT NULL,
    user_key  text   NOT NULL,
    seq       bigint NOT NULL,
    -- The embedding model's name: another model's vectors are not compared.
    model     text   NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (channel, user_key, seq),
    FOREIGN KEY (channel, user_key, seq) REFERENCES mnemo_messages ON DELETE CASCADE
);";

/// The user's messages that have no vector of `$3`, newest first.
const MISSING: &str = "
SELECT m.seq, m.text FROM mnemo_messages m
LEFT JOIN mnemo_vectors v ON v.channel = m.channel AND v.user_key = m.user_key AND v.seq = m.seq AND v.model = $3
WHERE m.channel = $1 AND m.user_key = $2 AND v.seq IS NULL
ORDER BY m.seq DESC LIMIT $4";

/// Stores vectors for messages still there (a message deleted while it
/// was embedded gets none), replacing another model's.
const STORE: &str = "
INSERT INTO mnemo_vectors (channel, user_key, seq, model, embedding)
SELECT $1, $2, t.seq, $3, t.embedding::vector FROM unnest($4::bigint[], $5::text[]) AS t(seq, embedding)
WHERE EXISTS (SELECT 1 FROM mnemo_messages m WHERE m.channel = $1 AND m.user_key = $2 AND m.seq = t.seq)
ON CONFLICT (channel, user_key, seq) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding";

/// Makes the extension and the table when the server offers pgvector
/// (run by [`crate::migrate::migrate`] under its lock, on its connection);
/// what the database then has. A server without it, or a role that may not
/// create it, leaves full text alone (logged).
pub async fn ensure(conn: &mut deadpool_postgres::Object) -> Result<crate::Vectors, PgError> {
    let now = crate::vectors_on(conn).await?;
    if now != crate::Vectors::Installed && now != crate::Vectors::Available {
        // In use already, or absent.
        return Ok(now);
    }
    let tx = conn.transaction().await?;
    match tx.batch_execute(CREATE).await {
        Ok(()) => tx.commit().await?,
        Err(e) => {
            tracing::warn!(error = %e, "pgvector is available but could not be set up (CREATE EXTENSION needs a superuser, or the database owner for a trusted extension); recall uses full text alone");
            return Ok(now);
        }
    }
    crate::vectors_on(conn).await
}

/// pgvector's text form of `vector`.
pub(crate) fn literal(vector: &[f32]) -> String {
    let mut out = String::with_capacity(vector.len() * 10 + 2);
    out.push('[');
    for (i, x) in vector.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
    out
}

/// Embeds `user`'s messages that lack a vector of the embedder's model,
/// newest first, at most `BATCHES_PER_FILL` (2) requests of up to
/// [`EMBED_BATCH`] messages (and its character cap); one fill per user
/// at a time (another one running: nothing to do here). The number of
/// vectors stored; an embeddings failure is an error (what was stored
/// before it stays, and the next fill goes on from there).
pub async fn fill(channel: &PgChannel, user: &SafeName, embedder: &dyn Embedder) -> Result<usize, PgError> {
    if !channel.vectors_in_use().await {
        return Ok(0);
    }
    let conn = channel.store().conn().await?;
    let key = lock_key("vectors", channel.name(), user.as_str());
    let got: bool = conn.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await?.get(0);
    if !got {
        return Ok(0);
    }
    let result = fill_locked(&conn, channel.name(), user, embedder).await;
    conn.execute("SELECT pg_advisory_unlock($1)", &[&key]).await?;
    result
}

async fn fill_locked(
    conn: &deadpool_postgres::Object,
    channel: &str,
    user: &SafeName,
    embedder: &dyn Embedder,
) -> Result<usize, PgError> {
    let model = pg_text(embedder.model()).into_owned();
    let mut stored = 0;
    for _ in 0..BATCHES_PER_FILL {
        let rows = conn.query(MISSING, &[&channel, &user.as_str(), &model, &BATCH]).await?;
        if rows.is_empty() {
            break;
        }
        let mut texts: Vec<String> = rows
            .iter()
            .map(|r| clip_for_embedding(r.get::<_, &str>(1)).to_string())
            .collect();
        // Within the character cap too; the rest is the next request's.
        texts.truncate(embedding_batch_len(texts.iter().map(String::as_str)));
        let seqs: Vec<i64> = rows.iter().take(texts.len()).map(|r| r.get(0)).collect();
        let vectors = match embedder.embed(&texts, EmbedPurpose::Index).await {
            Ok(v) if v.len() == texts.len() && v.iter().all(|x| !x.is_empty() && x.iter().all(|f| f.is_finite())) => v,
            Ok(v) => {
                return Err(PgError::Embeddings(format!(
                    "{} vectors (or an empty or not finite one) for {} texts",
                    v.len(),
                    texts.len()
                )));
            }
            Err(e) => return Err(PgError::Embeddings(e.to_string())),
        };
        let literals: Vec<String> = vectors.iter().map(|v| literal(v)).collect();
        stored += conn
            .execute(STORE, &[&channel, &user.as_str(), &model, &seqs, &literals])
            .await? as usize;
        if rows.len() < BATCH as usize && seqs.len() == rows.len() {
            break;
        }
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_goes_as_pgvectors_text_form() {
        assert_eq!(literal(&[0.5, -1.0, 0.0]), "[0.5,-1,0]");
        assert_eq!(literal(&[]), "[]");
        assert!(!literal(&[1e-30]).contains('e'), "plain decimals, which pgvector reads");
    }
}
