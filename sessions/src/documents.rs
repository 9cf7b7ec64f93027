//! Documents a user sent the bot (a text, Markdown, CSV, JSON or PDF file):
//! the text taken out of them, kept as the user's long-term memory and
//! found again by recall ("what deposit did the lease say?").
//!
//! A document is its text plus a record of where it came from
//! ([`DocumentMeta`]: name, type, pages, date, size). On the files it is
//! `ltm/documents/<user>/<id>.md`: that record as YAML frontmatter, the
//! text as the body, pages opened by a `<!-- page N -->` line (a comment
//! markdown viewers do not show). On Postgres the same record is a row and
//! its text a row per piece. Either way the text is searched in pieces
//! ([`pieces`]), so a long document offers recall its best page or two
//! rather than crowding out everything else.
//!
//! The id is the first 12 hex digits of the SHA-256 of the file's bytes: the
//! same file sent twice is the same document, stored once. Nothing here
//! reads a file the user sent; the broker extracts the text and hands it in.

use crate::frontmatter::{self, FrontmatterError};
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The line that opens page `n` of a document's text.
pub fn page_mark(n: u32) -> String {
    format!("<!-- page {n} -->")
}

/// Longest document text kept, in bytes (a few hundred pages of prose):
/// memory, not file storage.
pub const MAX_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// Longest name kept, in characters.
pub const MAX_NAME_CHARS: usize = 120;

/// What a document was before its text was taken out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocKind {
    Text,
    Markdown,
    Csv,
    Json,
    Pdf,
}

impl DocKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DocKind::Text => "text",
            DocKind::Markdown => "markdown",
            DocKind::Csv => "csv",
            DocKind::Json => "json",
            DocKind::Pdf => "pdf",
        }
    }

    /// The kind named by [`DocKind::as_str`].
    pub fn parse(s: &str) -> Option<DocKind> {
        [
            DocKind::Text,
            DocKind::Markdown,
            DocKind::Csv,
            DocKind::Json,
            DocKind::Pdf,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// Where a document came from: the frontmatter of its file, a row on
/// Postgres.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentMeta {
    /// [`id_of`] its bytes.
    pub id: String,
    /// The file's name as sent, cleaned ([`clean_name`]).
    pub name: String,
    #[serde(rename = "type")]
    pub kind: DocKind,
    /// Pages, for a PDF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u32>,
    pub added: DateTime<Utc>,
    /// Size of the file as sent.
    pub bytes: u64,
    /// Characters of the text kept.
    pub chars: usize,
}

/// A document: its record and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub meta: DocumentMeta,
    pub text: String,
}

