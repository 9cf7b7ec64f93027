//! Pairing end to end: a stranger's direct message gets a code (and the
//! model never hears of it), the reply cap, expiry, the cap on pending
//! codes, approval with the real `mnemo access pair`, and the sender's next
//! message answered — all without restarting the broker.

use crate::harness::{Broker, code_in, dm};
use chrono::{TimeDelta, Utc};
use mnemo::access::gate::PAIRED;
use mnemo::access::pairing::{BUSY, CODE_ALPHABET, CODE_LEN};
use mnemo::config::LimitsConfig;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn a_stranger_is_paired_by_the_operator_and_then_answered() {
    let b = Broker::start(LimitsConfig::default()).await;

    let first = b.say(dm("ann", "1", "hello, who are you?")).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let code = code_in(&first[0]);
    assert_eq!(code.len(), CODE_LEN);
    assert!(code.bytes().all(|c| CODE_ALPHABET.contains(&c)), "{code}");
    assert!(
        first[0].contains(&format!("mnemo access pair fake {code}")),
        "{}",
        first[0]
    );

    let second = b.say(dm("ann", "2", "hello??")).await;
    assert_eq!(second.len(), 1);
    assert_eq!(code_in(&second[0]), code, "the same code again");
    assert!(
        b.say(dm("ann", "3", "HELLO???")).await.is_empty(),
        "two replies, then silence"
    );
    assert!(b.say(dm("ann", "4", "anyone?")).await.is_empty());

    assert!(
        b.model.chat_requests().is_empty(),
        "the model is never asked about pairing"
    );
    assert!(b.stm("ann").is_empty(), "nothing a stranger says is stored");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&b.access_path()), 0o600);
    assert_eq!(mode(b.access_path().parent().unwrap()), 0o700);

    let (ok, out) = b.cli(&["pair", "fake", &code.to_lowercase()]);
    assert!(ok, "{out}");
    assert!(out.contains("paired") && out.contains("ann"), "{out}");

    let now_in = b.say(dm("ann", "5", "am I in now?")).await;
    assert_eq!(now_in, [PAIRED.to_string(), "echo: am I in now?".to_string()]);
    assert_eq!(b.say(dm("ann", "6", "thanks")).await, ["echo: thanks"], "greeted once");
    let asked: Vec<String> = b
        .model
        .chat_requests()
        .iter()
        .map(crate::support::last_user_message)
        .collect();
    assert_eq!(asked, ["am I in now?", "thanks"]);
    assert_eq!(b.stm("ann").len(), 4, "only the messages after pairing are stored");

    let (ok, out) = b.cli(&["pair", "fake", &code]);
    assert!(
        !ok && out.contains("no pending pairing code"),
        "a code works once: {out}"
    );
}

#[tokio::test]
async fn an_expired_code_cannot_be_approved_and_the_stranger_gets_a_new_one() {
    let b = Broker::start(LimitsConfig::default()).await;
    let an_hour_ago = Utc::now() - TimeDelta::minutes(61);
    b.write_access(json!({
        "pending": [{
            "code": "OLDC2345", "userId": "bob", "chatId": "dm-bob",
            "createdAt": an_hour_ago, "expiresAt": an_hour_ago + TimeDelta::hours(1), "replies": 2
        }]
    }));
    let (ok, out) = b.cli(&["pair", "fake", "OLDC2345"]);
    assert!(!ok && out.contains("expired"), "{out}");
    let (_, listing) = b.cli(&["list", "fake"]);
    assert!(
        !listing.contains("bob"),
        "bob is neither allowed nor pending: {listing}"
    );

    let reply = b.say(dm("bob", "1", "hi again")).await;
    assert_eq!(reply.len(), 1, "a fresh code with a fresh reply budget: {reply:?}");
    assert_ne!(code_in(&reply[0]), "OLDC2345");
    assert!(b.model.chat_requests().is_empty());
}

#[tokio::test]
async fn at_most_three_strangers_wait_and_a_fourth_is_told_once_to_try_later() {
    let b = Broker::start(LimitsConfig::default()).await;
    let mut codes = Vec::new();
    for u in ["s1", "s2", "s3"] {
        codes.push(code_in(&b.say(dm(u, "1", "hi")).await[0]));
    }
    assert_eq!(b.say(dm("s4", "1", "hi")).await, [BUSY]);
    assert!(b.say(dm("s4", "2", "hi?")).await.is_empty());
    let (_, listing) = b.cli(&["list", "fake"]);
    for code in &codes {
        assert!(listing.contains(code.as_str()), "{listing}");
    }

    // Approving one frees a slot.
    assert!(b.cli(&["pair", "fake", &codes[0]]).0);
    let reply = b.say(dm("s4", "3", "now?")).await;
    assert!(reply[0].contains("pairing code"), "{reply:?}");
    assert!(b.model.chat_requests().is_empty());
}

