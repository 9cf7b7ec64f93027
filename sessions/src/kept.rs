//! The files themselves, kept when the operator turns `attachments.keep`
//! on: the voice note, photo or document a user sent, beside the text
//! memory made of it (transcript, caption, a document's text). Off by
//! default: what is remembered is text.
//!
//! A kept file is the user's like the rest of their memory: on the files
//! `ltm/attachments/<user>/<id>.bin` (the bytes, mode 0600) and
//! `<id>.json` ([`KeptMeta`]); on Postgres a row with the bytes. It is in
//! their export, counted by `/session status`, listed by `/session
//! documents`, deleted by `/session forget <id>`, `clear all` and `mnemo
//! sessions forget`. The id is the same as a document's
//! ([`crate::documents::id_of`] the bytes), so forgetting a document
//! forgets its file too.

use crate::documents::is_id;
use crate::fsutil::{self, FileError};
use crate::layout::Layout;
use crate::names::SafeName;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a kept file was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptMeta {
    pub id: String,
    /// The name it was sent with (cleaned), or its kind.
    pub name: String,
    /// `voice`, `audio`, `photo` or `document`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    pub bytes: u64,
    pub added: DateTime<Utc>,
}

/// A kept file: what it was and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFile {
    pub meta: KeptMeta,
    pub data: Vec<u8>,
}

fn data_path(layout: &Layout, user: &SafeName, id: &str) -> Option<PathBuf> {
    is_id(id).then(|| layout.kept_path(user, &format!("{id}.bin")))
}

fn meta_path(layout: &Layout, user: &SafeName, id: &str) -> Option<PathBuf> {
    is_id(id).then(|| layout.kept_path(user, &format!("{id}.json")))
}

fn not_an_id(layout: &Layout, user: &SafeName) -> FileError {
    FileError::new(
        "name",
        layout.kept_dir(user),
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a kept file's id"),
    )
}

/// Keeps `file` unless one of its id is kept; whether it was new. The
/// bytes are written before the record, so a record always has its file.
pub fn keep(layout: &Layout, user: &SafeName, file: &KeptFile) -> Result<bool, FileError> {
    let id = &file.meta.id;
    let (data, meta) = match (data_path(layout, user, id), meta_path(layout, user, id)) {
        (Some(d), Some(m)) => (d, m),
        _ => return Err(not_an_id(layout, user)),
    };
    let root = layout.state_root();
    if fsutil::read_string_if_exists(root, &meta)?.is_some() {
        return Ok(false);
    }
    let dir = layout.kept_dir(user);
    fsutil::create_private_dir_all(root, &dir).map_err(FileError::with("create", &dir))?;
    fsutil::atomic_write(root, &data, &file.data).map_err(FileError::with("write", &data))?;
    let json = serde_json::to_vec_pretty(&file.meta).map_err(|e| FileError::new("encode", &meta, e.into()))?;
    fsutil::atomic_write(root, &meta, &json).map_err(FileError::with("write", &meta))?;
    Ok(true)
}

/// The user's kept files, oldest first; an unreadable record is skipped
/// with a warning.
pub fn list(layout: &Layout, user: &SafeName) -> Result<Vec<KeptMeta>, FileError> {
    let mut out = Vec::new();
    for id in crate::documents::ids_in(layout, &layout.kept_dir(user), "json")? {
        out.extend(read_meta(layout, user, &id)?);
    }
    out.sort_by(|a, b| a.added.cmp(&b.added).then_with(|| a.id.cmp(&b.id)));
    Ok(out)
}

/// The record of kept file `id`; `None` when there is none, or it does not
/// parse (warned).
fn read_meta(layout: &Layout, user: &SafeName, id: &str) -> Result<Option<KeptMeta>, FileError> {
    let Some(path) = meta_path(layout, user, id) else {
        return Ok(None);
    };
    let Some(text) = fsutil::read_string_if_exists(layout.state_root(), &path)? else {
        return Ok(None);
    };
    match serde_json::from_str::<KeptMeta>(&text) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) => {
            tracing::warn!(user = %user.log_id(), error = %e, "a kept file's record does not parse; skipped");
            Ok(None)
        }
    }
}

/// Kept file `id` with its bytes, if there is one.
pub fn read(layout: &Layout, user: &SafeName, id: &str) -> Result<Option<KeptFile>, FileError> {
    let (Some(meta), Some(path)) = (read_meta(layout, user, id)?, data_path(layout, user, id)) else {
        return Ok(None);
    };
    let data = fsutil::read_nofollow(layout.state_root(), &path).map_err(FileError::with("read", &path))?;
    Ok(Some(KeptFile { meta, data }))
}

/// Deletes kept file `id`; whether there was one.
pub fn remove(layout: &Layout, user: &SafeName, id: &str) -> Result<bool, FileError> {
    let (Some(data), Some(meta)) = (data_path(layout, user, id), meta_path(layout, user, id)) else {
        return Ok(false);
    };
    let root = layout.state_root();
    let mut found = false;
    // The record first: a file without its record is never listed.
    for path in [meta, data] {
        match fsutil::remove_nofollow(root, &path) {
            Ok(()) => found = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(FileError::new("remove", &path, e)),
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_kept_once_listed_read_back_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "console");
        let user = SafeName::of("ana");
        let data = b"\xff\xd8\xffjpeg".to_vec();
        let file = KeptFile {
            meta: KeptMeta {
                id: crate::documents::id_of(&data),
                name: "photo".into(),
                kind: "photo".into(),
                mime: Some("image/jpeg".into()),
                bytes: data.len() as u64,
                added: "2026-12-01T10:00:00Z".parse().unwrap(),
            },
            data,
        };
        assert!(keep(&layout, &user, &file).unwrap());
        assert!(!keep(&layout, &user, &file).unwrap());
        assert_eq!(list(&layout, &user).unwrap(), vec![file.meta.clone()]);
        assert_eq!(read(&layout, &user, &file.meta.id).unwrap(), Some(file.clone()));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(layout.kept_path(&user, &format!("{}.bin", file.meta.id)))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o077, 0, "private to the bot's account");
        for hostile in ["../x", "", "a\0"] {
            assert!(!remove(&layout, &user, hostile).unwrap());
        }
        assert!(remove(&layout, &user, &file.meta.id).unwrap());
        assert!(list(&layout, &user).unwrap().is_empty());
    }
}
