//! The rolling summary file `stm/<user>/summary.md`: its frontmatter (who,
//! when, how many messages were folded, the fold marker, the count of
//! summarizer failures in a row) and its body (the summary text the context
//! builder injects).
//!
//! This module reads and writes that one file, atomically. It decides nothing
//! about when or what to fold: that is [`crate::compaction`]'s job, and the
//! meaning of [`FoldMarker`] is explained there.

use crate::frontmatter::{self, Document, FrontmatterError};
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The frontmatter of `summary.md`. Unknown fields an operator added are
/// kept on rewrite (`extra`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryMeta {
    /// The user's raw id, for people reading the file.
    #[serde(default)]
    pub user_id: String,
    /// When messages were last folded into this summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_compacted: Option<DateTime<Utc>>,
    /// How many messages have left the log through this summary, in total.
    #[serde(default)]
    pub messages_compacted: u64,
    /// The last batch of messages that left the log (see [`FoldMarker`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_folded: Option<FoldMarker>,
    /// Summarizer failures in a row; persisted so that a restart does not
    /// reset the way to the fallback summary.
    #[serde(default)]
    pub failures: u32,
    /// True while the body holds fallback bullets the summarizer has not yet
    /// folded into prose.
    #[serde(default)]
    pub fallback: bool,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_yaml_ng::Value>,
}

/// Marks the last batch of messages that left the short-term log: written to
/// `summary.md` *before* the batch is archived and dropped from the log, so
/// that a batch still at the head of the log after a crash is recognised as
/// already folded (see [`crate::compaction`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldMarker {
    /// Timestamp of the batch's last message.
    pub ts: DateTime<Utc>,
    /// Id of the batch's last message.
    pub msg_id: String,
    /// Number of messages in the batch.
    pub batch_len: usize,
    /// SHA-256 (hex) of the batch's JSONL lines; together with `batch_len` it
    /// identifies the batch exactly, even if message ids repeat.
    pub batch_sha256: String,
}

/// The whole `summary.md`.
pub type SummaryFile = Document<SummaryMeta>;

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
}

/// Reads `summary.md`; `Ok(None)` when the user has none yet.
pub fn read(layout: &Layout, user: &SafeName) -> Result<Option<SummaryFile>, SummaryError> {
    let path = layout.summary_path(user);
    let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &path)? else {
        return Ok(None);
    };
    Ok(Some(frontmatter::parse(&path, &text)?))
}

/// Like [`read`], but a file whose frontmatter does not parse is not an
/// error: its whole text becomes the body of a fresh summary (with a
/// warning), so the user keeps the summary text, compaction can go on
/// bounding the log, and the next write leaves a valid file that still holds
/// everything the broken one said. Only the fold marker and failure count of
/// the broken file are lost; they are bookkeeping, not memory.
pub fn read_or_salvage(layout: &Layout, user: &SafeName) -> Result<Option<SummaryFile>, SummaryError> {
    match read(layout, user) {
        Err(SummaryError::Frontmatter(e)) => {
            tracing::warn!(error = %e, "summary.md unreadable; its text is kept as the summary body");
            let path = layout.summary_path(user);
            let text =
                fsutil::read_to_string_nofollow(layout.state_root(), &path).map_err(FileError::with("read", &path))?;
            let mut salvaged = empty(user);
            salvaged.body = text;
            Ok(Some(salvaged))
        }
        other => other,
    }
}

/// The summary text for the context builder: `None` when there is no
/// summary or its body is blank (a file that only carries a failure count).
/// A file with broken frontmatter is salvaged (see [`read_or_salvage`]).
pub fn read_body(layout: &Layout, user: &SafeName) -> Result<Option<String>, SummaryError> {
    Ok(read_or_salvage(layout, user)?
        .map(|doc| doc.body.trim().to_string())
        .filter(|b| !b.is_empty()))
}

/// Replaces `summary.md` atomically (unique temp, fsync, rename).
pub fn write(layout: &Layout, user: &SafeName, file: &SummaryFile) -> Result<(), SummaryError> {
    let path = layout.summary_path(user);
    let text = frontmatter::render(&path, &file.meta, &file.body)?;
    Ok(fsutil::replace(layout.state_root(), &path, text.as_bytes())?)
}

/// A fresh, empty summary for `user`.
pub fn empty(user: &SafeName) -> SummaryFile {
    let meta = SummaryMeta {
        user_id: user.decode().unwrap_or_else(|| user.to_string()),
        ..SummaryMeta::default()
    };
    Document {
        meta,
        body: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_written_summary_reads_back_with_its_marker() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        assert!(read(&layout, &user).unwrap().is_none());
        assert_eq!(read_body(&layout, &user).unwrap(), None);

        let mut file = empty(&user);
        file.body = "They talked about TOEIC.\n".into();
        file.meta.messages_compacted = 40;
        file.meta.last_folded = Some(FoldMarker {
            ts: Utc.with_ymd_and_hms(2026, 3, 23, 3, 28, 32).unwrap(),
            msg_id: "123".into(),
            batch_len: 40,
            batch_sha256: "ab".repeat(32),
        });
        write(&layout, &user, &file).unwrap();
        assert_eq!(read(&layout, &user).unwrap(), Some(file));
        assert_eq!(
            read_body(&layout, &user).unwrap().as_deref(),
            Some("They talked about TOEIC.")
        );
    }

    #[test]
    fn operator_fields_survive_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let path = layout.summary_path(&user);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "---\nuser_id: U1\nreviewed_by: ops\n---\n\nold\n").unwrap();
        let mut file = read(&layout, &user).unwrap().unwrap();
        file.body = "new\n".into();
        write(&layout, &user, &file).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("reviewed_by: ops"));
    }

    #[test]
    fn a_summary_with_broken_frontmatter_is_salvaged_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let path = layout.summary_path(&user);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "---\nmessages_compacted: [\n---\n\nThey like tea.\n").unwrap();
        assert!(matches!(read(&layout, &user), Err(SummaryError::Frontmatter(_))));
        let body = read_body(&layout, &user).unwrap().unwrap();
        assert!(body.contains("They like tea.") && body.contains("messages_compacted: ["));
        let salvaged = read_or_salvage(&layout, &user).unwrap().unwrap();
        write(&layout, &user, &salvaged).unwrap();
        assert!(read(&layout, &user).unwrap().unwrap().body.contains("They like tea."));
    }

    #[test]
    fn a_blank_body_is_no_summary() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let mut file = empty(&user);
        file.meta.failures = 2;
        file.body = "  \n".into();
        write(&layout, &user, &file).unwrap();
        assert_eq!(read_body(&layout, &user).unwrap(), None);
    }
}
