//! Rotation of the broker's own log files (`<state>/logs/*.log*`): files
//! older than `scheduler.logRotateDays` are gzipped into
//! `<state>/logs/archive/` and the original is removed only after the gzip is
//! fsynced and in place.
//!
//! It touches only regular files directly in the logs folder whose name
//! contains `.log` and is not already `.gz`; it never reads or writes session
//! memory. Running it twice, or from two channels' maintenance at once, is
//! harmless: a file already rotated is found and only the original removed.

use crate::fsutil::{self, FileError};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The folder rotated logs go to. The one place this path is built
/// (`Layout` knows `<state>/logs` but not its archive).
#[allow(
    clippy::disallowed_methods,
    reason = "the log rotation owns `<state>/logs`, which is no channel's"
)]
pub fn logs_archive_dir(logs_dir: &Path) -> PathBuf {
    logs_dir.join("archive")
}

/// A log that could not be rotated; the original is left untouched.
#[derive(Debug, thiserror::Error)]
#[error("{0} (the log is left in place)")]
pub struct RotateError(#[from] pub FileError);

/// What a rotation pass did.
#[derive(Debug, Default)]
pub struct Rotation {
    /// Originals now gzipped in the archive folder.
    pub rotated: Vec<PathBuf>,
    pub errors: Vec<RotateError>,
}

/// Gzips every log in `logs_dir` older than `keep_days` at `now`. A log's age
/// comes from the date in its name (`mnemo.log.2026-11-29` is a day's file,
/// old once that day has ended `keep_days` ago, read as UTC like the appender
/// writes it); a name without a date falls back to the file's last
/// modification, so the file being written now is never rotated.
pub fn rotate_logs(logs_dir: &Path, now: DateTime<Utc>, keep_days: u32) -> Rotation {
    let mut out = Rotation::default();
    // `<state>/logs` is no channel's folder: only the opens refuse links.
    let entries = match fsutil::list_dir(logs_dir, logs_dir) {
        Ok(entries) => entries,
        Err(e) => {
            out.errors.push(e.into());
            return out;
        }
    };
    let keep = Duration::days(i64::from(keep_days));
    for entry in entries {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if !is_log_name(&name) || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let ended = match date_in_name(&name) {
            Some(day) => day.succ_opt().unwrap_or(day).and_hms_opt(0, 0, 0).map(|t| t.and_utc()),
            None => entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(DateTime::<Utc>::from),
        };
        if ended.is_none_or(|ended| now - ended < keep) {
            continue;
        }
        match rotate_one(&path, &name, logs_dir) {
            Ok(()) => out.rotated.push(path),
            Err(source) => out.errors.push(FileError::new("rotate", path, source).into()),
        }
    }
    out.rotated.sort();
    out
}

fn is_log_name(name: &str) -> bool {
    name.contains(".log") && !name.ends_with(".gz") && !name.starts_with(fsutil::TEMP_PREFIX) && !name.starts_with('.')
}

/// The first `YYYY-MM-DD` in a file name, e.g. the suffix tracing-appender
/// adds to daily files.
fn date_in_name(name: &str) -> Option<NaiveDate> {
    let bytes = name.as_bytes();
    (0..bytes.len().saturating_sub(9)).find_map(|i| {
        let part = name.get(i..i + 10)?;
        let shaped = part.bytes().enumerate().all(|(j, b)| {
            if j == 4 || j == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
        if shaped {
            NaiveDate::parse_from_str(part, "%Y-%m-%d").ok()
        } else {
            None
        }
    })
}

/// Gzips one log to `archive/<name>.gz` (or `<name>.N.gz` if a different
/// file already has that name), fsyncs it, renames it into place, fsyncs
/// the folder, and only then removes the original. If an identical archive
/// already exists (a crash after the rename), only the original is removed.
#[allow(
    clippy::disallowed_methods,
    reason = "the log rotation owns `<state>/logs`, which is no channel's"
)]
fn rotate_one(path: &Path, name: &str, logs_dir: &Path) -> io::Result<()> {
    let archive = logs_archive_dir(logs_dir);
    fsutil::create_private_dir_all(logs_dir, &archive)?;
    let digest = sha256_of(fsutil::open_nofollow(logs_dir, path)?)?;
    let mut n = 0u32;
    let target = loop {
        let candidate = archive.join(if n == 0 {
            format!("{name}.gz")
        } else {
            format!("{name}.{n}.gz")
        });
        match File::open(&candidate) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => break Some(candidate),
            Err(e) => return Err(e),
            Ok(existing) => {
                if sha256_of(GzDecoder::new(existing)).ok() == Some(digest) {
                    break None;
                }
            }
        }
        n += 1;
    };
    if let Some(target) = target {
        write_gzip(path, &target)?;
        fsutil::sync_dir(&archive)?;
    }
    fs::remove_file(path)?;
    fsutil::sync_dir(logs_dir)
}

