//! One owner's dense vectors (with `recall.embeddings` on): in memory for
//! the cosine search, and for a user also on disk as
//! `recall/<user>/vectors.bin`, next to the BM25 index and, like it,
//! derived data — lost or damaged, it is computed again.
//!
//! The file: one JSON header line `{"version":1,"model":"…","dims":N}`,
//! then fixed-size records, each a document key (u64, little endian) and
//! its unit-length vector (N × f32, little endian). Records are appended
//! with one unsynced write per batch; a torn last record (a crash
//! mid-append) is cut off at load. Vectors of another model or dimension
//! are dropped whole: they cannot be compared with the new ones.
//!
//! Scope is the owner's: a search walks this owner's vectors only, and
//! returns documents the owner's BM25 index still holds (a vector whose
//! document was removed is never returned). No network, no clock.

use super::bm25::Bm25;
use crate::fsutil::{atomic_write, open_append_nofollow, read_nofollow, remove_nofollow};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

const VERSION: u32 = 1;
pub const FILE: &str = "vectors.bin";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    version: u32,
    model: String,
    dims: usize,
}

/// Where a user's vectors are stored; none for `_shared` (its notes are
/// few and re-read from their files, like its BM25 index).
#[derive(Debug, Clone)]
pub struct VectorFile {
    /// The state root, below which no link is followed.
    pub root: PathBuf,
    pub path: PathBuf,
}

/// One owner's vectors.
#[derive(Debug, Default)]
pub struct Vectors {
    model: String,
    dims: usize,
    keys: Vec<u64>,
    /// `keys.len() × dims` values, each vector of unit length (or zero).
    data: Vec<f32>,
    held: FxHashSet<u64>,
    file: Option<VectorFile>,
    /// Documents below this id (of [`Bm25::generation`] `cursor.0`) are
    /// held, removed, or never embedded (pinned): the fill walks on from
    /// here instead of from the start.
    cursor: (u32, u32),
}

impl Vectors {
    /// Vectors kept in memory only.
    pub fn in_memory() -> Vectors {
        Vectors::default()
    }

    /// The vectors stored in `file`; empty (and the file removed, with one
    /// warning) when it is unusable.
    pub fn load(file: VectorFile) -> Vectors {
        let mut vectors = Vectors {
            file: Some(file.clone()),
            ..Vectors::default()
        };
        let bytes = match read_nofollow(&file.root, &file.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return vectors,
            Err(e) => {
                tracing::warn!(file = %file.path.display(), error = %e, "recall vectors unreadable; they are computed again");
                return vectors;
            }
        };
        match parse(&bytes) {
            Ok((header, body, torn)) => {
                vectors.model = header.model;
                vectors.dims = header.dims;
                let record = 8 + 4 * vectors.dims;
                for chunk in body.chunks_exact(record) {
                    let (key, values) = chunk.split_at(8);
                    let key = u64::from_le_bytes(key.try_into().unwrap_or([0; 8]));
                    if vectors.held.insert(key) {
                        vectors.keys.push(key);
                        vectors.data.extend(
                            values
                                .chunks_exact(4)
                                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                        );
                    }
                }
                if torn {
                    tracing::warn!(file = %file.path.display(), "recall vectors end in a half-written record; it is cut off");
                    vectors.rewrite();
                }
            }
            Err(reason) => {
                tracing::warn!(file = %file.path.display(), %reason, "recall vectors unusable; they are computed again");
                let _ = remove_nofollow(&file.root, &file.path);
            }
        }
        vectors
    }

    /// True when the vectors held are of `model` but not of `dims`
    /// dimensions: the model behind the name changed (a restart with
    /// another build of it), so they can no longer be compared.
    pub fn stale(&self, model: &str, dims: usize) -> bool {
        !self.keys.is_empty() && self.model == model && self.dims != dims
    }

    /// Forgets every vector, in memory and on disk (they are computed
    /// again).
    pub fn clear(&mut self) {
        if let Some(file) = &self.file {
            tracing::warn!(file = %file.path.display(), model = %self.model, dims = self.dims, "recall vectors are of another length than the endpoint now answers; they are computed again");
            let _ = remove_nofollow(&file.root, &file.path);
        }
        let file = self.file.take();
        *self = Vectors {
            file,
            ..Vectors::default()
        };
    }

    /// Bytes held in memory (for the cache's budget).
    pub fn resident_bytes(&self) -> usize {
        self.keys.capacity() * 8 + self.data.capacity() * 4 + self.held.capacity() * 9
    }

