//! Linked identities: several platform accounts of one person sharing one
//! memory. What a store keeps ([`LinkStore`]): which account's memory each
//! linked account uses (its *home*), the one-time codes a person carries
//! from one account to the other (only their SHA-256 is kept), and the
//! failed tries that lock an account out of linking. The rules of linking
//! (who may link to whom, whose memory is kept) are the broker's, written
//! once over this trait; each store only stores, atomically where two
//! brokers could race (a code is taken once).
//!
//! What it must not do: keep a code in the clear, or say whether an
//! account exists.

pub mod files;

use crate::names::SafeName;
use crate::store::StoreError;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// One platform account as memory names it: the channel (`telegram`,
/// `slack`, …) and the user's name in that channel's store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Account {
    pub channel: String,
    pub user: SafeName,
}

impl Account {
    pub fn new(channel: &str, user: SafeName) -> Account {
        Account {
            channel: channel.to_string(),
            user,
        }
    }
}

impl serde::Serialize for SafeName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for SafeName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SafeName, D::Error> {
        let raw = String::deserialize(d)?;
        SafeName::from_encoded(&raw).ok_or_else(|| serde::de::Error::custom("not a stored user name"))
    }
}

/// An account linked to a home, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub account: Account,
    pub home: Account,
    pub at: DateTime<Utc>,
}

/// Where the links, codes and failed tries are kept.
#[async_trait]
pub trait LinkStore: Send + Sync {
    /// Keeps the code whose hash is `hash` for `account` from `now` until
    /// `expires`, replacing any code the account had.
    async fn put_code(
        &self,
        hash: &str,
        account: &Account,
        now: DateTime<Utc>,
        expires: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Takes the code `hash` (gone after, used or not): the account that
    /// asked for it, if it was there and not expired at `now`.
    async fn take_code(&self, hash: &str, now: DateTime<Utc>) -> Result<Option<Account>, StoreError>;

    /// Keeps that `account` sent a wrong code at `now` (for
    /// [`KEEP_FAILURES`]).
    async fn failed(&self, account: &Account, now: DateTime<Utc>) -> Result<(), StoreError>;

    /// When `account` sent wrong codes, at `since` or later, oldest first.
    async fn failures(&self, account: &Account, since: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>, StoreError>;

    /// Links `account` to `home` (whose memory it uses from now on).
    async fn link(&self, account: &Account, home: &Account, at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Removes `account`'s link; whether it had one.
    async fn unlink(&self, account: &Account) -> Result<bool, StoreError>;

    /// The home `account` is linked to, if any.
    async fn home_of(&self, account: &Account) -> Result<Option<Account>, StoreError>;

    /// Every link to `home`, oldest first.
    async fn linked_to(&self, home: &Account) -> Result<Vec<Link>, StoreError>;

    /// Every link, oldest first (for reports).
    async fn all(&self) -> Result<Vec<Link>, StoreError>;
}

/// How long a code is good for.
pub const CODE_TTL: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// Wrong codes within [`LOCK_WINDOW`] that lock an account out of linking
/// for [`LOCK_WINDOW`] from the last of them.
pub const MAX_FAILURES: usize = 5;
/// The window wrong codes are counted in, and how long a lock lasts.
pub const LOCK_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// How long a wrong code is kept: long enough for any lock it is part of.
pub const KEEP_FAILURES: chrono::TimeDelta = chrono::TimeDelta::hours(2);

/// Until when an account that sent wrong codes at `failures` (oldest
/// first, the last [`KEEP_FAILURES`] at least) may not link, if it is
/// locked at `now`: [`MAX_FAILURES`] of them within [`LOCK_WINDOW`] lock
/// it for [`LOCK_WINDOW`] after the last of those.
pub fn locked_until(failures: &[DateTime<Utc>], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    failures
        .windows(MAX_FAILURES)
        .filter(|run| run[MAX_FAILURES - 1] - run[0] <= LOCK_WINDOW)
        .map(|run| run[MAX_FAILURES - 1] + LOCK_WINDOW)
        .max()
        .filter(|until| *until > now)
}

/// The characters of a code: no look-alikes (0/O, 1/I/L).
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters in a code: 31¹⁰, about 49.5 bits.
pub const CODE_CHARS: usize = 10;

/// A new random code (from the operating system's generator).
pub fn new_code() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..CODE_CHARS)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// What a code is kept and looked up as: SHA-256 over its letters, upper
/// case, without spaces or dashes (typed as shown or not).
pub fn code_hash(code: &str) -> String {
    let canonical: String = code
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let digest = Sha256::new()
        .chain_update(b"mnemo-link\0")
        .chain_update(canonical.as_bytes())
        .finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `text` could be a code at all (its length and letters), so a
/// word that is not one is told so without counting as a guess.
pub fn looks_like_code(text: &str) -> bool {
    let letters: Vec<char> = text.chars().filter(|c| !c.is_whitespace() && *c != '-').collect();
    letters.len() == CODE_CHARS && letters.iter().all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_ten_unambiguous_characters_and_differ() {
        let a = new_code();
        assert_eq!(a.len(), CODE_CHARS);
        assert!(a.chars().all(|c| ALPHABET.contains(&(c as u8))), "{a}");
        assert!(!a.contains(['0', 'O', '1', 'I', 'L']), "{a}");
        let many: std::collections::HashSet<String> = (0..1000).map(|_| new_code()).collect();
        assert_eq!(many.len(), 1000);
    }

    #[test]
    fn five_wrong_codes_within_an_hour_lock_for_an_hour_from_the_fifth() {
        let t0 = DateTime::parse_from_rfc3339("2026-12-05T09:00:00Z").unwrap().to_utc();
        let at = |m: i64| t0 + chrono::TimeDelta::minutes(m);
        let four = [at(0), at(10), at(20), at(30)];
        assert_eq!(locked_until(&four, at(31)), None);
        let five = [at(0), at(10), at(20), at(30), at(50)];
        assert_eq!(locked_until(&five, at(51)), Some(at(110)), "an hour from the fifth");
        assert_eq!(locked_until(&five, at(109)), Some(at(110)));
        assert_eq!(locked_until(&five, at(110)), None);
        // Five spread over more than an hour lock nothing.
        let spread = [at(0), at(20), at(40), at(60), at(61)];
        assert_eq!(locked_until(&spread, at(62)), None);
    }

    #[test]
    fn a_code_is_found_however_it_is_typed_and_never_kept_in_the_clear() {
        let h = code_hash("K7QM4XWPAB");
        assert_eq!(h, code_hash("k7qm4-xwpab"));
        assert_eq!(h, code_hash(" K7QM4 XWPAB "));
        assert_ne!(h, code_hash("K7QM4XWPAC"));
        assert!(!h.contains("K7QM"));
        assert!(looks_like_code("k7qm4-xwpab") && !looks_like_code("hello") && !looks_like_code("K7QM4XWPAB1"));
    }
}
