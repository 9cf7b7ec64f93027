//! Documents and kept files on Postgres ([`mnemo_sessions::documents`],
//! [`mnemo_sessions::kept`]): a row of
//! `mnemo_documents` per document (its record and whole text) and a row of
//! `mnemo_document_pieces` per piece the files store would index (with its
//! page), searched by full text as the topic notes are; a row of
//! `mnemo_kept_files` per file kept as it was. Every statement is scoped to
//! the turn's channel and user.

use crate::turn::PgTurn;
use crate::{PgError, pg_text};
use chrono::{DateTime, Utc};
use mnemo_sessions::documents::{DocKind, Document, DocumentMeta};
use mnemo_sessions::kept::{KeptFile, KeptMeta};
use mnemo_sessions::recall::Item;
use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

/// The user's document pieces holding any word of the query `$3` (a
/// [`crate::words::tsquery`]), best first, at most `$4`.
pub(crate) const PIECES_MATCHING: &str = "SELECT d.name, d.added_at, p.page, p.text
 FROM mnemo_document_pieces p JOIN mnemo_documents d
   ON d.channel = p.channel AND d.user_key = p.user_key AND d.id = p.doc_id,
   to_tsquery('english', $3) AS q
 WHERE p.channel = $1 AND p.user_key = $2 AND p.tsv @@ q
 ORDER BY ts_rank(p.tsv, q) DESC, d.added_at DESC, p.n LIMIT $4";

/// Pieces of documents a turn's recall offers at most: two pages of one
/// document, or one each of two, beside the messages.
pub(crate) const RECALLED_PIECES: usize = 3;

