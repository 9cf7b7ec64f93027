//! A PDF's text layer, by `pdf-extract` (on `lopdf`; ARCHITECTURE.md says
//! why this crate). Before the parser sees the file, its compressed
//! streams are inflated here, bounded, and the file is refused if they
//! unpack to more than [`Bounds::max_inflated`] (the parser itself
//! inflates without a bound). A panic inside the parser (it has
//! `unwrap`s on malformed files) is caught and becomes
//! [`Refusal::Corrupt`].

use super::{Bounds, Extracted, Refusal};
use flate2::read::ZlibDecoder;
use mnemo_sessions::documents::{DocKind, page_mark};
use pdf_extract::{Document, PlainTextOutput, output_doc_page};
use std::io::Read;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Where a PDF header may start (some writers put junk before it).
const HEADER_WITHIN: usize = 1024;

pub fn extract(bytes: &[u8], bounds: Bounds) -> Result<Extracted, Refusal> {
    let head = &bytes[..bytes.len().min(HEADER_WITHIN)];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        return Err(Refusal::Mismatch { claimed: DocKind::Pdf });
    }
    if inflated_size(bytes, bounds.max_inflated) > bounds.max_inflated {
        return Err(Refusal::Bomb);
    }
    match catch_unwind(AssertUnwindSafe(|| pages_text(bytes, bounds))) {
        Ok(result) => result,
        Err(_) => Err(Refusal::Corrupt),
    }
}

fn pages_text(bytes: &[u8], bounds: Bounds) -> Result<Extracted, Refusal> {
    let mut doc = Document::load_mem(bytes).map_err(|_| Refusal::Corrupt)?;
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        return Err(Refusal::Encrypted);
    }
    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
    let pages = u32::try_from(numbers.len()).unwrap_or(u32::MAX);
    if pages > bounds.max_pages {
        return Err(Refusal::TooManyPages {
            pages,
            max: bounds.max_pages,
        });
    }
    let mut text = String::new();
    for n in numbers {
        let mut page = String::new();
        {
            let mut output = PlainTextOutput::new(&mut page);
            // A page that does not parse is left out; the others are read.
            if output_doc_page(&doc, &mut output, n).is_err() {
                continue;
            }
        }
        let page = tidy(&page);
        if page.is_empty() {
            continue;
        }
        text.push_str(&page_mark(n));
        text.push('\n');
        text.push_str(&page);
        text.push_str("\n\n");
    }
    Ok(Extracted {
        kind: DocKind::Pdf,
        text,
        pages: Some(pages),
    })
}

/// A page's text with runs of spaces folded, blank lines kept as
/// paragraph breaks and control characters dropped.
fn tidy(page: &str) -> String {
    let mut out = String::new();
    let mut blank = 0;
    for line in page.lines() {
        let line: String = line
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        // A line that would read as a page mark is not one.
        out.push_str(&line.replace("<!--", "< !--"));
    }
    out
}

/// What the zlib streams of a PDF inflate to together, counted up to just
/// past `cap`. Each `stream` … `endstream` body is tried as zlib; what is
/// not zlib (images in other codecs, plain streams) counts as nothing.
fn inflated_size(bytes: &[u8], cap: u64) -> u64 {
    let mut total = 0u64;
    let mut at = 0;
    while let Some(start) = find(&bytes[at..], b"stream") {
        let mut body = at + start + b"stream".len();
        // `endstream` also holds `stream`: skip it.
        if at + start >= 3 && &bytes[at + start - 3..at + start] == b"end" {
            at = body;
            continue;
        }
        match bytes.get(body..body + 2) {
            Some(b"\r\n") => body += 2,
            Some([b'\n', _]) | Some([b'\r', _]) => body += 1,
            _ => {
                at = body;
                continue;
            }
        }
        let end = find(&bytes[body..], b"endstream").map_or(bytes.len(), |e| body + e);
        let left = cap.saturating_sub(total) + 1;
        // Counted as it goes: a stream that breaks after a while counts
        // what it gave until then.
        let mut counted = Counted(0);
        let _ = std::io::copy(&mut ZlibDecoder::new(&bytes[body..end]).take(left), &mut counted);
        total += counted.0;
        if total > cap {
            return total;
        }
        at = end;
    }
    total
}

/// A sink that counts what it is given.
struct Counted(u64);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