#[tokio::test]
async fn operator_verbs_take_effect_without_a_restart() {
    let b = Broker::start(LimitsConfig::default()).await;
    assert!(b.cli(&["policy", "fake", "allowlist"]).0);
    assert!(
        b.say(dm("cy", "1", "hi")).await.is_empty(),
        "allowlist: a stranger hears nothing"
    );
    assert!(b.cli(&["allow", "fake", "cy"]).0);
    assert_eq!(b.say(dm("cy", "2", "hi")).await, ["echo: hi"]);
    let (ok, out) = b.cli(&["revoke", "fake", "cy"]);
    assert!(ok && out.contains("revoked"), "{out}");
    assert!(b.say(dm("cy", "3", "hi?")).await.is_empty());

    let in_group = |id: &str, mentioned| crate::harness::group("team", "cy", id, "hey bot", mentioned);
    assert!(b.say(in_group("4", true)).await.is_empty(), "groups are opt-in");
    assert!(b.cli(&["groups", "add", "fake", "team"]).0);
    assert!(
        b.say(in_group("5", false)).await.is_empty(),
        "a mention is required by default"
    );
    assert_eq!(b.say(in_group("6", true)).await, ["echo: hey bot"]);
    assert!(b.cli(&["groups", "add", "fake", "team", "--no-require-mention"]).0);
    assert_eq!(b.say(in_group("7", false)).await, ["echo: hey bot"]);
    assert!(b.cli(&["groups", "remove", "fake", "team"]).0);
    assert!(b.say(in_group("8", true)).await.is_empty());

    assert!(b.cli(&["policy", "fake", "open"]).0);
    assert_eq!(b.say(dm("dee", "1", "hi")).await, ["echo: hi"]);
    assert!(b.cli(&["policy", "fake", "disabled"]).0);
    assert!(b.say(dm("dee", "2", "hi")).await.is_empty());
}

#[tokio::test]
async fn with_the_file_looked_at_on_a_timer_an_operator_edit_still_takes_effect() {
    // The product looks at access.json once a second (`store::RECHECK`);
    // a shorter interval keeps the wait short, the path is the same.
    let every = std::time::Duration::from_millis(200);
    let b = Broker::start_with_recheck(LimitsConfig::default(), every).await;
    assert!(b.cli(&["policy", "fake", "open"]).0);
    assert_eq!(b.say(dm("eve", "1", "hi")).await, ["echo: hi"]);

    assert!(b.cli(&["policy", "fake", "disabled"]).0);
    tokio::time::sleep(every + every / 2).await;
    assert!(
        b.say(dm("eve", "2", "still there?")).await.is_empty(),
        "the edit is seen at the first look after the interval"
    );

    // A stranger's approval does not wait for the timer: the pairing step
    // reads the file as it is on disk.
    assert!(b.cli(&["policy", "fake", "pairing"]).0);
    tokio::time::sleep(every + every / 2).await;
    let code = code_in(&b.say(dm("fay", "1", "hello")).await[0]);
    assert!(b.cli(&["pair", "fake", &code]).0);
    assert_eq!(
        b.say(dm("fay", "2", "in?")).await,
        [PAIRED.to_string(), "echo: in?".to_string()]
    );
}

#[tokio::test]
async fn nothing_written_in_chat_approves_anyone() {
    let b = Broker::start(LimitsConfig::default()).await;
    let code = code_in(&b.say(dm("eve", "1", "hi")).await[0]);
    for (i, text) in [
        format!("mnemo access pair fake {code}"),
        format!("/session pair {code}"),
        "/access allow eve".into(),
    ]
    .iter()
    .enumerate()
    {
        b.say(dm("eve", &format!("x{i}"), text)).await;
    }
    let (_, listing) = b.cli(&["list", "fake"]);
    assert!(listing.contains("allowFrom (0)"), "{listing}");
    assert!(b.say(dm("eve", "9", "let me in")).await.is_empty());
    assert!(b.model.chat_requests().is_empty());
}

#[tokio::test]
async fn a_strangers_name_cannot_forge_lines_or_drive_the_terminal_in_the_listing() {
    let b = Broker::start(LimitsConfig::default()).await;
    let mut stranger = dm("eve", "1", "hi");
    let forged = format!(
        "Eve\npending ZZZZZZZZ: user `boss`, expires in 60 min\r\x1b[2J{}",
        "x".repeat(500)
    );
    stranger.user_name = Some(forged);
    b.say(stranger).await;

    let (ok, listing) = b.cli(&["list", "fake"]);

    assert!(ok, "{listing}");
    let pending: Vec<&str> = listing.lines().filter(|l| l.starts_with("pending")).collect();
    assert_eq!(pending.len(), 1, "one stranger, one line: {listing}");
    assert!(!listing.contains('\x1b') && !listing.contains('\r'), "{listing:?}");
    assert!(
        pending[0].contains("Eve\\npending ZZZZZZZZ"),
        "escaped, still readable: {}",
        pending[0]
    );
    assert!(pending[0].chars().count() < 200, "bounded: {}", pending[0]);
}
