//! The archive: `archive/<user>/messages-….jsonl.gz`, every message that
//! left short-term memory (folded by compaction, pushed out by the sliding
//! window, or expired), so nothing a user said is lost to a summary.
//!
//! A batch's file name is derived from its content — the earliest and
//! latest timestamp and a short SHA-256 of the records — so writing the same
//! batch again after a crash replaces the same file and never archives it
//! twice. Files are written whole with [`atomic_write`] and never appended
//! to. This module does not decide what to archive or lock anything; the
//! caller holds the user's lock while moving records out of STM.

use crate::fsutil::{self, FileError, atomic_write};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::record::Record;
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use flate2::read::GzDecoder;
use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

const PREFIX: &str = "messages-";
const SUFFIX: &str = ".jsonl.gz";
/// Timestamps in file names: sortable, no `:` (awkward on some file systems).
const NAME_TS: &str = "%Y%m%dT%H%M%S%.3fZ";

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "refusing to archive an empty batch for {user}: the caller has nothing to move out of STM (this is a bug in the caller)"
    )]
    EmptyBatch { user: SafeName },
    #[error("could not encode a record for the archive of {user}: {source}")]
    Encode {
        user: SafeName,
        #[source]
        source: serde_json::Error,
    },
}

/// A batch of records encoded as the archive keeps them — one JSON line
/// per record, each ending in `\n` — with the SHA-256 of those bytes.
/// Compaction's fold marker (`batchSha256` in `summary.md`) and the archive
/// file's name are both derived from this one digest, so a batch is hashed
/// once per commit, and the name always equals the marker's digest (its
/// first 16 hex digits). Compaction takes the lines as the short-term log
/// holds them ([`EncodedBatch::from_lines`]: no second encoding); expiry
/// encodes its records ([`EncodedBatch::encode`]).
pub struct EncodedBatch {
    jsonl: Vec<u8>,
    sha256: [u8; 32],
    earliest: DateTime<Utc>,
    latest: DateTime<Utc>,
}

impl EncodedBatch {
    /// Encodes `records` (non-empty) and hashes the lines.
    pub fn encode(user: &SafeName, records: &[Record]) -> Result<EncodedBatch, ArchiveError> {
        let jsonl = jsonl(records).map_err(|source| ArchiveError::Encode {
            user: user.clone(),
            source,
        })?;
        Self::from_lines(user, records, jsonl)
    }

    /// `records` (non-empty) with `jsonl`, their lines as read from the
    /// short-term log (one per record, in order, each ending in `\n`):
    /// archived byte for byte, so nothing of a line — a field this version
    /// does not know — is lost on the way to the archive.
    pub fn from_lines(user: &SafeName, records: &[Record], jsonl: Vec<u8>) -> Result<EncodedBatch, ArchiveError> {
        let (Some(earliest), Some(latest)) = (records.iter().map(|r| r.ts).min(), records.iter().map(|r| r.ts).max())
        else {
            return Err(ArchiveError::EmptyBatch { user: user.clone() });
        };
        let sha256 = Sha256::digest(&jsonl).into();
        Ok(EncodedBatch {
            jsonl,
            sha256,
            earliest,
            latest,
        })
    }

    /// The SHA-256 of the lines, as lowercase hex (the fold marker's
    /// `batchSha256`).
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }

    /// The archive file name of this batch: earliest and latest timestamp
    /// and the first 8 bytes of the digest.
    fn file_name(&self) -> String {
        format!(
            "{PREFIX}{}-{}-{}{SUFFIX}",
            self.earliest.format(NAME_TS),
            self.latest.format(NAME_TS),
            hex(&self.sha256[..8])
        )
    }
}

