use super::*;
use crate::access::file::{self, AccessFile, DmPolicy};
use crate::access::pairing::approve;
use mnemo_channels::ChatKind;
use std::time::Duration;

struct Counting(Mutex<u32>);
impl CodeSource for Counting {
    fn code(&self) -> String {
        let mut n = lock(&self.0);
        *n += 1;
        format!("CODE{:04}", *n + 2000)
    }
}

fn gate(dir: &std::path::Path, limits: LimitsConfig) -> Gate {
    // These specs edit access.json between messages at the same `now`.
    Gate::new(dir, &limits)
        .with_recheck(Duration::ZERO)
        .with_codes(Box::new(Counting(Mutex::new(0))))
}

fn dm(channel: &str, user: &str, text: &str) -> Inbound {
    Inbound {
        channel: channel.into(),
        user_id: user.into(),
        user_name: None,
        chat_id: format!("D-{user}"),
        chat_kind: ChatKind::Direct,
        thread_id: None,
        msg_id: "1".into(),
        text: text.into(),
        ts: Utc::now(),
        addressed: true,
        interaction: None,
        attachments: Vec::new(),
    }
}

fn access_path(dir: &std::path::Path, channel: &str) -> PathBuf {
    Layout::new(dir, channel).access_path()
}

fn reply(a: Admission) -> Option<String> {
    match a {
        Admission::Refused { reply } => reply,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const PROCEED: Admission = Admission::Proceed { greeting: None };

#[tokio::test]
async fn a_stranger_is_paired_through_the_file_and_greeted_once() {
    let dir = tempfile::tempdir().unwrap();
    let g = gate(dir.path(), LimitsConfig::default());
    let now = Utc::now();
    let first = reply(g.admit(&dm("tg", "u1", "hi"), now).await).unwrap();
    assert!(first.contains("CODE2001"), "{first}");
    assert!(
        reply(g.admit(&dm("tg", "u1", "hi?"), now).await)
            .unwrap()
            .contains("CODE2001")
    );
    assert_eq!(
        reply(g.admit(&dm("tg", "u1", "hello??"), now).await),
        None,
        "two replies, then silence"
    );

    let path = access_path(dir.path(), "tg");
    file::update(&path, |f| approve(f, "code2001", now).map(|_| ()))
        .unwrap()
        .0
        .unwrap();
    let paired = g.admit(&dm("tg", "u1", "am I in?"), now).await;
    assert_eq!(
        paired,
        Admission::Proceed {
            greeting: Some(PAIRED.to_string())
        }
    );
    assert_eq!(g.admit(&dm("tg", "u1", "again"), now).await, PROCEED, "greeted once");
    assert!(file::read(&path).unwrap().unwrap().approved.is_empty());
}

#[tokio::test]
async fn nothing_a_stranger_writes_changes_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let g = gate(dir.path(), LimitsConfig::default());
    let now = Utc::now();
    g.admit(&dm("tg", "u1", "hi"), now).await;
    for text in [
        "mnemo access pair tg CODE2001",
        "/access allow u1",
        "CODE2001",
        "{\"allowFrom\":[\"u1\"]}",
    ] {
        assert!(
            matches!(g.admit(&dm("tg", "u1", text), now).await, Admission::Refused { .. }),
            "{text}"
        );
    }
    let rules = file::read(&access_path(dir.path(), "tg")).unwrap().unwrap();
    assert!(rules.allow_from.is_empty() && rules.approved.is_empty());
}

#[tokio::test]
async fn a_fourth_stranger_is_told_to_try_later_once() {
    let dir = tempfile::tempdir().unwrap();
    let g = gate(dir.path(), LimitsConfig::default());
    let now = Utc::now();
    for u in ["a", "b", "c"] {
        assert!(
            reply(g.admit(&dm("tg", u, "hi"), now).await)
                .unwrap()
                .contains("pairing code")
        );
    }
    assert_eq!(
        reply(g.admit(&dm("tg", "d", "hi"), now).await).as_deref(),
        Some(pairing::BUSY)
    );
    assert_eq!(reply(g.admit(&dm("tg", "d", "hi"), now).await), None);
}

#[tokio::test]
async fn an_approval_the_cache_has_not_seen_yet_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let path = access_path(dir.path(), "tg");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, r#"{"allowFrom":["xx"]}"#).unwrap();
    let g = gate(dir.path(), LimitsConfig::default());
    let now = Utc::now();
    assert_eq!(g.admit(&dm("tg", "xx", "hi"), now).await, PROCEED); // caches the file
    // An edit in place with the same size and mtime: the cheap stat cannot
    // see it, only the fresh read under the lock before pairing does.
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, r#"{"allowFrom":["u2"]}"#).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(g.admit(&dm("tg", "u2", "hello"), now).await, PROCEED);
    assert!(
        file::read(&path).unwrap().unwrap().pending.is_empty(),
        "no code for an allowed sender"
    );
}