impl Document {
    /// The searchable pieces of the text: (page, piece), in order.
    pub fn pieces(&self) -> Vec<(Option<u32>, String)> {
        pieces(&self.text)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
}

/// The id of a document whose file held `bytes`.
pub fn id_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` could be an id [`id_of`] made (a `/session forget` argument).
pub fn is_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A file name as shown back and put in labels: control characters and
/// path separators dropped, cut at [`MAX_NAME_CHARS`]; `document` if
/// nothing is left.
pub fn clean_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| !c.is_control() && *c != '/' && *c != '\\')
        .take(MAX_NAME_CHARS)
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        "document".to_string()
    } else {
        cleaned.to_string()
    }
}

/// The text's searchable pieces, each with its page (from the
/// [`page_mark`] lines; `None` before the first, and in documents that
/// have none): paragraphs and bullets of at most recall's piece size.
pub fn pieces(text: &str) -> Vec<(Option<u32>, String)> {
    let mut out = Vec::new();
    let mut page = None;
    let mut current = String::new();
    let mut flush = |page: Option<u32>, current: &mut String| {
        for piece in crate::pieces::pieces(current) {
            out.push((page, piece));
        }
        current.clear();
    };
    for line in text.lines() {
        if let Some(n) = parse_page_mark(line) {
            flush(page, &mut current);
            page = Some(n);
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    flush(page, &mut current);
    out
}

fn parse_page_mark(line: &str) -> Option<u32> {
    line.trim()
        .strip_prefix("<!-- page ")?
        .strip_suffix(" -->")?
        .parse()
        .ok()
}

/// The file of document `id` of `user` (`None` for a name no id has: the
/// caller's argument is checked before any path is made).
fn path_of(layout: &Layout, user: &SafeName, id: &str) -> Option<PathBuf> {
    is_id(id).then(|| layout.document_path(user, id))
}

/// The whole file of `doc` as the files store keeps it (an export of
/// another store writes the same).
pub fn file_text(path: &Path, doc: &Document) -> Result<String, DocumentError> {
    Ok(frontmatter::render(path, &doc.meta, &doc.text)?)
}

/// Writes `doc` (replacing one of the same id), atomically, mode 0600.
pub fn write(layout: &Layout, user: &SafeName, doc: &Document) -> Result<(), DocumentError> {
    let path = path_of(layout, user, &doc.meta.id).ok_or_else(|| {
        FileError::new(
            "name",
            layout.documents_dir(user),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a document id"),
        )
    })?;
    let root = layout.state_root();
    let dir = layout.documents_dir(user);
    fsutil::create_private_dir_all(root, &dir).map_err(|e| FileError::new("create", &dir, e))?;
    let text = file_text(&path, doc)?;
    fsutil::atomic_write(root, &path, text.as_bytes()).map_err(|e| FileError::new("write", &path, e))?;
    Ok(())
}

/// The user's documents, oldest first; a file that does not parse is
/// skipped with a warning (it stays, for the operator to look at).
pub fn list(layout: &Layout, user: &SafeName) -> Result<Vec<DocumentMeta>, DocumentError> {
    let mut out = Vec::new();
    for path in files(layout, user)? {
        match read_meta(layout, &path) {
            Ok(meta) => out.push(meta),
            Err(e) => tracing::warn!(user = %user.log_id(), error = %e, "a document file is unreadable; skipped"),
        }
    }
    out.sort_by(|a, b| a.added.cmp(&b.added).then_with(|| a.id.cmp(&b.id)));
    Ok(out)
}

/// Document `id` of `user`, if there is one.
pub fn read(layout: &Layout, user: &SafeName, id: &str) -> Result<Option<Document>, DocumentError> {
    let Some(path) = path_of(layout, user, id) else {
        return Ok(None);
    };
    let text = match fsutil::read_to_string_nofollow(layout.state_root(), &path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::new("read", &path, e).into()),
    };
    let doc = frontmatter::parse::<DocumentMeta>(&path, &text)?;
    Ok(Some(Document {
        meta: doc.meta,
        text: doc.body,
    }))
}

/// Whether `user` has document `id` (its file, not read).
pub fn has(layout: &Layout, user: &SafeName, id: &str) -> bool {
    path_of(layout, user, id)
        .and_then(|path| std::fs::symlink_metadata(path).ok())
        .is_some_and(|m| m.is_file())
}

/// Removes document `id` of `user`; whether there was one.
pub fn remove(layout: &Layout, user: &SafeName, id: &str) -> Result<bool, DocumentError> {
    let Some(path) = path_of(layout, user, id) else {
        return Ok(false);
    };
    match fsutil::remove_nofollow(layout.state_root(), &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(FileError::new("remove", &path, e).into()),
    }
}

fn read_meta(layout: &Layout, path: &Path) -> Result<DocumentMeta, DocumentError> {
    let text =
        fsutil::read_to_string_nofollow(layout.state_root(), path).map_err(|e| FileError::new("read", path, e))?;
    Ok(frontmatter::parse::<DocumentMeta>(path, &text)?.meta)
}

/// The `<id>.md` files of the user's folder.
fn files(layout: &Layout, user: &SafeName) -> Result<Vec<PathBuf>, DocumentError> {
    Ok(ids_in(layout, &layout.documents_dir(user), "md")?
        .iter()
        .filter_map(|id| path_of(layout, user, id))
        .collect())
}

/// The ids of the `<id>.<ext>` files of `dir`, sorted (temp files and
/// strays skipped, links never followed; a missing folder has none).
pub(crate) fn ids_in(layout: &Layout, dir: &Path, ext: &str) -> Result<Vec<String>, FileError> {
    let entries = match fsutil::read_dir_nofollow(layout.state_root(), dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::new("list", dir, e)),
    };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(ext)?.strip_suffix('.')?;
            is_id(id).then(|| id.to_string())
        })
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        Document {
            meta: DocumentMeta {
                id: id_of(text.as_bytes()),
                name: "lease.pdf".into(),
                kind: DocKind::Pdf,
                pages: Some(2),
                added: "2026-12-01T10:00:00Z".parse().unwrap(),
                bytes: 1234,
                chars: text.chars().count(),
            },
            text: text.to_string(),
        }
    }

    #[test]
    fn pieces_know_their_page() {
        let text = format!(
            "{}\nThe tenant pays rent monthly.\n\n{}\nThe deposit is 1,800 euros.\n",
            page_mark(1),
            page_mark(2)
        );
        let p = pieces(&text);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0], (Some(1), "The tenant pays rent monthly.".to_string()));
        assert_eq!(p[1], (Some(2), "The deposit is 1,800 euros.".to_string()));
        assert_eq!(pieces("plain words")[0].0, None);
    }

    #[test]
    fn a_document_round_trips_through_its_file_and_is_listed_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "console");
        let user = SafeName::of("ana");
        let d = doc("The deposit is 1,800 euros.");
        write(&layout, &user, &d).unwrap();
        assert_eq!(read(&layout, &user, &d.meta.id).unwrap(), Some(d.clone()));
        assert_eq!(list(&layout, &user).unwrap(), vec![d.meta.clone()]);
        assert!(remove(&layout, &user, &d.meta.id).unwrap());
        assert!(!remove(&layout, &user, &d.meta.id).unwrap());
        assert!(list(&layout, &user).unwrap().is_empty());
    }

    #[test]
    fn hostile_ids_and_names_touch_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "console");
        let user = SafeName::of("ana");
        for id in ["../../x", "", "a\0b", "ABCDEF012345", &"a".repeat(5000)] {
            assert!(!remove(&layout, &user, id).unwrap());
            assert_eq!(read(&layout, &user, id).unwrap(), None);
        }
        assert_eq!(clean_name("../../etc/passwd\0"), "....etcpasswd");
        assert_eq!(clean_name("\n\t"), "document");
        assert_eq!(clean_name(&"x".repeat(500)).chars().count(), MAX_NAME_CHARS);
    }
}
