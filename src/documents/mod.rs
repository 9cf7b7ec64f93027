//! The text of a document a user sent: plain text, Markdown, CSV, JSON and
//! PDF (its text layer), checked against what it claims to be and bounded
//! before anything is parsed. What comes out is kept by the store as a
//! document record ([`mnemo_sessions::documents`]); what does not gets a
//! [`Refusal`], whose text is the user's reply.
//!
//! Blocking and CPU-bound: run [`extract`] on the blocking pool, under a
//! timeout ([`crate::pipeline::documents`]). Nothing of a document's
//! content reaches a log line or an error: a refusal names the kind of
//! problem, never the text.

mod pdf;
mod tabular;

use mnemo_sessions::documents::{DocKind, MAX_TEXT_BYTES};
use std::fmt;

/// What [`extract`] may spend on one document.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// `limits.maxDocumentPages`: a PDF with more pages is refused.
    pub max_pages: u32,
    /// Bytes all of a PDF's compressed streams may inflate to together: a
    /// small file that unpacks to gigabytes (a decompression bomb) is
    /// refused before the PDF is parsed.
    pub max_inflated: u64,
}

impl Bounds {
    /// The default inflation bound: a 100-page text PDF inflates to a few
    /// MB; scans with big images to tens.
    pub const MAX_INFLATED: u64 = 256 * 1024 * 1024;
}

/// A document's text, ready to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extracted {
    pub kind: DocKind,
    /// The text; a PDF's pages each open with
    /// [`mnemo_sessions::documents::page_mark`].
    pub text: String,
    pub pages: Option<u32>,
}

/// Why a document's text was not taken: each says so to the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not one of the kinds read (a `.docx`, an image sent as a file, …).
    Unsupported { what: String },
    /// The bytes are not what the name or type says (a `.pdf` that is no
    /// PDF, a `.txt` that is binary, a `.json` that does not parse).
    Mismatch { claimed: DocKind },
    /// A PDF that could not be parsed.
    Corrupt,
    /// A PDF locked with a password.
    Encrypted,
    /// A PDF with more pages than allowed.
    TooManyPages { pages: u32, max: u32 },
    /// Its compressed parts unpack to more than allowed.
    Bomb,
    /// A PDF with no text layer (a scan), or an empty file.
    NoText { pdf: bool },
    /// More text than memory keeps of one document.
    TooLong { bytes: usize },
}

impl Refusal {
    /// What kind of refusal this is, for the log and metrics (never the
    /// content).
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Unsupported { .. } => "unsupported",
            Refusal::Mismatch { .. } => "mismatch",
            Refusal::Corrupt => "corrupt",
            Refusal::Encrypted => "encrypted",
            Refusal::TooManyPages { .. } => "too_many_pages",
            Refusal::Bomb => "bomb",
            Refusal::NoText { .. } => "no_text",
            Refusal::TooLong { .. } => "too_long",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unsupported { what } => write!(
                f,
                "I can't read {what} files. I read plain text, Markdown, CSV, JSON and PDF documents."
            ),
            Refusal::Mismatch { claimed } => write!(
                f,
                "That file says it is {} but its contents are not, so I did not read it.",
                article(*claimed)
            ),
            Refusal::Corrupt => write!(f, "That PDF looks damaged: I could not read it."),
            Refusal::Encrypted => write!(
                f,
                "That PDF is locked with a password, so I can't read it. Send a copy without the password."
            ),
            Refusal::TooManyPages { pages, max } => write!(
                f,
                "That PDF has {pages} pages; I read documents of up to {max} pages. Send the part that matters."
            ),
            Refusal::Bomb => write!(
                f,
                "That file unpacks to far more than its size, which is how harmful files look, so I did not read it."
            ),
            Refusal::NoText { pdf: true } => write!(
                f,
                "That PDF has no text I can read: it looks like a scan (pictures of pages). Send a PDF with a text \
                 layer, or paste the part that matters."
            ),
            Refusal::NoText { pdf: false } => write!(f, "That file is empty, so there was nothing to remember."),
            Refusal::TooLong { bytes } => write!(
                f,
                "That document holds {} KB of text; I keep documents of up to {} KB. Send the part that matters.",
                bytes / 1024,
                MAX_TEXT_BYTES / 1024
            ),
        }
    }
}

