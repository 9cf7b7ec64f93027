//! `/session documents` and `/session forget <document id>`: the documents
//! the caller sent that memory keeps ([`crate::documents`]).

use crate::documents::{DocumentMeta, is_id};
use crate::store::{StoreError, UserMemory};

/// The caller's documents, oldest first, each with its id.
pub(super) async fn list(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let docs = memory.documents().await?;
    if docs.is_empty() {
        return Ok(
            "You have sent me no documents I keep. Send a text, Markdown, CSV, JSON or PDF file \
                   and I will remember what it says."
                .to_string(),
        );
    }
    let mut text = format!("The document{} I keep for you:", if docs.len() == 1 { "" } else { "s" });
    for doc in &docs {
        text.push_str(&format!("\n• {}", line(doc)));
    }
    text.push_str("\nForget one with `/session forget <id>`.");
    Ok(text)
}

/// `lease.pdf` (pdf, 12 pages, sent 2026-12-01, id 0a1b2c3d4e5f).
pub fn line(doc: &DocumentMeta) -> String {
    let pages = match doc.pages {
        Some(1) => ", 1 page".to_string(),
        Some(n) => format!(", {n} pages"),
        None => String::new(),
    };
    format!(
        "{} ({}{pages}, sent {}, id {})",
        doc.name,
        doc.kind.as_str(),
        doc.added.format("%Y-%m-%d"),
        doc.id
    )
}

/// Forgets the document `id` when `what` is one the caller has; `None`
/// when `what` is no document of theirs (the caller goes on to facts and
/// notes).
pub(super) async fn forget(memory: &mut dyn UserMemory, what: &str) -> Result<Option<String>, StoreError> {
    let what = what.trim();
    if !is_id(what) {
        return Ok(None);
    }
    let Some(doc) = memory.documents().await?.into_iter().find(|d| d.id == what) else {
        return Ok(None);
    };
    if !memory.forget_document(what).await? {
        return Ok(None);
    }
    Ok(Some(format!(
        "Forgot the document {} and everything I took from it.",
        doc.name
    )))
}
