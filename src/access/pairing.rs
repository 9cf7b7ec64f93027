//! Pairing (DESIGN §6): a stranger who writes the bot directly under
//! `dmPolicy: pairing` gets a short code; the operator approves it with
//! `mnemo access pair <channel> <code>`, which moves the sender into
//! `allowFrom`. Codes are 8 characters from an alphabet without look-alikes,
//! drawn from a CSPRNG, and expire after an hour; a channel holds at most
//! three pending codes; a sender hears about pairing at most twice.
//!
//! Everything here edits an [`AccessFile`] in memory with an explicit
//! `now`; the caller holds the file lock and writes it. Nothing in chat can
//! approve anyone: [`approve`] is called only by the CLI.

use super::file::{AccessFile, ApprovedNotice, PendingPairing};
use chrono::{DateTime, TimeDelta, Utc};
use mnemo_channels::Inbound;
use rand::Rng as _;

/// No `0`/`O`, `1`/`I`: codes are read aloud and retyped.
pub const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
pub const CODE_LEN: usize = 8;
/// How long a code can be approved.
pub const CODE_TTL: TimeDelta = TimeDelta::hours(1);
/// Pending codes per channel: a flood of strangers cannot grow the file or
/// bury the operator.
pub const MAX_PENDING: usize = 3;
/// Replies about pairing per sender (the code, one reminder), then silence.
pub const MAX_REPLIES: u32 = 2;

/// Where codes come from; tests inject fixed ones.
pub trait CodeSource: Send + Sync {
    fn code(&self) -> String;
}

/// Codes from the thread-local CSPRNG (ChaCha, seeded from the OS).
pub struct RandomCodes;

impl CodeSource for RandomCodes {
    fn code(&self) -> String {
        let mut rng = rand::rng();
        (0..CODE_LEN)
            .map(|_| char::from(CODE_ALPHABET[rng.random_range(0..CODE_ALPHABET.len())]))
            .collect()
    }
}

/// What the pairing flow did for one message of a stranger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairingStep {
    /// A new code for this sender: tell them.
    Issued { code: String, expires_at: DateTime<Utc> },
    /// They already have a code and may hear it once more.
    Reminded { code: String, expires_at: DateTime<Utc> },
    /// They had their replies: say nothing.
    Quiet,
    /// Three other strangers are waiting: no code for now.
    Full,
}

impl PairingStep {
    /// What the stranger is told, if anything.
    pub fn reply(&self, channel: &str) -> Option<String> {
        match self {
            PairingStep::Issued { code, .. } => Some(format!(
                "Hi! I only talk with people my owner has approved. Your pairing code is {code}. \
                 Ask the owner to run `mnemo access pair {channel} {code}` — the code expires in 1 hour."
            )),
            PairingStep::Reminded { code, expires_at } => Some(format!(
                "Still waiting for approval. Your pairing code is {code} (valid until {} UTC). \
                 I won't reply again until the owner approves it.",
                expires_at.format("%H:%M")
            )),
            PairingStep::Quiet => None,
            PairingStep::Full => Some(BUSY.to_string()),
        }
    }
}

/// Told (once) to a stranger who finds every pending slot taken.
pub const BUSY: &str = "I'm not taking new pairing requests right now. Please try again later.";

/// The pairing step for `message`, a stranger's direct message, applied to
/// `access` (expired codes are dropped first, so an expired sender starts
/// over with a fresh code and a fresh reply budget).
pub fn step(access: &mut AccessFile, message: &Inbound, now: DateTime<Utc>, codes: &dyn CodeSource) -> PairingStep {
    drop_expired(access, now);
    if let Some(pending) = access.pending.iter_mut().find(|p| p.user_id == message.user_id) {
        if pending.replies >= MAX_REPLIES {
            return PairingStep::Quiet;
        }
        pending.replies += 1;
        return PairingStep::Reminded {
            code: pending.code.clone(),
            expires_at: pending.expires_at,
        };
    }
    if access.pending.len() >= MAX_PENDING {
        return PairingStep::Full;
    }
    let code = fresh_code(access, codes);
    let expires_at = now + CODE_TTL;
    access.pending.push(PendingPairing {
        code: code.clone(),
        user_id: message.user_id.clone(),
        // Printed by `mnemo access list`: stored escaped and bounded.
        user_name: message.user_name.as_deref().map(mnemo_channels::printable::printable),
        chat_id: message.chat_id.clone(),
        created_at: now,
        expires_at,
        replies: 1,
    });
    PairingStep::Issued { code, expires_at }
}

/// A code no pending entry uses. With 32^8 codes a clash is a freak event;
/// after a few draws the last one is taken anyway (approval then picks the
/// first match, and both entries are for strangers asking to be let in).
fn fresh_code(access: &AccessFile, codes: &dyn CodeSource) -> String {
    let mut code = codes.code();
    for _ in 0..8 {
        if !access.pending.iter().any(|p| p.code == code) {
            break;
        }
        code = codes.code();
    }
    code
}

pub fn drop_expired(access: &mut AccessFile, now: DateTime<Utc>) {
    access.pending.retain(|p| p.expires_at > now);
}

/// Why a code could not be approved.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApproveError {
    #[error("no pending pairing code `{code}` (see `mnemo access list <channel>`)")]
    Unknown { code: String },
    #[error("pairing code `{code}` expired at {expired_at} UTC; ask the sender to write again for a new one")]
    Expired { code: String, expired_at: DateTime<Utc> },
}