/// The records as JSON lines, each ending in `\n`: the bytes the archive
/// holds and the fold marker hashes.
pub(crate) fn jsonl(records: &[Record]) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(records.len() * 256);
    for record in records {
        serde_json::to_writer(&mut out, record)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// SHA-256 of `bytes`, as lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Writes `records` as one gzipped JSONL batch and returns its path. The
/// same records always give the same path, so a retry replaces, never
/// duplicates.
pub fn write_batch(layout: &Layout, user: &SafeName, records: &[Record]) -> Result<PathBuf, ArchiveError> {
    write_encoded(layout, user, &EncodedBatch::encode(user, records)?)
}

/// [`write_batch`] for a batch already encoded (compaction encodes it once
/// for its fold marker and its archive file).
pub fn write_encoded(layout: &Layout, user: &SafeName, batch: &EncodedBatch) -> Result<PathBuf, ArchiveError> {
    let path = layout.archive_batch_path(user, &batch.file_name());
    gzip(&batch.jsonl)
        .and_then(|bytes| atomic_write(layout.state_root(), &path, &bytes))
        .map_err(FileError::with("write", &path))?;
    Ok(path)
}

/// The compression level of archive files. Not part of the format (any
/// gzip reader takes any level): the fastest, since a batch is gzipped on
/// every fold and read back rarely (recall rebuilds, exports, digests).
const LEVEL: Compression = Compression::fast();

/// Compressors kept between batches: making one allocates and clears a few
/// hundred KiB of tables, which cost as much as compressing a batch.
/// Bounded: folds of different users run on the blocking pool at once.
static SPARE_COMPRESSORS: Mutex<Vec<Compress>> = Mutex::new(Vec::new());
const MAX_SPARE_COMPRESSORS: usize = 2;

/// `data` as one gzip member (RFC 1952) — the header `flate2`'s
/// `GzEncoder` writes at [`LEVEL`], raw deflate, CRC-32 and length — with
/// a compressor reused across batches.
fn gzip(data: &[u8]) -> io::Result<Vec<u8>> {
    let spare = SPARE_COMPRESSORS.lock().unwrap_or_else(PoisonError::into_inner).pop();
    let mut deflate = spare.unwrap_or_else(|| Compress::new(LEVEL, false));
    deflate.reset();
    // Magic, deflate, no flags, no mtime, XFL 4 ("fastest"), OS unknown.
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
    loop {
        let consumed = usize::try_from(deflate.total_in())
            .unwrap_or(data.len())
            .min(data.len());
        // Room for progress on every round, so the loop ends.
        out.reserve(data.len() / 4 + 64);
        match deflate.compress_vec(&data[consumed..], &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => break,
            Ok(Status::Ok | Status::BufError) => {}
            Err(e) => return Err(io::Error::other(e)),
        }
    }
    let mut crc = Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    // ISIZE: the length modulo 2^32, as the format says.
    out.extend_from_slice(&crc.amount().to_le_bytes());
    let mut spares = SPARE_COMPRESSORS.lock().unwrap_or_else(PoisonError::into_inner);
    if spares.len() < MAX_SPARE_COMPRESSORS {
        spares.push(deflate);
    }
    Ok(out)
}

/// The user's archive files, sorted by name (that is, by earliest
/// timestamp). Temp leftovers and foreign files are not listed.
pub fn files(layout: &Layout, user: &SafeName) -> Result<Vec<PathBuf>, ArchiveError> {
    let dir = layout.archive_dir(user);
    let mut files = Vec::new();
    for entry in fsutil::list_dir(layout.state_root(), &dir)? {
        let path = entry.path();
        let is_batch = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX));
        if is_batch && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Every archived record of the user, chronological (stable by timestamp,
/// so records of one instant keep their file order).
pub fn read_all(layout: &Layout, user: &SafeName) -> Result<Vec<Record>, ArchiveError> {
    read_filtered(layout, user, None)
}

/// Archived records with `from <= ts < to`, chronological. Files whose
/// name shows their whole batch lies outside the range are not opened.
pub fn read_between(
    layout: &Layout,
    user: &SafeName,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Record>, ArchiveError> {
    read_filtered(layout, user, Some((from, to)))
}

fn read_filtered(
    layout: &Layout,
    user: &SafeName,
    range: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> Result<Vec<Record>, ArchiveError> {
    let mut records = Vec::new();
    // Digests of the lines of files already read. A crash between archiving
    // a batch and dropping it from STM, followed by a differently cut batch,
    // can put one record in two files; it is returned once.
    let mut seen: HashSet<[u8; 32]> = HashSet::new();
    let mut duplicates = 0usize;
    for path in files(layout, user)? {
        if let (Some((from, to)), Some((earliest, latest))) = (range, span_of(&path))
            // Names keep milliseconds, so the true latest is below `latest + 1ms`.
            && (latest + TimeDelta::milliseconds(1) <= from || earliest >= to)
        {
            continue;
        }
        let mut this_file = Vec::new();
        for (digest, record) in read_file(layout, &path)? {
            if seen.contains(&digest) {
                duplicates += 1;
            } else {
                this_file.push(digest);
                records.push(record);
            }
        }
        seen.extend(this_file);
    }
    if duplicates > 0 {
        tracing::info!(user = %user.log_id(), duplicates, "records archived in more than one batch were read once");
    }
    if let Some((from, to)) = range {
        records.retain(|r| from <= r.ts && r.ts < to);
    }
    records.sort_by_key(|r| r.ts);
    Ok(records)
}

/// The valid records of one archive batch, in file order (see
/// [`read_file`] for what is skipped). No line is hashed: the recall
/// rebuild reads every batch through here and drops repeats by its own
/// message key.
pub fn read_batch(layout: &Layout, path: &Path) -> Result<Vec<Record>, ArchiveError> {
    Ok(read_file_with(layout, path, |_, record| record)?.0)
}

/// [`read_batch`], and how many lines were skipped (malformed, or cut off
/// by a damaged stream: counted as one), for callers that report them.
pub fn read_batch_counted(layout: &Layout, path: &Path) -> Result<(Vec<Record>, usize), ArchiveError> {
    read_file_with(layout, path, |_, record| record)
}

/// The valid records of one archive file, each with the SHA-256 of its
/// line. Malformed lines and a corrupt gzip stream are logged and skipped:
/// one damaged file must not hide the rest of the user's history.
fn read_file(layout: &Layout, path: &Path) -> Result<Vec<([u8; 32], Record)>, ArchiveError> {
    Ok(read_file_with(layout, path, |line, record| (Sha256::digest(line).into(), record))?.0)
}

/// [`read_file`], keeping what `keep` makes of each valid line and record,
/// and counting the lines skipped.
fn read_file_with<T>(
    layout: &Layout,
    path: &Path,
    mut keep: impl FnMut(&[u8], Record) -> T,
) -> Result<(Vec<T>, usize), ArchiveError> {
    let file = fsutil::open_nofollow(layout.state_root(), path).map_err(FileError::with("open", path))?;
    let reader = BufReader::new(GzDecoder::new(file));
    let mut out = Vec::new();
    let mut skipped = 0usize;
    for (number, line) in reader.split(b'\n').enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!(file = %path.display(), line = number + 1, error = %e, "archive file is damaged; the rest of it is skipped");
                skipped += 1;
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(record) => out.push(keep(&line, record)),
            Err(e) => {
                skipped += 1;
                tracing::warn!(file = %path.display(), line = number + 1, error = %e, "malformed line in the archive; skipped")
            }
        }
    }
    Ok((out, skipped))
}

/// The earliest and latest timestamp of a batch, from its file name.
fn span_of(path: &Path) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let name = path.file_name()?.to_str()?;
    let middle = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let mut parts = middle.splitn(3, '-');
    let earliest = parse_name_ts(parts.next()?)?;
    let latest = parse_name_ts(parts.next()?)?;
    Some((earliest, latest))
}

fn parse_name_ts(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, NAME_TS).ok().map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::{Read, Write};

    /// Text that compresses but not to nothing, over several deflate
    /// blocks.
    fn sample(len: usize) -> Vec<u8> {
        let mut state = 0x2545_f491_u32;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let alphabet = b"abcdefgh {}\":,\n";
                alphabet[state as usize % alphabet.len()]
            })
            .collect()
    }

    /// What `zcat` reads: one gzip member whose CRC-32 and length match
    /// (the decoder checks both), with `GzEncoder`'s header, from a fresh
    /// compressor and from a reused one alike.
    #[test]
    fn archives_are_plain_gzip_from_fresh_and_reused_compressors() {
        for len in [1, 100, 70_000, 300_000] {
            let data = sample(len);
            let mut theirs = GzEncoder::new(Vec::new(), LEVEL);
            theirs.write_all(&data).unwrap();
            let theirs = theirs.finish().unwrap();
            for round in 0..2 {
                let ours = gzip(&data).unwrap();
                assert_eq!(ours[..10], theirs[..10], "{len} bytes, round {round}: the header");
                let mut back = Vec::new();
                GzDecoder::new(&ours[..]).read_to_end(&mut back).unwrap();
                assert!(back == data, "{len} bytes, round {round}: not the data back");
                let ratio = ours.len() as f64 / theirs.len() as f64;
                assert!(
                    ratio < 1.05,
                    "{len} bytes, round {round}: {ratio:.3} of GzEncoder's size"
                );
            }
        }
    }
}
