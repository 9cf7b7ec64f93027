//! `/session documents` and `/session forget <id>`: the documents the
//! caller sent that memory keeps ([`crate::documents`]) and, with
//! `attachments.keep`, the files themselves ([`crate::kept`]).

use crate::documents::{DocumentMeta, is_id};
use crate::kept::KeptMeta;
use crate::store::{StoreError, UserMemory};

/// The caller's documents and kept files, oldest first, each with its id.
pub(super) async fn list(memory: &mut dyn UserMemory) -> Result<String, StoreError> {
    let docs = memory.documents().await?;
    let kept = memory.kept_files().await?;
    if docs.is_empty() && kept.is_empty() {
        return Ok(
            "You have sent me no documents I keep. Send a text, Markdown, CSV, JSON or PDF file \
                   and I will remember what it says."
                .to_string(),
        );
    }
    let mut text = String::new();
    if !docs.is_empty() {
        text.push_str(&format!(
            "The document{} I keep for you:",
            if docs.len() == 1 { "" } else { "s" }
        ));
        for doc in &docs {
            text.push_str(&format!("\n• {}", line(doc)));
        }
    }
    if !kept.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str("The files you sent that I keep as they were:");
        for file in &kept {
            text.push_str(&format!("\n• {}", kept_line(file)));
        }
    }
    text.push_str("\nForget one with `/session forget <id>`.");
    Ok(text)
}

/// `photo (photo, 182 KB, sent 2026-12-01, id 0a1b2c3d4e5f)`.
fn kept_line(file: &KeptMeta) -> String {
    format!(
        "{} ({}, {}, sent {}, id {})",
        file.name,
        file.kind,
        crate::report::human_bytes(file.bytes),
        file.added.format("%Y-%m-%d"),
        file.id
    )
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

/// Forgets the document `id`, and the file kept of it, when `what` is one
/// the caller has; `None` when `what` is no document or kept file of
/// theirs (the caller goes on to facts and notes).
pub(super) async fn forget(memory: &mut dyn UserMemory, what: &str) -> Result<Option<String>, StoreError> {
    let what = what.trim();
    if !is_id(what) {
        return Ok(None);
    }
    let doc = memory.documents().await?.into_iter().find(|d| d.id == what);
    let file = memory.kept_files().await?.into_iter().find(|f| f.id == what);
    let forgot_doc = doc.is_some() && memory.forget_document(what).await?;
    let forgot_file = file.is_some() && memory.forget_kept(what).await?;
    Ok(match (doc, file) {
        (Some(doc), _) if forgot_doc => Some(format!(
            "Forgot the document {} and everything I took from it{}.",
            doc.name,
            if forgot_file { ", and the file itself" } else { "" }
        )),
        (_, Some(file)) if forgot_file => Some(format!("Deleted the {} you sent ({}).", file.kind, file.name)),
        _ => None,
    })
}
