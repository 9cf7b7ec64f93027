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
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

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

/// Writes `records` as one gzipped JSONL batch and returns its path. The
/// same records always give the same path, so a retry replaces, never
/// duplicates.
pub fn write_batch(layout: &Layout, user: &SafeName, records: &[Record]) -> Result<PathBuf, ArchiveError> {
    let (Some(earliest), Some(latest)) = (records.iter().map(|r| r.ts).min(), records.iter().map(|r| r.ts).max())
    else {
        return Err(ArchiveError::EmptyBatch { user: user.clone() });
    };
    let mut jsonl = Vec::new();
    for record in records {
        serde_json::to_writer(&mut jsonl, record).map_err(|source| ArchiveError::Encode {
            user: user.clone(),
            source,
        })?;
        jsonl.push(b'\n');
    }
    let digest = Sha256::digest(&jsonl);
    let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name = format!(
        "{PREFIX}{}-{}-{short}{SUFFIX}",
        earliest.format(NAME_TS),
        latest.format(NAME_TS)
    );
    let path = layout.archive_batch_path(user, &name);

    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&jsonl)
        .and_then(|()| gz.finish())
        .and_then(|bytes| atomic_write(layout.state_root(), &path, &bytes))
        .map_err(FileError::with("write", &path))?;
    Ok(path)
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
        tracing::info!(user = %user, duplicates, "records archived in more than one batch were read once");
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
    read_file_with(layout, path, |_, record| record)
}

/// The valid records of one archive file, each with the SHA-256 of its
/// line. Malformed lines and a corrupt gzip stream are logged and skipped:
/// one damaged file must not hide the rest of the user's history.
fn read_file(layout: &Layout, path: &Path) -> Result<Vec<([u8; 32], Record)>, ArchiveError> {
    read_file_with(layout, path, |line, record| (Sha256::digest(line).into(), record))
}

/// [`read_file`], keeping what `keep` makes of each valid line and record.
fn read_file_with<T>(
    layout: &Layout,
    path: &Path,
    mut keep: impl FnMut(&[u8], Record) -> T,
) -> Result<Vec<T>, ArchiveError> {
    let file = fsutil::open_nofollow(layout.state_root(), path).map_err(FileError::with("open", path))?;
    let reader = BufReader::new(GzDecoder::new(file));
    let mut out = Vec::new();
    for (number, line) in reader.split(b'\n').enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!(file = %path.display(), line = number + 1, error = %e, "archive file is damaged; the rest of it is skipped");
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(record) => out.push(keep(&line, record)),
            Err(e) => {
                tracing::warn!(file = %path.display(), line = number + 1, error = %e, "malformed line in the archive; skipped")
            }
        }
    }
    Ok(out)
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
