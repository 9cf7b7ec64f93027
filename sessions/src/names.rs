//! Safe path components: the one function every user id, channel name and
//! topic slug passes before it becomes part of a path.
//!
//! The encoding keeps `[A-Za-z0-9_-]` and writes every other byte of the UTF-8
//! input as `%XX` (upper-case hex), so `.`, `/`, `\`, NUL and any unicode trick
//! become inert text and no component can be `.`, `..` or contain a separator.
//! The empty string becomes a lone `%`, which no other input produces. The
//! mapping is injective, so distinct inputs get distinct names. An encoding
//! longer than [`MAX_LEN`] is cut to a prefix and completed with `%~` and 32
//! hex digits of the input's SHA-256; `%~` never occurs in an uncut encoding,
//! so a cut name cannot equal an uncut one, and two cut names collide only if
//! SHA-256 does.
//!
//! A group's shared memory is kept under [`SafeName::group`]: `%G-` and the
//! encoded chat id. `%G` never occurs in [`SafeName::of`]'s output (`%` is
//! always followed by upper-case hex or `~`), so no user id, however chosen,
//! names a group's memory, and a group's name is never a user's.
//!
//! This module never touches the file system.

use sha2::{Digest, Sha256};
use std::fmt;

/// The longest component we produce, in bytes. Well under the 255-byte limit
/// of common file systems, leaving room for suffixes such as `.md`.
pub const MAX_LEN: usize = 120;

/// What a group's shared memory's name starts with ([`SafeName::group`]).
const GROUP_PREFIX: &str = "%G-";

/// Bytes of the encoded prefix kept when a name is too long.
const CUT_PREFIX: usize = 80;

/// A path component that is known to be safe: it was produced by
/// [`SafeName::of`] or validated by [`SafeName::from_encoded`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafeName(String);

impl SafeName {
    /// Encodes any input as a safe, stable, collision-free path component.
    pub fn of(raw: &str) -> Self {
        if raw.is_empty() {
            return SafeName("%".to_string());
        }
        let mut out = String::with_capacity(raw.len());
        for &b in raw.as_bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                out.push(b as char);
            } else {
                out.push('%');
                out.push(hex_digit(b >> 4));
                out.push(hex_digit(b & 0x0f));
            }
        }
        if out.len() > MAX_LEN {
            let mut cut = CUT_PREFIX;
            // Never end the prefix inside a `%XX` triple.
            while out.as_bytes()[..cut].iter().rev().take(2).any(|&c| c == b'%') {
                cut -= 1;
            }
            let digest = Sha256::digest(raw.as_bytes());
            out.truncate(cut);
            out.push_str("%~");
            for b in &digest[..16] {
                out.push(hex_digit(b >> 4));
                out.push(hex_digit(b & 0x0f));
            }
        }
        SafeName(out)
    }

    /// The name a group's shared memory is kept under (`groups.<id>.memory:
    /// "shared"` in `access.json`): `%G-` and the chat id as [`SafeName::of`]
    /// encodes it (see the module doc for why it cannot be a user's).
    pub fn group(chat_id: &str) -> Self {
        SafeName(format!("{GROUP_PREFIX}{}", SafeName::of(chat_id).0))
    }

    /// Whether this names a group's shared memory ([`SafeName::group`]).
    pub fn is_group(&self) -> bool {
        self.0.starts_with(GROUP_PREFIX)
    }

    /// Accepts a name read back from disk (a directory or file stem) only if
    /// it has the shape [`SafeName::of`] produces; anything else (a stray
    /// file an operator dropped in, `.tmp` leftovers) is `None`.
    pub fn from_encoded(name: &str) -> Option<Self> {
        if let Some(chat) = name.strip_prefix(GROUP_PREFIX) {
            return SafeName::from_encoded(chat)
                .filter(|inner| !inner.is_group())
                .map(|_| SafeName(name.to_string()));
        }
        if name == "%" {
            return Some(SafeName(name.to_string()));
        }
        if name.is_empty() || name.len() > MAX_LEN {
            return None;
        }
        let bytes = name.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                i += 1;
            } else if b == b'%' && bytes.get(i + 1) == Some(&b'~') {
                let rest = &bytes[i + 2..];
                return (rest.len() == 32 && rest.iter().all(|c| is_upper_hex(*c))).then(|| SafeName(name.to_string()));
            } else if b == b'%' && bytes.len() > i + 2 && is_upper_hex(bytes[i + 1]) && is_upper_hex(bytes[i + 2]) {
                i += 3;
            } else {
                return None;
            }
        }
        Some(SafeName(name.to_string()))
    }

    /// The encoded component, ready to join onto a path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The original input, when the name was not cut (cut names keep only a
    /// hash of their tail). Used for display in reports.
    pub fn decode(&self) -> Option<String> {
        if let Some(chat) = self.0.strip_prefix(GROUP_PREFIX) {
            return SafeName(chat.to_string()).decode().map(|id| format!("group {id}"));
        }
        if self.0 == "%" {
            return Some(String::new());
        }
        if self.0.contains("%~") {
            return None;
        }
        let bytes = self.0.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hi = hex_value(bytes[i + 1])?;
                let lo = hex_value(bytes[i + 2])?;
                out.push(hi << 4 | lo);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).ok()
    }
}

