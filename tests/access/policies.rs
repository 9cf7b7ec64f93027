//! Every dmPolicy × chat (direct, group needing a mention, group answering
//! everything, group not opted in) × known/unknown sender × mentioned or
//! not, through the real `App`: the right decision, and nothing stored or
//! sent to the model for what is refused.

use crate::harness::{CH, group, stm, texts, write_access};
use crate::support::app_parts;
use crate::support::{FakeChannel, FakeModel, last_user_message};
use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::{Channel, Inbound};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Chat {
    Direct,
    GroupNeedsMention,
    GroupAnswersAll,
    GroupNotOptedIn,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// The model answered and the turn is in STM.
    Answered,
    /// A pairing code, no model, nothing stored.
    PairingCode,
    /// Not a word, no model, nothing stored.
    Silent,
}

/// The specification, written out case by case.
fn expected(policy: &str, chat: Chat, known: bool, mentioned: bool) -> Outcome {
    use Outcome::*;
    match chat {
        Chat::Direct => match (policy, known) {
            ("open", _) => Answered,
            ("disabled", _) => Silent,
            (_, true) => Answered,
            ("pairing", false) => PairingCode,
            _ => Silent, // allowlist, stranger
        },
        Chat::GroupNeedsMention if mentioned => Answered,
        Chat::GroupNeedsMention => Silent,
        Chat::GroupAnswersAll => Answered,
        Chat::GroupNotOptedIn => Silent,
    }
}

struct Case {
    chat: Chat,
    known: bool,
    mentioned: bool,
    user: String,
    message: Inbound,
}

fn cases(policy: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for chat in [
        Chat::Direct,
        Chat::GroupNeedsMention,
        Chat::GroupAnswersAll,
        Chat::GroupNotOptedIn,
    ] {
        for known in [true, false] {
            for mentioned in [true, false] {
                let user = format!("{}-{chat:?}-{mentioned}", if known { "known" } else { "stranger" });
                let id = format!("{policy}-{user}");
                let text = format!("hello from {id}");
                let message = match chat {
                    Chat::Direct => Inbound {
                        addressed: mentioned,
                        ..crate::harness::dm(&user, &id, &text)
                    },
                    Chat::GroupNeedsMention => group("G-mention", &user, &id, &text, mentioned),
                    Chat::GroupAnswersAll => group("G-all", &user, &id, &text, mentioned),
                    Chat::GroupNotOptedIn => group("G-other", &user, &id, &text, mentioned),
                };
                out.push(Case {
                    chat,
                    known,
                    mentioned,
                    user,
                    message,
                });
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_chat_sender_and_mention_gets_the_right_decision() {
    for policy in ["pairing", "allowlist", "open", "disabled"] {
        let (fake, url) = FakeModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let cases = cases(policy);
        let known: Vec<&str> = cases.iter().filter(|c| c.known).map(|c| c.user.as_str()).collect();
        write_access(
            dir.path(),
            json!({
                "dmPolicy": policy,
                "allowFrom": known,
                "groups": { "G-mention": {}, "G-all": { "requireMention": false } }
            }),
        );
        let (channel, inbox) = FakeChannel::new(CH);
        let app = App::new(
            app_parts(dir.path(), &url, LimitsConfig::default()),
            vec![channel.clone() as Arc<dyn Channel>],
        )
        .unwrap();
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let serving = tokio::spawn({
            let (app, channel) = (app.clone(), channel.clone() as Arc<dyn Channel>);
            async move { app.serve(vec![channel], stop).await }
        });
        for case in &cases {
            inbox.send(case.message.clone()).await.unwrap();
        }
        drop(inbox);
        assert!(serving.await.unwrap(), "every turn finished");

        let sent = channel.sent();
        let asked: Vec<String> = fake.chat_requests().iter().map(last_user_message).collect();
        for case in &cases {
            let want = expected(policy, case.chat, case.known, case.mentioned);
            let what = format!(
                "{policy} {:?} known={} mentioned={}",
                case.chat, case.known, case.mentioned
            );
            let replies = texts(
                &sent
                    .iter()
                    .filter(|o| o.reply_to.as_deref() == Some(&case.message.msg_id))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            let stored = stm(dir.path(), &case.user);
            let to_model = asked.iter().filter(|t| **t == case.message.text).count();
            match want {
                Outcome::Answered => {
                    assert_eq!(replies, [format!("echo: {}", case.message.text)], "{what}");
                    assert_eq!(to_model, 1, "{what}");
                    assert_eq!(stored.len(), 2, "{what}: the message and the answer are stored");
                }
                Outcome::PairingCode => {
                    assert_eq!(replies.len(), 1, "{what}");
                    assert!(replies[0].contains("pairing code"), "{what}: {replies:?}");
                    assert_eq!(to_model, 0, "{what}");
                    assert!(stored.is_empty(), "{what}");
                }
                Outcome::Silent => {
                    assert!(replies.is_empty(), "{what}: {replies:?}");
                    assert_eq!(to_model, 0, "{what}");
                    assert!(stored.is_empty(), "{what}");
                }
            }
        }
    }
}

#[test]
fn the_cli_takes_negative_group_ids_and_refuses_unknown_channels_and_impossible_ids() {
    let state = tempfile::tempdir().unwrap();
    let root = state.path();

    let (ok, out) = crate::harness::mnemo_access(root, &["groups", "add", "telegram", "-1001234567890"]);
    assert!(
        ok,
        "a Telegram group id as docs/access-control.md writes it works without `--`: {out}"
    );
    let rules = std::fs::read_to_string(mnemo_sessions::Layout::new(root, "telegram").access_path()).unwrap();
    assert!(rules.contains("-1001234567890"), "{rules}");

    // A group with a memory of its own, observing, as the operator asks.
    let (ok, out) = crate::harness::mnemo_access(
        root,
        &[
            "groups",
            "add",
            "telegram",
            "-1001234567890",
            "--shared-memory",
            "--observe",
        ],
    );
    assert!(
        ok && out.contains("from the group's own memory, keeping what it reads unasked"),
        "{out}"
    );
    let rules = std::fs::read_to_string(mnemo_sessions::Layout::new(root, "telegram").access_path()).unwrap();
    assert!(
        rules.contains(r#""memory": "shared""#) && rules.contains(r#""observe": true"#),
        "{rules}"
    );
    let (_, listed) = crate::harness::mnemo_access(root, &["list", "telegram"]);
    assert!(listed.contains("memory: shared, observing"), "{listed}");
    let (ok, out) = crate::harness::mnemo_access(root, &["groups", "add", "telegram", "-100999", "--observe"]);
    assert!(
        !ok && out.contains("--shared-memory"),
        "observing needs a group memory: {out}"
    );

    let (ok, out) = crate::harness::mnemo_access(root, &["allow", "telgram", "42"]);
    assert!(!ok && out.contains("did you mean `telegram`"), "{out}");
    assert!(!root.join("channels/telgram").exists(), "no folder for a typo");

    let (ok, out) = crate::harness::mnemo_access(root, &["allow", "telegram", "@alice"]);
    assert!(!ok && out.contains("not a telegram user id"), "{out}");
    let (ok, out) = crate::harness::mnemo_access(root, &["allow", "slack", "U0123ABCD"]);
    assert!(ok, "{out}");
}
