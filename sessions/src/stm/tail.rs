//! The last N records of a log, read backwards from the end in fixed-size
//! blocks, so the cost follows N (and the lines' length), never the file's
//! size. Read-only; malformed lines are skipped with a warning.

use super::read::{Line, parse_line};
use crate::record::Record;

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes read per step. Large enough that a typical context window (tens of
/// short messages) needs one or two reads.
const BLOCK: u64 = 64 * 1024;

/// The last `n` valid records of the log at `path`, oldest first. A missing
/// file is an empty log; a link below `root` is refused.
pub(super) fn tail(root: &Path, path: &Path, n: usize) -> io::Result<Vec<Record>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let file = match crate::fsutil::open_nofollow(root, path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut pos = file.metadata()?.len();
    // Capped: `n` may be a generous "everything" such as `usize::MAX`.
    let mut newest_first = Vec::with_capacity(n.min(1024));
    // Bytes of the current, not yet complete, first line of what was read
    // (its start lies further back in the file).
    let mut partial: Vec<u8> = Vec::new();
    // Lines seen from the end, for warnings ("line 3 from the end").
    let mut from_end = 0usize;

    while pos > 0 && newest_first.len() < n {
        let start = pos.saturating_sub(BLOCK);
        // `pos - start` is at most BLOCK (64 KiB), so it fits in usize.
        let mut chunk = vec![0u8; (pos - start) as usize];
        file.read_exact_at(&mut chunk, start)?;
        chunk.extend_from_slice(&partial);
        pos = start;

        // Every line after the first `\n` of the chunk is complete; the part
        // before it continues further back, unless we reached the file start.
        let (head, complete): (&[u8], &[u8]) = if pos == 0 {
            (&[], &chunk)
        } else {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], &chunk[i + 1..]),
                None => (&chunk, &[]),
            }
        };
        for line in complete.rsplit(|&b| b == b'\n') {
            if newest_first.len() == n {
                break;
            }
            take_line(line, path, &mut from_end, &mut newest_first);
        }
        partial = head.to_vec();
    }
    newest_first.reverse();
    Ok(newest_first)
}

fn take_line(line: &[u8], path: &Path, from_end: &mut usize, out: &mut Vec<Record>) {
    match parse_line(line) {
        Line::Blank => {}
        Line::Valid(record) => {
            *from_end += 1;
            out.push(record);
        }
        Line::Malformed => {
            *from_end += 1;
            tracing::warn!(file = %path.display(), line_from_end = *from_end, "malformed line in the short-term log; skipped");
        }
    }
}