/// `ab cd-2345` → `ABCD2345`: people retype codes loosely.
pub fn normalize_code(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// Approves `code`: its sender joins `allowFrom`, the code is used up, and
/// an [`ApprovedNotice`] asks the broker to tell them. Expired codes are
/// refused (and dropped).
pub fn approve(access: &mut AccessFile, code: &str, now: DateTime<Utc>) -> Result<PendingPairing, ApproveError> {
    let code = normalize_code(code);
    let Some(at) = access.pending.iter().position(|p| p.code == code) else {
        return Err(ApproveError::Unknown { code });
    };
    let pending = access.pending.remove(at);
    if pending.expires_at <= now {
        return Err(ApproveError::Expired {
            code,
            expired_at: pending.expires_at,
        });
    }
    access.allow_from.insert(pending.user_id.clone());
    access.approved.retain(|n| n.user_id != pending.user_id);
    access.approved.push(ApprovedNotice {
        user_id: pending.user_id.clone(),
        approved_at: now,
    });
    Ok(pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use mnemo_channels::ChatKind;
    use std::sync::Mutex;

    struct Fixed(Mutex<Vec<&'static str>>);
    impl CodeSource for Fixed {
        fn code(&self) -> String {
            self.0.lock().unwrap().remove(0).to_string()
        }
    }

    fn stranger(user: &str) -> Inbound {
        Inbound {
            channel: "tg".into(),
            user_id: user.into(),
            user_name: Some(format!("{user} name")),
            chat_id: format!("D-{user}"),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: "1".into(),
            text: "hi".into(),
            ts: Utc::now(),
            addressed: true,
            interaction: None,
            attachments: Vec::new(),
        }
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 23, 3, 0, 0).unwrap()
    }

    #[test]
    fn random_codes_are_long_enough_and_unambiguous() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let code = RandomCodes.code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(code.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
            seen.insert(code);
        }
        assert!(seen.len() > 490, "codes repeat: only {} distinct of 500", seen.len());
    }

    #[test]
    fn a_stranger_gets_a_code_one_reminder_then_silence() {
        let mut f = AccessFile::default();
        let codes = Fixed(Mutex::new(vec!["AAAA2222"]));
        let m = stranger("u1");
        assert!(matches!(step(&mut f, &m, t0(), &codes), PairingStep::Issued { ref code, .. } if code == "AAAA2222"));
        assert!(matches!(step(&mut f, &m, t0(), &codes), PairingStep::Reminded { ref code, .. } if code == "AAAA2222"));
        for _ in 0..5 {
            assert_eq!(step(&mut f, &m, t0(), &codes), PairingStep::Quiet);
        }
        assert_eq!(f.pending.len(), 1);
        assert_eq!(f.pending[0].replies, MAX_REPLIES);
        assert_eq!(f.pending[0].user_name.as_deref(), Some("u1 name"));
        assert_eq!(f.pending[0].expires_at, t0() + CODE_TTL);
    }

    #[test]
    fn at_most_three_codes_wait_per_channel() {
        let mut f = AccessFile::default();
        let codes = Fixed(Mutex::new(vec!["AAAAAAA2", "AAAAAAA3", "AAAAAAA4", "AAAAAAA5"]));
        for u in ["a", "b", "c"] {
            assert!(matches!(
                step(&mut f, &stranger(u), t0(), &codes),
                PairingStep::Issued { .. }
            ));
        }
        assert_eq!(step(&mut f, &stranger("d"), t0(), &codes), PairingStep::Full);
        assert_eq!(f.pending.len(), 3);
        // Once the others expire, the fourth gets a code.
        let later = t0() + CODE_TTL + TimeDelta::seconds(1);
        assert!(matches!(
            step(&mut f, &stranger("d"), later, &codes),
            PairingStep::Issued { .. }
        ));
        assert_eq!(f.pending.len(), 1);
    }

    #[test]
    fn a_clashing_code_is_drawn_again() {
        let mut f = AccessFile::default();
        let codes = Fixed(Mutex::new(vec!["SAME2222", "SAME2222", "NEXT3333"]));
        step(&mut f, &stranger("a"), t0(), &codes);
        assert!(
            matches!(step(&mut f, &stranger("b"), t0(), &codes), PairingStep::Issued { ref code, .. } if code == "NEXT3333")
        );
    }

    #[test]
    fn approving_moves_the_sender_to_allow_from_and_leaves_a_notice() {
        let mut f = AccessFile::default();
        step(&mut f, &stranger("u1"), t0(), &Fixed(Mutex::new(vec!["ABCD2345"])));
        let approved = approve(&mut f, " abcd-2345 ", t0() + TimeDelta::minutes(5)).unwrap();
        assert_eq!(approved.user_id, "u1");
        assert!(f.allow_from.contains("u1") && f.pending.is_empty());
        assert_eq!(f.approved.len(), 1);
        assert_eq!(
            approve(&mut f, "ABCD2345", t0()),
            Err(ApproveError::Unknown {
                code: "ABCD2345".into()
            })
        );
    }

    #[test]
    fn an_expired_code_cannot_be_approved() {
        let mut f = AccessFile::default();
        step(&mut f, &stranger("u1"), t0(), &Fixed(Mutex::new(vec!["ABCD2345"])));
        let err = approve(&mut f, "ABCD2345", t0() + CODE_TTL).unwrap_err();
        assert!(matches!(err, ApproveError::Expired { .. }));
        assert!(f.allow_from.is_empty() && f.pending.is_empty());
    }

    #[test]
    fn replies_name_the_code_and_the_command_and_stay_short() {
        let issued = PairingStep::Issued {
            code: "ABCD2345".into(),
            expires_at: t0(),
        };
        let text = issued.reply("telegram").unwrap();
        assert!(
            text.contains("ABCD2345") && text.contains("mnemo access pair telegram ABCD2345"),
            "{text}"
        );
        assert_eq!(PairingStep::Quiet.reply("telegram"), None);
    }
}
