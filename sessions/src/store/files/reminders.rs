//! The file store's reminders: one `reminders/<user>.json` per user (a
//! [`Book`], written whole and atomically), and every user's book in
//! memory, read once at the first use, so the delivery loop's claim every
//! second reads no file. The file is written first; memory follows.
//!
//! One broker owns a state folder, so a claim found at the first read was
//! left by a process that died posting it: it is missed at once (never
//! posted twice). A book that does not parse is left as it is and its
//! user's reminders are refused with a storage error until an operator
//! fixes it; nothing overwrites it.

use super::loaded::{Loaded, json_users};
use crate::blocking::off_workers;
use crate::fsutil::{self, remove_if_exists};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::reminders::{Book, BookError, Claimed, Finish, Reminder, State};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// Every user's reminders in one channel's folder.
pub(super) struct FileReminders {
    books: Loaded<Books>,
}

#[derive(Default)]
struct Books {
    readable: HashMap<SafeName, Book>,
    /// Users whose file did not parse.
    broken: HashSet<SafeName>,
}

/// A reminders file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("reminders file of a user: {0}")]
struct ReminderFileError(String);

fn storage(e: impl std::fmt::Display) -> StoreError {
    StoreError::storage(ReminderFileError(e.to_string()))
}

impl FileReminders {
    pub(super) fn new(layout: Layout) -> FileReminders {
        FileReminders {
            books: Loaded::new(layout, read_all),
        }
    }

    /// Runs `f` on every book, read first if this is the first use.
    async fn with<T>(&self, f: impl FnOnce(&mut Books) -> T) -> Result<T, StoreError> {
        Ok(f(&mut *self.books.lock().await?))
    }

    /// Applies `change` to `user`'s book and writes it; the change's value.
    async fn change<T: Send + 'static>(
        &self,
        user: &SafeName,
        change: impl FnOnce(&mut Book) -> T + Send,
    ) -> Result<T, StoreError> {
        let mut books = self.books.lock().await?;
        if books.broken.contains(user) {
            return Err(storage("unreadable; an operator must fix or remove it"));
        }
        let mut book = books.readable.get(user).cloned().unwrap_or_default();
        let value = change(&mut book);
        let (layout, who, written) = (self.books.layout().clone(), user.clone(), book.clone());
        off_workers(move || write(&layout, &who, &written))
            .await
            .ok_or_else(|| storage("shutting down"))??;
        if book.is_empty() {
            books.readable.remove(user);
        } else {
            books.readable.insert(user.clone(), book);
        }
        Ok(value)
    }

    pub(super) async fn timezone(&self, user: &SafeName) -> Result<Option<String>, StoreError> {
        self.read(user, |book| book.timezone.clone()).await
    }

    pub(super) async fn set_timezone(&self, user: &SafeName, zone: &str) -> Result<(), StoreError> {
        let zone = zone.to_string();
        self.change(user, move |book| book.timezone = Some(zone)).await
    }

    pub(super) async fn pending(&self, user: &SafeName) -> Result<Vec<Reminder>, StoreError> {
        self.read(user, Book::pending).await
    }

    pub(super) async fn add(&self, user: &SafeName, reminder: &Reminder, max: usize) -> Result<(), StoreError> {
        let reminder = reminder.clone();
        match self.change(user, move |book| book.add(reminder, max)).await? {
            Ok(()) => Ok(()),
            Err(BookError::Full) => Err(StoreError::Invalid(crate::reminders::FULL)),
            Err(BookError::Taken) => Err(storage(BookError::Taken)),
        }
    }

    pub(super) async fn cancel(&self, user: &SafeName, id: &str) -> Result<bool, StoreError> {
        if !self
            .read(user, |book| book.pending().iter().any(|r| r.id == id))
            .await?
        {
            return Ok(false);
        }
        let id = id.to_string();
        self.change(user, move |book| book.cancel(&id)).await
    }

    pub(super) async fn take_missed(&self, user: &SafeName, chat_id: &str) -> Result<Vec<Reminder>, StoreError> {
        if !self
            .read(user, |book| {
                book.reminders
                    .iter()
                    .any(|r| r.missed.is_some() && r.place.chat_id == chat_id)
            })
            .await?
        {
            return Ok(Vec::new());
        }
        let chat_id = chat_id.to_string();
        self.change(user, move |book| book.take_missed(&chat_id)).await
    }

    /// Claims what is due at `now` (at most `limit`), after turning
    /// claims not ended in time into misses.
    pub(super) async fn claim(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<Claimed>, StoreError> {
        let abandoned: Vec<SafeName> = self
            .with(|books| {
                let users = books.readable.iter();
                users
                    .filter(|(_, book)| book.reminders.iter().any(|r| r.is_abandoned(now)))
                    .map(|(user, _)| user.clone())
                    .collect()
            })
            .await?;
        for user in abandoned {
            tracing::warn!(user = %user.log_id(), "a reminder's claim was not ended in time; kept as missed, the user is told");
            self.change(&user, |book| {
                let stale: Vec<String> = book
                    .reminders
                    .iter()
                    .filter(|r| r.is_abandoned(now))
                    .map(|r| r.id.clone())
                    .collect();
                for id in stale {
                    let next = book
                        .reminders
                        .iter()
                        .find(|r| r.id == id)
                        .cloned()
                        .and_then(Reminder::abandoned);
                    book.put(&id, next);
                }
            })
            .await?;
        }
        let due: Vec<(SafeName, String)> = self
            .with(|books| {
                let mut due: Vec<(DateTime<Utc>, SafeName, String)> = books
                    .readable
                    .iter()
                    .flat_map(|(user, book)| {
                        book.reminders
                            .iter()
                            .filter(|r| r.is_due(now))
                            .map(|r| (r.due, user.clone(), r.id.clone()))
                    })
                    .collect();
                due.sort();
                due.into_iter().take(limit).map(|(_, user, id)| (user, id)).collect()
            })
            .await?;
        let mut claimed = Vec::new();
        for (user, id) in due {
            let taken = self
                .change(&user, |book| {
                    let r = book.get_mut(&id).filter(|r| r.is_due(now))?;
                    *r = r.clone().claimed(now);
                    Some(r.clone())
                })
                .await?;
            claimed.extend(taken.map(|reminder| Claimed { user, reminder }));
        }
        Ok(claimed)
    }

    /// Ends the claim of `user`'s reminder `id`.
    pub(super) async fn finish(&self, user: &SafeName, id: &str, finish: Finish) -> Result<(), StoreError> {
        let id = id.to_string();
        self.change(user, move |book| {
            if let Some(r) = book.reminders.iter().find(|r| r.id == id && r.state == State::Sending) {
                let next = r.clone().finished(&finish);
                book.put(&id, next);
            }
        })
        .await
    }

    /// Drops `user`'s book from memory (their files were deleted).
    pub(super) async fn forget(&self, user: &SafeName) {
        if let Some(books) = self.books.if_read().await.as_mut() {
            books.readable.remove(user);
            books.broken.remove(user);
        }
    }

    async fn read<T>(&self, user: &SafeName, f: impl FnOnce(&Book) -> T) -> Result<T, StoreError> {
        self.with(|books| {
            if books.broken.contains(user) {
                return Err(storage("unreadable; an operator must fix or remove it"));
            }
            Ok(f(books.readable.get(user).unwrap_or(&Book::default())))
        })
        .await?
    }
}