/// The rows of [`PIECES_MATCHING`] as recall items, labelled as the files
/// store labels them.
pub(crate) fn piece_items(rows: &[tokio_postgres::Row]) -> Vec<Item> {
    rows.iter()
        .map(|row| {
            let (name, at, page, text): (String, DateTime<Utc>, Option<i32>, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            Item::document(at, &name, page.and_then(|p| u32::try_from(p).ok()), &text)
        })
        .collect()
}

const COLUMNS: &str = "id, name, kind, pages, added_at, bytes, chars";

fn meta_of(row: &tokio_postgres::Row) -> DocumentMeta {
    let kind: String = row.get(2);
    let pages: Option<i32> = row.get(3);
    let (bytes, chars): (i64, i64) = (row.get(5), row.get(6));
    DocumentMeta {
        id: row.get(0),
        name: row.get(1),
        kind: DocKind::parse(&kind).unwrap_or(DocKind::Text),
        pages: pages.and_then(|p| u32::try_from(p).ok()),
        added: row.get(4),
        bytes: u64::try_from(bytes).unwrap_or(0),
        chars: usize::try_from(chars).unwrap_or(0),
    }
}

/// Inserts `doc` and its pieces for the user, unless a document of that
/// id is there; whether it was inserted. The user's row must exist.
pub(crate) async fn insert(
    client: &impl GenericClient,
    channel: &str,
    key: &str,
    doc: &Document,
) -> Result<bool, PgError> {
    let m = &doc.meta;
    let pages = m.pages.and_then(|p| i32::try_from(p).ok());
    let bytes = i64::try_from(m.bytes).unwrap_or(i64::MAX);
    let chars = i64::try_from(m.chars).unwrap_or(i64::MAX);
    let (name, body) = (pg_text(&m.name), pg_text(&doc.text));
    let params: [&(dyn ToSql + Sync); 10] = [
        &channel,
        &key,
        &m.id,
        &name,
        &m.kind.as_str(),
        &pages,
        &m.added,
        &bytes,
        &chars,
        &body,
    ];
    let added = client
        .execute(
            "INSERT INTO mnemo_documents (channel, user_key, id, name, kind, pages, added_at, bytes, chars, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
            &params,
        )
        .await?;
    if added == 0 {
        return Ok(false);
    }
    let pieces = doc.pieces();
    let (mut ns, mut pages, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    for (n, (page, text)) in pieces.iter().enumerate() {
        ns.push(i32::try_from(n).unwrap_or(i32::MAX));
        pages.push(page.and_then(|p| i32::try_from(p).ok()));
        texts.push(pg_text(text).into_owned());
    }
    client
        .execute(
            "INSERT INTO mnemo_document_pieces (channel, user_key, doc_id, n, page, text)
             SELECT $1, $2, $3, n, page, text FROM unnest($4::int[], $5::int[], $6::text[]) AS u(n, page, text)",
            &[&channel, &key, &m.id, &ns, &pages, &texts],
        )
        .await?;
    Ok(true)
}

/// Every document of the user, whole, oldest first (export, store copy).
pub(crate) async fn read_all(client: &impl GenericClient, channel: &str, key: &str) -> Result<Vec<Document>, PgError> {
    let rows = rows_of(client, &format!("{COLUMNS}, body"), "mnemo_documents", channel, key).await?;
    Ok(rows
        .iter()
        .map(|row| Document {
            meta: meta_of(row),
            text: row.get(7),
        })
        .collect())
}

const KEPT_COLUMNS: &str = "id, name, kind, mime, bytes, added_at";

fn kept_of(row: &tokio_postgres::Row) -> KeptMeta {
    let bytes: i64 = row.get(4);
    KeptMeta {
        id: row.get(0),
        name: row.get(1),
        kind: row.get(2),
        mime: row.get(3),
        bytes: u64::try_from(bytes).unwrap_or(0),
        added: row.get(5),
    }
}

/// Inserts kept `file` for the user unless one of its id is there;
/// whether it was inserted. The user's row must exist.
pub(crate) async fn insert_kept(
    client: &impl GenericClient,
    channel: &str,
    key: &str,
    file: &KeptFile,
) -> Result<bool, PgError> {
    let m = &file.meta;
    let bytes = i64::try_from(m.bytes).unwrap_or(i64::MAX);
    let (name, mime) = (pg_text(&m.name), m.mime.as_deref().map(pg_text));
    let params: [&(dyn ToSql + Sync); 9] = [
        &channel, &key, &m.id, &name, &m.kind, &mime, &bytes, &m.added, &file.data,
    ];
    let added = client
        .execute(
            "INSERT INTO mnemo_kept_files (channel, user_key, id, name, kind, mime, bytes, added_at, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
            &params,
        )
        .await?;
    Ok(added > 0)
}

/// Every kept file of the user with its bytes, oldest first (export, store
/// copy).
pub(crate) async fn read_kept(client: &impl GenericClient, channel: &str, key: &str) -> Result<Vec<KeptFile>, PgError> {
    let rows = rows_of(
        client,
        &format!("{KEPT_COLUMNS}, data"),
        "mnemo_kept_files",
        channel,
        key,
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| KeptFile {
            meta: kept_of(row),
            data: row.get(6),
        })
        .collect())
}

/// `columns` of the user's rows of `table` (one of ours), oldest first.
async fn rows_of(
    client: &impl GenericClient,
    columns: &str,
    table: &'static str,
    channel: &str,
    key: &str,
) -> Result<Vec<tokio_postgres::Row>, PgError> {
    let sql = format!("SELECT {columns} FROM {table} WHERE channel = $1 AND user_key = $2 ORDER BY added_at, id");
    Ok(client.query(&sql, &[&channel, &key]).await?)
}

impl PgTurn {
    /// Keeps `doc` (see [`insert`]), creating the user's row if needed.
    pub async fn add_document(&mut self, doc: &Document) -> Result<bool, PgError> {
        let (channel, key) = self.keys();
        let tx = self.with_user_row().await?;
        let client: &tokio_postgres::Transaction<'_> = &tx;
        let added = insert(client, &channel, &key, doc).await?;
        tx.commit().await?;
        Ok(added)
    }

    /// The user's documents, oldest first.
    pub async fn documents(&mut self) -> Result<Vec<DocumentMeta>, PgError> {
        let (channel, key) = self.keys();
        let rows = rows_of(&***self.conn(), COLUMNS, "mnemo_documents", &channel, &key).await?;
        Ok(rows.iter().map(meta_of).collect())
    }

    /// Deletes document `id` (its pieces go with it); whether there was one.
    pub async fn forget_document(&mut self, id: &str) -> Result<bool, PgError> {
        self.delete_by_id("mnemo_documents", id).await
    }

    /// Keeps `file` (see [`insert_kept`]), creating the user's row if needed.
    pub async fn keep_file(&mut self, file: &KeptFile) -> Result<bool, PgError> {
        let (channel, key) = self.keys();
        let tx = self.with_user_row().await?;
        let client: &tokio_postgres::Transaction<'_> = &tx;
        let added = insert_kept(client, &channel, &key, file).await?;
        tx.commit().await?;
        Ok(added)
    }

    /// The user's kept files, oldest first (without their bytes).
    pub async fn kept_files(&mut self) -> Result<Vec<KeptMeta>, PgError> {
        let (channel, key) = self.keys();
        let rows = rows_of(&***self.conn(), KEPT_COLUMNS, "mnemo_kept_files", &channel, &key).await?;
        Ok(rows.iter().map(kept_of).collect())
    }

    /// Deletes kept file `id`; whether there was one.
    pub async fn forget_kept(&mut self, id: &str) -> Result<bool, PgError> {
        self.delete_by_id("mnemo_kept_files", id).await
    }

    /// Deletes the user's row `id` of `table` (one of ours); whether there
    /// was one.
    async fn delete_by_id(&mut self, table: &'static str, id: &str) -> Result<bool, PgError> {
        let (channel, key) = self.keys();
        let sql = format!("DELETE FROM {table} WHERE channel = $1 AND user_key = $2 AND id = $3");
        Ok(self.conn().execute(&sql, &[&channel, &key, &id]).await? > 0)
    }
}
