//! Links on the files: `<state>/people/links.json` (mode 0600, folder
//! 0700), one document with the links, the codes (hashed) and the failed
//! tries, changed read-modify-write under an exclusive lock on
//! `links.json.lock` (a broker and an operator's `mnemo sessions forget`
//! never lose each other's change) and replaced atomically. Expired codes
//! and old failures are dropped at each change. Read on each message
//! through a cache that looks at the file's size and time only.

use super::{Account, KEEP_FAILURES, Link, LinkStore};
use crate::fsutil::{atomic_write, create_private_dir_all, read_if_exists};
use crate::layout::Layout;
use crate::store::StoreError;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct LinksFile {
    links: Vec<StoredLink>,
    codes: Vec<StoredCode>,
    failures: Vec<Failure>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredLink {
    account: Account,
    home: Account,
    linked_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredCode {
    /// SHA-256 of the code (`people::code_hash`), never the code.
    sha256: String,
    account: Account,
    expires_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Failure {
    account: Account,
    at: DateTime<Utc>,
}

/// The links of one state folder.
pub struct FileLinks {
    root: PathBuf,
    path: PathBuf,
    /// The file as last read, with the size and time it had.
    cache: Mutex<Option<(Stamp, LinksFile)>>,
}

type Stamp = (u64, Option<std::time::SystemTime>);

impl FileLinks {
    pub fn new(state_root: &Path) -> FileLinks {
        FileLinks {
            root: state_root.to_path_buf(),
            path: Layout::links_path(state_root),
            cache: Mutex::new(None),
        }
    }

    /// The file's size and time; `None` when there is no file.
    fn stamp(&self) -> Result<Option<Stamp>, StoreError> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => Ok(Some((meta.len(), meta.modified().ok()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::storage(e)),
        }
    }

    /// The file as it is now (empty when there is none).
    fn read(&self) -> Result<LinksFile, StoreError> {
        let Some(stamp) = self.stamp()? else {
            return Ok(LinksFile::default());
        };
        let stamp = Some(stamp);
        if let Some(stamp) = stamp
            && let Some((seen, file)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
            && *seen == stamp
        {
            return Ok(file.clone());
        }
        let file = match read_if_exists(&self.root, &self.path).map_err(StoreError::storage)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError::storage(std::io::Error::other(format!(
                    "{} is not a links file: {e}",
                    self.path.display()
                )))
            })?,
            None => LinksFile::default(),
        };
        if let Some(stamp) = stamp {
            *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((stamp, file.clone()));
        }
        Ok(file)
    }

    /// Read-modify-write under the file's lock; expired codes and old
    /// failures dropped as of `now`, when given.
    fn change<T>(&self, now: Option<DateTime<Utc>>, f: impl FnOnce(&mut LinksFile) -> T) -> Result<T, StoreError> {
        let dir = self.path.parent().unwrap_or(&self.root);
        create_private_dir_all(&self.root, dir).map_err(StoreError::storage)?;
        let _lock = lock(&self.path)?;
        let mut file = self.read()?;
        let before = file.clone();
        if let Some(now) = now {
            file.codes.retain(|c| c.expires_at > now);
            file.failures.retain(|f| f.at > now - KEEP_FAILURES);
        }
        let out = f(&mut file);
        if file != before {
            let mut bytes = serde_json::to_vec_pretty(&file).map_err(StoreError::storage)?;
            bytes.push(b'\n');
            atomic_write(&self.root, &self.path, &bytes).map_err(StoreError::storage)?;
        }
        Ok(out)
    }
}

/// An exclusive lock on `<path>.lock`, held until dropped.
fn lock(path: &Path) -> Result<std::fs::File, StoreError> {
    crate::fsutil::lock_beside(path).map_err(StoreError::storage)
}

#[async_trait]
impl LinkStore for FileLinks {
    async fn put_code(
        &self,
        hash: &str,
        account: &Account,
        now: DateTime<Utc>,
        expires: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.change(Some(now), |file| {
            file.codes.retain(|c| c.account != *account);
            file.codes.push(StoredCode {
                sha256: hash.to_string(),
                account: account.clone(),
                expires_at: expires,
            });
        })
    }

    async fn take_code(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<Account>, StoreError> {
        // Expired codes are dropped by `change` before this looks.
        self.change(Some(now), |file| {
            let at = file.codes.iter().position(|c| c.sha256 == hash)?;
            Some(file.codes.remove(at).account)
        })
    }

    async fn failed(&self, account: &Account, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.change(Some(now), |file| {
            file.failures.push(Failure {
                account: account.clone(),
                at: now,
            });
        })
    }

    async fn failures(&self, account: &Account, since: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, StoreError> {
        let mut times: Vec<DateTime<Utc>> = self
            .read()?
            .failures
            .into_iter()
            .filter(|f| f.account == *account && f.at >= since)
            .map(|f| f.at)
            .collect();
        times.sort();
        Ok(times)
    }

    async fn link(&self, account: &Account, home: &Account, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.change(Some(at), |file| {
            file.links.retain(|l| l.account != *account);
            file.links.push(StoredLink {
                account: account.clone(),
                home: home.clone(),
                linked_at: at,
            });
        })
    }

    async fn unlink(&self, account: &Account) -> Result<bool, StoreError> {
        self.change(None, |file| {
            let before = file.links.len();
            file.links.retain(|l| l.account != *account);
            file.links.len() != before
        })
    }

    async fn home_of(&self, account: &Account) -> Result<Option<Account>, StoreError> {
        Ok(self
            .read()?
            .links
            .into_iter()
            .find(|l| l.account == *account)
            .map(|l| l.home))
    }

    async fn linked_to(&self, home: &Account) -> Result<Vec<Link>, StoreError> {
        Ok(self.all().await?.into_iter().filter(|l| l.home == *home).collect())
    }

    async fn all(&self) -> Result<Vec<Link>, StoreError> {
        let mut links: Vec<Link> = self
            .read()?
            .links
            .into_iter()
            .map(|l| Link {
                account: l.account,
                home: l.home,
                at: l.linked_at,
            })
            .collect();
        links.sort_by_key(|l| l.at);
        Ok(links)
    }
}