    /// Number of vectors held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The documents of `index` that still need a vector of `model`, at
    /// most `limit`, with their texts (messages and notes; never what is in
    /// every context anyway).
    pub fn pending(&mut self, index: &Bm25, model: &str, limit: usize) -> Vec<(u64, String)> {
        if self.model != model {
            self.cursor = (index.generation(), 0);
        }
        if self.cursor.0 != index.generation() {
            self.cursor = (index.generation(), 0);
        }
        let wanted = |id: u32| {
            index.is_live(id) && {
                let doc = index.doc(id);
                !doc.source.always_in_context() && (self.model != model || !self.held.contains(&doc.key))
            }
        };
        let bound = index.id_bound();
        while self.cursor.1 < bound && !wanted(self.cursor.1) {
            self.cursor.1 += 1;
        }
        (self.cursor.1..bound)
            .filter(|&id| wanted(id))
            .take(limit)
            .map(|id| {
                let doc = index.doc(id);
                (doc.key, doc.text.clone())
            })
            .collect()
    }

    /// Adds the vectors of `keys` computed by `model` (normalised to unit
    /// length) and appends them to the file. Vectors of another model or
    /// length than those held replace them all.
    pub fn add(&mut self, model: &str, keys: &[u64], vectors: &[Vec<f32>]) {
        let Some(dims) = vectors.first().map(Vec::len) else {
            return;
        };
        if self.model != model || self.dims != dims {
            let file = self.file.take();
            *self = Vectors {
                model: model.to_string(),
                dims,
                file,
                ..Vectors::default()
            };
            self.rewrite();
        }
        let mut records = Vec::new();
        for (key, vector) in keys.iter().zip(vectors) {
            if vector.len() != dims || !self.held.insert(*key) {
                continue;
            }
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            let scale = if norm > 0.0 && norm.is_finite() {
                1.0 / norm
            } else {
                0.0
            };
            self.keys.push(*key);
            records.extend_from_slice(&key.to_le_bytes());
            for x in vector {
                let x = x * scale;
                self.data.push(x);
                records.extend_from_slice(&x.to_le_bytes());
            }
        }
        if let Some(file) = &self.file
            && !records.is_empty()
        {
            let written = open_append_nofollow(&file.root, &file.path).and_then(|mut f| f.write_all(&records));
            if let Err(e) = written {
                tracing::warn!(file = %file.path.display(), error = %e, "recall vectors not stored; they are computed again at the next load");
                let _ = remove_nofollow(&file.root, &file.path);
            }
        }
    }

    /// The `limit` documents of `index` nearest to `query` (a vector of
    /// `model`), best first, leaving out `skip`; empty when `query` is of
    /// another model or length than the vectors held.
    pub fn search(&self, index: &Bm25, model: &str, query: &[f32], limit: usize, skip: &[u32]) -> Vec<(u32, f32)> {
        if self.model != model || self.dims != query.len() || self.dims == 0 || limit == 0 {
            return Vec::new();
        }
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm <= 0.0 || !norm.is_finite() {
            return Vec::new();
        }
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(limit + 1);
        for (key, vector) in self.keys.iter().zip(self.data.chunks_exact(self.dims)) {
            let cosine = dot(vector, query) / norm;
            if cosine <= 0.0 || best.len() == limit && best[limit - 1].1 >= cosine {
                continue;
            }
            // A removed document has no id; scope is this owner's index.
            let Some(id) = index.id_of(*key) else { continue };
            if skip.contains(&id) {
                continue;
            }
            let at = best.partition_point(|(_, c)| *c >= cosine);
            best.insert(at, (id, cosine));
            best.truncate(limit);
        }
        best
    }

