//! What `mnemo access …` accepts as a channel name and as a user or group
//! id, so a typo is refused with a hint instead of creating a `telgram`
//! folder or allowing `@alice` on Telegram (which only has numeric ids). A
//! channel is known when it is a platform mnemo speaks or already has a
//! state folder (the operator's own channels, test channels); ids are
//! checked only for the platforms whose id shapes are fixed.

use anyhow::{Result, bail};
use mnemo_sessions::Layout;
use std::path::Path;

/// The platform channels `mnemo access` manages.
pub const PLATFORMS: [&str; 3] = ["telegram", "slack", "discord"];

/// Refuses a channel that is neither a platform nor already in the state
/// folder; the console is never restricted, so it has no access rules.
pub fn check_channel(root: &Path, channel: &str) -> Result<()> {
    if channel == "console" {
        bail!(
            "the console is always its local user and never restricted; access rules are for telegram, slack and discord"
        );
    }
    if PLATFORMS.contains(&channel) || Layout::new(root, channel).root().is_dir() {
        return Ok(());
    }
    let hint = PLATFORMS
        .iter()
        .find(|p| close(p, channel))
        .map(|p| format!(" — did you mean `{p}`?"))
        .unwrap_or_default();
    bail!(
        "unknown channel `{}`{hint} (known: {})",
        mnemo_channels::printable::printable(channel),
        PLATFORMS.join(", ")
    )
}

/// Whether `a` and `b` differ by at most two edits (a typo).
fn close(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()] <= 2
}

/// What kind of id a command names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    User,
    Group,
}

/// Refuses an id that cannot exist on `channel`'s platform.
pub fn check_id(channel: &str, kind: IdKind, id: &str) -> Result<()> {
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    let slack = |first: &[u8], s: &str| {
        s.len() >= 3
            && first.contains(&s.as_bytes()[0])
            && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    };
    let (ok, shape) = match (channel, kind) {
        ("telegram", IdKind::User) => (digits(id), "a positive number, e.g. 123456789"),
        ("telegram", IdKind::Group) => (
            digits(id.strip_prefix('-').unwrap_or(id)),
            "a number, for groups usually negative, e.g. -1001234567890",
        ),
        ("discord", _) => (
            digits(id),
            "a numeric id (Developer Mode → Copy ID), e.g. 1100000000000000001",
        ),
        ("slack", IdKind::User) => (slack(b"UW", id), "an id like U0123ABCD (profile → ⋮ → Copy member ID)"),
        ("slack", IdKind::Group) => (
            slack(b"CGD", id),
            "a channel id like C0123ABCD (channel details → bottom)",
        ),
        _ => (!id.trim().is_empty(), "not empty"),
    };
    if !ok {
        let what = if kind == IdKind::User { "user" } else { "group" };
        bail!(
            "`{}` is not a {channel} {what} id: expected {shape}",
            mnemo_channels::printable::printable(id)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_per_platform() {
        assert!(check_id("telegram", IdKind::User, "42").is_ok());
        assert!(check_id("telegram", IdKind::User, "@alice").is_err());
        assert!(check_id("telegram", IdKind::Group, "-1001234567890").is_ok());
        assert!(check_id("slack", IdKind::User, "U0123ABCD").is_ok());
        assert!(check_id("slack", IdKind::User, "alice").is_err());
        assert!(check_id("slack", IdKind::Group, "C0123ABCD").is_ok());
        assert!(check_id("discord", IdKind::User, "1100000000000000001").is_ok());
        assert!(check_id("discord", IdKind::Group, "#general").is_err());
        assert!(check_id("fake", IdKind::User, "anything").is_ok());
    }

    #[test]
    fn a_typo_of_a_platform_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_channel(dir.path(), "telgram").unwrap_err().to_string();
        assert!(e.contains("did you mean `telegram`"), "{e}");
        assert!(check_channel(dir.path(), "telegram").is_ok());
        assert!(check_channel(dir.path(), "console").is_err());
    }
}