fn write_gzip(source: &Path, target: &Path) -> io::Result<()> {
    let tmp = fsutil::unique_temp_path(target);
    let result = (|| {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(fsutil::PRIVATE_FILE)
            .open(&tmp)?;
        let mut gz = GzEncoder::new(BufWriter::new(file), Compression::default());
        io::copy(&mut BufReader::new(File::open(source)?), &mut gz)?;
        let file = gz.finish()?.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn sha256_of(mut reader: impl Read) -> io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize().into());
        }
        hasher.write_all(&buf[..n])?;
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::disallowed_methods,
        reason = "test fixtures build their own paths in a temp folder"
    )]
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn gunzip(path: &Path) -> String {
        let mut out = String::new();
        GzDecoder::new(File::open(path).unwrap())
            .read_to_string(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn daily_logs_rotate_once_their_day_ended_keep_days_ago() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        fs::write(logs.join("mnemo.log.2026-11-21"), "old day\n").unwrap();
        fs::write(logs.join("mnemo.log.2026-11-22"), "kept day\n").unwrap();
        // 2026-11-21 ended at 11-22T00:00Z; seven days later is 11-29T00:00Z.
        let rotation = rotate_logs(logs, utc("2026-11-29T00:00:00Z"), 7);
        assert!(rotation.errors.is_empty(), "{:?}", rotation.errors);
        assert_eq!(rotation.rotated, vec![logs.join("mnemo.log.2026-11-21")]);
        assert!(!logs.join("mnemo.log.2026-11-21").exists());
        assert_eq!(gunzip(&logs.join("archive/mnemo.log.2026-11-21.gz")), "old day\n");
        assert!(logs.join("mnemo.log.2026-11-22").exists());

        let just_before = rotate_logs(logs, utc("2026-11-29T23:59:59Z"), 7);
        assert!(just_before.rotated.is_empty());
        assert_eq!(rotate_logs(logs, utc("2026-11-30T00:00:00Z"), 7).rotated.len(), 1);
    }

    #[test]
    fn undated_logs_use_their_modification_time_and_other_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        fs::write(logs.join("mnemo.log"), "current\n").unwrap();
        fs::write(logs.join("notes.txt"), "not a log\n").unwrap();
        fs::write(logs.join("old.log.2020-01-01.gz"), "already compressed").unwrap();
        let modified = File::open(logs.join("mnemo.log"))
            .unwrap()
            .metadata()
            .unwrap()
            .modified()
            .unwrap();
        let modified = DateTime::<Utc>::from(modified);
        assert!(
            rotate_logs(logs, modified + Duration::days(7) - Duration::seconds(1), 7)
                .rotated
                .is_empty()
        );
        let rotation = rotate_logs(logs, modified + Duration::days(7), 7);
        assert_eq!(rotation.rotated, vec![logs.join("mnemo.log")]);
        assert!(logs.join("notes.txt").exists() && logs.join("old.log.2020-01-01.gz").exists());
    }

    #[test]
    fn a_rotation_interrupted_after_the_rename_only_removes_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        fs::write(logs.join("mnemo.log.2026-01-01"), "same\n").unwrap();
        fs::create_dir_all(logs_archive_dir(logs)).unwrap();
        write_gzip(
            &logs.join("mnemo.log.2026-01-01"),
            &logs.join("archive/mnemo.log.2026-01-01.gz"),
        )
        .unwrap();
        let rotation = rotate_logs(logs, utc("2026-02-01T00:00:00Z"), 7);
        assert_eq!(rotation.rotated.len(), 1);
        let archived: Vec<_> = fs::read_dir(logs_archive_dir(logs)).unwrap().collect();
        assert_eq!(archived.len(), 1, "no duplicate archive");
    }

    #[test]
    fn a_different_log_with_an_archived_name_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        fs::write(logs.join("mnemo.log.2026-01-01"), "first\n").unwrap();
        rotate_logs(logs, utc("2026-02-01T00:00:00Z"), 7);
        fs::write(logs.join("mnemo.log.2026-01-01"), "second\n").unwrap();
        rotate_logs(logs, utc("2026-02-01T00:00:00Z"), 7);
        assert_eq!(gunzip(&logs.join("archive/mnemo.log.2026-01-01.gz")), "first\n");
        assert_eq!(gunzip(&logs.join("archive/mnemo.log.2026-01-01.1.gz")), "second\n");
    }
}