    /// Writes the header and every held vector again (after a cut-off
    /// tail or a change of model).
    fn rewrite(&self) {
        let Some(file) = &self.file else { return };
        let header = Header {
            version: VERSION,
            model: self.model.clone(),
            dims: self.dims,
        };
        // Plain data: serialising cannot fail.
        let mut bytes = serde_json::to_vec(&header).unwrap_or_default();
        bytes.push(b'\n');
        for (key, vector) in self.keys.iter().zip(self.data.chunks_exact(self.dims.max(1))) {
            bytes.extend_from_slice(&key.to_le_bytes());
            for x in vector {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        if let Err(e) = atomic_write(&file.root, &file.path, &bytes) {
            tracing::warn!(file = %file.path.display(), error = %e, "recall vectors not stored; they are computed again at the next load");
            let _ = remove_nofollow(&file.root, &file.path);
        }
    }
}

/// `a · b` in eight independent sums, so the additions need not wait for
/// each other (one running sum is a chain the compiler may not reorder).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The header, the whole records, and whether a torn record followed.
fn parse(bytes: &[u8]) -> Result<(Header, &[u8], bool), String> {
    let end = bytes.iter().position(|b| *b == b'\n').ok_or("no header line")?;
    let header: Header = serde_json::from_slice(&bytes[..end]).map_err(|e| format!("header: {e}"))?;
    if header.version != VERSION {
        return Err(format!("version {} (this build uses {VERSION})", header.version));
    }
    if header.dims == 0 || header.dims > 1 << 16 {
        return Err(format!("{} dimensions", header.dims));
    }
    let body = &bytes[end + 1..];
    let record = 8 + 4 * header.dims;
    let whole = body.len() / record * record;
    Ok((header, &body[..whole], whole != body.len()))
}

/// `vectors.bin` in a user's recall folder (`Layout::recall_dir`).
#[allow(
    clippy::disallowed_methods,
    reason = "the recall store names the files of its own folder"
)]
pub fn file_in(root: &Path, dir: &Path) -> VectorFile {
    VectorFile {
        root: root.to_path_buf(),
        path: dir.join(FILE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::bm25::Source;
    use crate::recall::bm25::tests::at;

    fn index_of(texts: &[&str]) -> Bm25 {
        let mut index = Bm25::default();
        for (k, text) in texts.iter().enumerate() {
            index.add(k as u64, at(1), Source::User, (*text).to_string());
        }
        index
    }

    #[test]
    fn the_nearest_live_document_comes_first_and_a_removed_one_never() {
        let mut index = index_of(&["a", "b", "c"]);
        let mut vectors = Vectors::in_memory();
        vectors.add("m", &[0, 1, 2], &[vec![1.0, 0.0], vec![0.7, 0.7], vec![0.0, 1.0]]);
        let hits = vectors.search(&index, "m", &[1.0, 0.1], 3, &[]);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [0, 1, 2]);
        index.remove(0);
        let hits = vectors.search(&index, "m", &[1.0, 0.1], 3, &[]);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 2]);
        assert!(vectors.search(&index, "other-model", &[1.0, 0.1], 3, &[]).is_empty());
        assert!(vectors.search(&index, "m", &[1.0, 0.1, 0.0], 3, &[]).is_empty());
        assert!(vectors.stale("m", 3) && !vectors.stale("m", 2) && !vectors.stale("m2", 3));
        vectors.clear();
        assert_eq!(vectors.len(), 0);
        assert_eq!(vectors.pending(&index, "m", 5).len(), 2);
    }

    #[test]
    fn the_eight_lane_dot_product_is_the_plain_one() {
        let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..21).map(|i| 1.0 - i as f32 * 0.1).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-3, "{} vs {plain}", dot(&a, &b));
    }

    #[test]
    fn pending_walks_on_and_a_new_model_starts_over() {
        let index = index_of(&["a", "b", "c"]);
        let mut vectors = Vectors::in_memory();
        let first = vectors.pending(&index, "m", 2);
        assert_eq!(first.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 1]);
        vectors.add("m", &[0, 1], &[vec![1.0], vec![1.0]]);
        assert_eq!(
            vectors.pending(&index, "m", 2).iter().map(|p| p.0).collect::<Vec<_>>(),
            [2]
        );
        vectors.add("m", &[2], &[vec![1.0]]);
        assert!(vectors.pending(&index, "m", 2).is_empty());
        assert_eq!(vectors.pending(&index, "m2", 5).len(), 3);
    }

    #[test]
    #[allow(clippy::disallowed_methods, reason = "a test builds its fixture path")]
    fn the_file_survives_a_reload_and_a_torn_record_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let file = file_in(dir.path(), dir.path());
        let mut vectors = Vectors::load(file.clone());
        vectors.add("m", &[1, 2], &[vec![3.0, 4.0], vec![0.0, 2.0]]);
        let mut bytes = std::fs::read(&file.path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&file.path, &bytes).unwrap();
        let again = Vectors::load(file.clone());
        assert_eq!(again.len(), 2);
        assert_eq!(&again.data[..2], &[0.6, 0.8]);
        assert_eq!(std::fs::read(&file.path).unwrap().len(), bytes.len() - 3);
        std::fs::write(&file.path, b"garbage").unwrap();
        assert_eq!(Vectors::load(file.clone()).len(), 0);
        assert!(!file.path.exists(), "an unusable file is removed");
    }
}