#[tokio::test]
async fn the_console_is_always_let_in_but_still_length_limited() {
    let dir = tempfile::tempdir().unwrap();
    let path = access_path(dir.path(), CONSOLE);
    file::write(
        &path,
        &AccessFile {
            dm_policy: DmPolicy::Disabled,
            ..AccessFile::default()
        },
    )
    .unwrap();
    let limits = LimitsConfig {
        user_messages_per_minute: 1,
        max_message_chars: 5,
        ..LimitsConfig::default()
    };
    let g = gate(dir.path(), limits);
    let t = Instant::now();
    for _ in 0..20 {
        assert_eq!(g.admit_at(&dm(CONSOLE, "me", "hi"), Utc::now(), t).await, PROCEED);
    }
    assert!(
        reply(g.admit_at(&dm(CONSOLE, "me", "too long"), Utc::now(), t).await)
            .unwrap()
            .contains("too long")
    );
}

#[tokio::test]
async fn allowed_senders_are_rate_limited_and_told_once() {
    let dir = tempfile::tempdir().unwrap();
    file::write(
        &access_path(dir.path(), "tg"),
        &AccessFile {
            dm_policy: DmPolicy::Open,
            ..AccessFile::default()
        },
    )
    .unwrap();
    let limits = LimitsConfig {
        user_messages_per_minute: 2,
        ..LimitsConfig::default()
    };
    let g = gate(dir.path(), limits);
    let t = Instant::now();
    let now = Utc::now();
    assert_eq!(g.admit_at(&dm("tg", "u", "1"), now, t).await, PROCEED);
    assert_eq!(g.admit_at(&dm("tg", "u", "2"), now, t).await, PROCEED);
    assert!(
        reply(g.admit_at(&dm("tg", "u", "3"), now, t).await)
            .unwrap()
            .contains("faster")
    );
    assert_eq!(
        reply(g.admit_at(&dm("tg", "u", "4"), now, t + Duration::from_secs(1)).await),
        None
    );
    assert_eq!(
        g.admit_at(&dm("tg", "u", "5"), now, t + Duration::from_secs(30)).await,
        PROCEED
    );
}

#[tokio::test]
async fn ignored_senders_spend_no_tokens_and_hear_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rules = AccessFile {
        dm_policy: DmPolicy::Allowlist,
        ..AccessFile::default()
    };
    file::write(&access_path(dir.path(), "tg"), &rules).unwrap();
    let g = gate(
        dir.path(),
        LimitsConfig {
            user_messages_per_minute: 1,
            ..LimitsConfig::default()
        },
    );
    for _ in 0..5 {
        assert_eq!(reply(g.admit(&dm("tg", "x", "hi"), Utc::now()).await), None);
    }
    assert!(
        !g.tell_queue_full(&dm("tg", "x", "hi")).await,
        "a stranger is not told about queues"
    );
}

#[tokio::test]
async fn a_full_queue_is_told_to_an_allowed_sender_once() {
    let dir = tempfile::tempdir().unwrap();
    let rules = AccessFile {
        dm_policy: DmPolicy::Open,
        ..AccessFile::default()
    };
    file::write(&access_path(dir.path(), "tg"), &rules).unwrap();
    let g = gate(dir.path(), LimitsConfig::default());
    assert!(g.tell_queue_full(&dm("tg", "u", "hi")).await);
    assert!(!g.tell_queue_full(&dm("tg", "u", "hi")).await);
}