fn article(kind: DocKind) -> &'static str {
    match kind {
        DocKind::Text => "a text file",
        DocKind::Markdown => "a Markdown file",
        DocKind::Csv => "a CSV file",
        DocKind::Json => "a JSON file",
        DocKind::Pdf => "a PDF",
    }
}

/// The kind a file claims by its name's extension, else its MIME type.
pub fn claimed_kind(name: &str, mime: Option<&str>) -> Result<DocKind, Refusal> {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .filter(|e| e.len() <= 8 && !e.contains(['/', '\\']));
    let by_ext = match ext.as_deref() {
        Some("txt" | "text" | "log") => Some(DocKind::Text),
        Some("md" | "markdown") => Some(DocKind::Markdown),
        Some("csv") => Some(DocKind::Csv),
        Some("json") => Some(DocKind::Json),
        Some("pdf") => Some(DocKind::Pdf),
        _ => None,
    };
    let mime = mime.map(|m| m.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let by_mime = match mime.as_deref() {
        Some("text/plain") => Some(DocKind::Text),
        Some("text/markdown" | "text/x-markdown") => Some(DocKind::Markdown),
        Some("text/csv") => Some(DocKind::Csv),
        Some("application/json") => Some(DocKind::Json),
        Some("application/pdf") => Some(DocKind::Pdf),
        _ => None,
    };
    by_ext.or(by_mime).ok_or_else(|| Refusal::Unsupported {
        what: match (ext, mime) {
            (Some(ext), _) => format!(".{ext}"),
            (None, Some(mime)) if !mime.is_empty() => mime.chars().filter(|c| !c.is_control()).take(40).collect(),
            _ => "these".to_string(),
        },
    })
}

/// The text of a file named `name` (MIME type `mime`, if the platform
/// said) holding `bytes`.
pub fn extract(name: &str, mime: Option<&str>, bytes: &[u8], bounds: Bounds) -> Result<Extracted, Refusal> {
    let kind = claimed_kind(name, mime)?;
    let extracted = match kind {
        DocKind::Pdf => pdf::extract(bytes, bounds)?,
        DocKind::Text | DocKind::Markdown => Extracted {
            kind,
            text: text_of(bytes, kind)?,
            pages: None,
        },
        DocKind::Csv => Extracted {
            kind,
            text: tabular::csv_text(&text_of(bytes, kind)?).ok_or(Refusal::Mismatch { claimed: kind })?,
            pages: None,
        },
        DocKind::Json => Extracted {
            kind,
            text: tabular::json_text(&text_of(bytes, kind)?).ok_or(Refusal::Mismatch { claimed: kind })?,
            pages: None,
        },
    };
    if extracted.text.trim().is_empty() {
        return Err(Refusal::NoText {
            pdf: kind == DocKind::Pdf,
        });
    }
    if extracted.text.len() > MAX_TEXT_BYTES {
        return Err(Refusal::TooLong {
            bytes: extracted.text.len(),
        });
    }
    Ok(extracted)
}

/// `bytes` as text: UTF-8 (a byte-order mark dropped), with no NUL and
/// few other control characters — else the file is binary and not what it
/// claims.
fn text_of(bytes: &[u8], claimed: DocKind) -> Result<String, Refusal> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|_| Refusal::Mismatch { claimed })?;
    let controls = text
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\u{c}'))
        .count();
    if text.contains('\0') || controls * 100 > text.chars().count().max(1) {
        return Err(Refusal::Mismatch { claimed });
    }
    Ok(text.replace("\r\n", "\n"))
}

#[cfg(test)]
mod tests;