impl SafeName {
    /// How this user is named in logs and turn lines: 12 hex digits of
    /// SHA-256 over the name, the same in every crate and every line, never
    /// the id itself (a log is read by people who may not see memory).
    pub fn log_id(&self) -> LogId {
        let digest = Sha256::new()
            .chain_update(b"mnemo-user\0")
            .chain_update(self.0.as_bytes())
            .finalize();
        let mut out = String::with_capacity(12);
        for b in &digest[..6] {
            out.push(hex_digit(b >> 4).to_ascii_lowercase());
            out.push(hex_digit(b & 0x0f).to_ascii_lowercase());
        }
        LogId(out)
    }
}

/// A user's name in logs ([`SafeName::log_id`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogId(String);

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for SafeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<std::path::Path> for SafeName {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

fn hex_digit(n: u8) -> char {
    char::from(b"0123456789ABCDEF"[usize::from(n & 0x0f)])
}

fn is_upper_hex(c: u8) -> bool {
    c.is_ascii_digit() || (b'A'..=b'F').contains(&c)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    fn is_single_normal_component(name: &SafeName) -> bool {
        let mut comps = Path::new(name.as_str()).components();
        matches!(comps.next(), Some(Component::Normal(_))) && comps.next().is_none()
    }

    #[test]
    fn plain_platform_ids_stay_readable() {
        assert_eq!(SafeName::of("U12345").as_str(), "U12345");
        assert_eq!(SafeName::of("-1001234").as_str(), "-1001234");
        assert_eq!(SafeName::of("my_topic-2").as_str(), "my_topic-2");
    }

    #[test]
    fn hostile_inputs_become_one_inert_component() {
        for raw in [
            "..",
            ".",
            "../x",
            "/etc/passwd",
            "a\\b",
            "a\0b",
            "",
            "..%2f",
            "ü",
            "\u{202e}txt",
        ] {
            let name = SafeName::of(raw);
            assert!(is_single_normal_component(&name), "{raw:?} -> {name}");
            assert!(!name.as_str().contains('/') && !name.as_str().contains('.'));
            assert_eq!(SafeName::from_encoded(name.as_str()), Some(name.clone()));
            assert_eq!(name.decode().as_deref(), Some(raw));
        }
    }

    #[test]
    fn a_group_is_named_apart_from_every_user() {
        let group = SafeName::group("-1001234");
        assert_eq!(group.as_str(), "%G--1001234");
        assert!(group.is_group() && !SafeName::of("-1001234").is_group());
        assert_eq!(SafeName::from_encoded(group.as_str()), Some(group.clone()));
        assert_eq!(group.decode().as_deref(), Some("group -1001234"));
        // Whatever a sender's id is, it never names a group's memory.
        for raw in ["%G--1001234", "%G-", "G--1001234", "%47--1001234"] {
            assert!(!SafeName::of(raw).is_group(), "{raw:?}");
            assert_ne!(SafeName::of(raw), group);
        }
        for hostile in ["../x", "a\0b", &"x".repeat(500)] {
            let name = SafeName::group(hostile);
            assert!(is_single_normal_component(&name), "{name}");
            assert_eq!(SafeName::from_encoded(name.as_str()), Some(name.clone()));
        }
        for stray in ["%G-", "%G-%G-1", "%G-../x", "%Gx"] {
            assert_eq!(SafeName::from_encoded(stray), None, "{stray:?}");
        }
    }

    #[test]
    fn long_inputs_are_cut_with_a_hash_and_stay_distinct() {
        let a = SafeName::of(&"x".repeat(10_000));
        let b = SafeName::of(&format!("{}y", "x".repeat(9_999)));
        assert!(a.as_str().len() <= MAX_LEN && b.as_str().len() <= MAX_LEN);
        assert_ne!(a, b);
        assert!(SafeName::from_encoded(a.as_str()).is_some());
        assert_eq!(a.decode(), None);
        let unicode = SafeName::of(&"é".repeat(200));
        assert!(unicode.as_str().len() <= MAX_LEN);
        assert!(SafeName::from_encoded(unicode.as_str()).is_some());
    }

    #[test]
    fn names_not_produced_by_encoding_are_refused() {
        for stray in ["", ".", "..", "a.tmp", "a/b", "%zz", "%", "%2e", "x%~12"] {
            if stray == "%" {
                continue; // the empty input's encoding
            }
            assert_eq!(SafeName::from_encoded(stray), None, "{stray:?}");
        }
    }

    proptest! {
        #[test]
        fn safe_name_never_escapes(raw in any::<String>()) {
            let name = SafeName::of(&raw);
            prop_assert!(is_single_normal_component(&name));
            prop_assert!(name.as_str().len() <= MAX_LEN);
            prop_assert_eq!(SafeName::from_encoded(name.as_str()), Some(name.clone()));
            prop_assert!(!name.is_group());
            let group = SafeName::group(&raw);
            prop_assert!(is_single_normal_component(&group) && group.is_group());
            prop_assert_eq!(SafeName::from_encoded(group.as_str()), Some(group.clone()));
        }

        #[test]
        fn safe_name_never_collides(a in any::<String>(), b in any::<String>()) {
            prop_assume!(a != b);
            prop_assert_ne!(SafeName::of(&a), SafeName::of(&b));
        }

        #[test]
        fn safe_name_round_trips_when_not_cut(raw in "\\PC{0,10}") {
            let name = SafeName::of(&raw);
            // 10 chars encode to at most 120 bytes (= MAX_LEN), so none is cut;
            // a cut name keeps only a hash of its tail and cannot decode.
            prop_assume!(!name.as_str().contains("%~"));
            prop_assert_eq!(name.decode(), Some(raw));
        }
    }
}
