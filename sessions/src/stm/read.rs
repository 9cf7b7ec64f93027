//! Reading a whole log front to back, and finding where a folded prefix
//! ends. Pure line handling over bytes already read; the only I/O is the
//! one `fs::read` in [`read_all`]. Never fails on bad content: a malformed
//! line is skipped (and counted, and logged with its file and line number).

use crate::record::Record;
use std::io;
use std::ops::Range;
use std::path::Path;

/// Every valid record of a log, oldest first, and how many non-blank lines
/// could not be read as records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSnapshot {
    pub records: Vec<Record>,
    pub skipped_lines: usize,
}

/// One line, parsed. Blank lines carry nothing and are not counted.
pub(super) enum Line {
    Blank,
    Valid(Record),
    Malformed,
}

pub(super) fn parse_line(bytes: &[u8]) -> Line {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Line::Blank;
    }
    match serde_json::from_slice(bytes) {
        Ok(record) => Line::Valid(record),
        Err(_) => Line::Malformed,
    }
}

/// Each line's bytes (without its `\n`) and its byte offset in `bytes`.
/// A final fragment without `\n` (a torn write) is yielded too.
fn lines_with_offsets(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut start = 0;
    bytes.split_inclusive(|&b| b == b'\n').map(move |chunk| {
        let at = start;
        start += chunk.len();
        (at, chunk.strip_suffix(b"\n").unwrap_or(chunk))
    })
}

/// Reads the whole log at `path` (no link below `root` followed). A
/// missing file is an empty log.
pub(super) fn read_all(root: &Path, path: &Path) -> io::Result<LogSnapshot> {
    let bytes = match crate::fsutil::read_nofollow(root, path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LogSnapshot::default()),
        Err(e) => return Err(e),
    };
    Ok(parse_all(path, &bytes))
}

/// `bytes` up to the end of its last complete line (`\n` included).
pub(crate) fn settled(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    &bytes[..end]
}

/// Every record of the log bytes read from `path` (named in warnings).
pub(crate) fn parse_all(path: &Path, bytes: &[u8]) -> LogSnapshot {
    let indexed = parse_indexed(path, bytes);
    LogSnapshot {
        records: indexed.records,
        skipped_lines: indexed.malformed.len(),
    }
}

/// The records of a log's bytes with where each one's line ends, and the
/// spans of its malformed lines: enough to cut a prefix of records off the
/// same bytes later without parsing them again.
#[derive(Debug, Default)]
pub(crate) struct IndexedLog {
    pub records: Vec<Record>,
    /// `starts[i]`: the byte offset where record `i`'s line begins.
    pub starts: Vec<usize>,
    /// `ends[i]`: the byte offset just past record `i`'s line (its `\n`
    /// included), where the lines after it start.
    pub ends: Vec<usize>,
    /// Byte spans of the malformed lines (without their `\n`), in order.
    pub malformed: Vec<Range<usize>>,
}

/// [`parse_all`], keeping the line offsets (see [`IndexedLog`]).
pub(crate) fn parse_indexed(path: &Path, bytes: &[u8]) -> IndexedLog {
    let mut indexed = IndexedLog::default();
    for (number, (offset, line)) in lines_with_offsets(bytes).enumerate() {
        match parse_line(line) {
            Line::Blank => {}
            Line::Valid(record) => {
                indexed.records.push(record);
                indexed.starts.push(offset);
                indexed.ends.push((offset + line.len() + 1).min(bytes.len()));
            }
            Line::Malformed => {
                indexed.malformed.push(offset..offset + line.len());
                tracing::warn!(file = %path.display(), line = number + 1, "malformed line in the short-term log; skipped");
            }
        }
    }
    indexed
}

impl IndexedLog {
    /// The lines of the first `n` records, as `bytes` (the log these were
    /// parsed from) holds them, each ending in `\n`; the lines between
    /// them that are blank or malformed are left out. What compaction
    /// archives and its fold marker hashes: the log's own bytes, so a batch
    /// is not encoded again (see [`crate::archive::EncodedBatch`]).
    pub fn batch_lines(&self, bytes: &[u8], n: usize) -> Vec<u8> {
        let n = n.min(self.records.len());
        let mut out = Vec::with_capacity(self.ends[..n].last().map_or(0, |end| end + 1));
        for (&start, &end) in self.starts[..n].iter().zip(&self.ends[..n]) {
            out.extend_from_slice(&bytes[start..end]);
            if out.last() != Some(&b'\n') {
                out.push(b'\n');
            }
        }
        out
    }
}

/// Where the folded prefix of a log ends.
pub(super) struct PrefixSplit<'a> {
    /// Byte offset of the first line that stays.
    pub rest_start: usize,
    /// Malformed lines met before the last folded record; they leave the
    /// log with the prefix.
    pub malformed: Vec<&'a [u8]>,
}

/// Checks that the first valid records of `bytes` are exactly `folded` and
/// returns where the rest begins; `Err` says how they differ.
pub(super) fn split_prefix<'a>(bytes: &'a [u8], folded: &[Record]) -> Result<PrefixSplit<'a>, String> {
    let mut matched = 0;
    let mut malformed = Vec::new();
    for (number, (offset, line)) in lines_with_offsets(bytes).enumerate() {
        if matched == folded.len() {
            return Ok(PrefixSplit {
                rest_start: offset,
                malformed,
            });
        }
        match parse_line(line) {
            Line::Blank => {}
            Line::Malformed => malformed.push(line),
            Line::Valid(record) if record == folded[matched] => matched += 1,
            Line::Valid(_) => {
                return Err(format!(
                    "valid record {} (line {}) differs from folded record {}",
                    matched + 1,
                    number + 1,
                    matched + 1
                ));
            }
        }
    }
    if matched == folded.len() {
        Ok(PrefixSplit {
            rest_start: bytes.len(),
            malformed,
        })
    } else {
        Err(format!("the log holds only {matched} valid records"))
    }
}