/// Every user's book under `reminders/`; a claim left by a dead process
/// becomes a miss (and is written so).
fn read_all(layout: &Layout) -> Result<Books, StoreError> {
    let mut books = Books::default();
    for user in json_users(layout, &layout.reminders_root()).map_err(storage)? {
        let path = layout.reminders_path(&user);
        let parsed = fsutil::read_if_exists(layout.state_root(), &path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<Book>(&bytes.unwrap_or_default()).map_err(|e| e.to_string()));
        match parsed {
            Ok(mut book) => {
                if book.reminders.iter().any(|r| r.state == State::Sending) {
                    book.reminders = book
                        .reminders
                        .into_iter()
                        .filter_map(|r| {
                            if r.state == State::Sending {
                                r.abandoned()
                            } else {
                                Some(r)
                            }
                        })
                        .collect();
                    tracing::warn!(user = %user.log_id(), "a reminder was being posted when the bot stopped; kept as missed, the user is told");
                    write(layout, &user, &book)?;
                }
                books.readable.insert(user, book);
            }
            Err(reason) => {
                tracing::error!(user = %user.log_id(), path = %path.display(), %reason, "reminders file unreadable; left as it is");
                books.broken.insert(user);
            }
        }
    }
    Ok(books)
}

/// `user`'s book as the files hold it (empty when there is none): for
/// `mnemo store copy`, which runs without a bot.
pub fn read_book(layout: &Layout, user: &SafeName) -> Result<Book, StoreError> {
    let path = layout.reminders_path(user);
    match fsutil::read_if_exists(layout.state_root(), &path).map_err(storage)? {
        None => Ok(Book::default()),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| storage(format!("{}: {e}", path.display()))),
    }
}

/// Writes `user`'s book (removes the file when it is empty).
pub fn write_book(layout: &Layout, user: &SafeName, book: &Book) -> Result<(), StoreError> {
    write(layout, user, book)
}

fn write(layout: &Layout, user: &SafeName, book: &Book) -> Result<(), StoreError> {
    let path = layout.reminders_path(user);
    if book.is_empty() {
        return remove_if_exists(layout.state_root(), &path)
            .map(|_| ())
            .map_err(storage);
    }
    let bytes = serde_json::to_vec_pretty(book).map_err(storage)?;
    fsutil::replace(layout.state_root(), &path, &bytes).map_err(storage)
}
