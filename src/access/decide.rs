//! The access decision, as a pure function of the rules and the message:
//! no I/O, no clock, no randomness, so every policy × chat × sender ×
//! mention case is a plain table test.
//!
//! It must stay pure: pairing codes, replies and file updates belong to
//! `pairing` and `gate`, which act on what this returns.

use super::file::{AccessFile, DmPolicy, GroupMemory};
use mnemo_channels::{ChatKind, Inbound};
use std::fmt;

/// The console channel: the local owner at the keyboard, always allowed.
pub const CONSOLE: &str = "console";

/// What to do with one message, as far as access goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go on with the turn. `greet_paired`: the operator approved this
    /// sender and they have not been told yet.
    Allow { greet_paired: bool },
    /// A group with `memory: "shared"`: `answer` the message from the
    /// group's own memory, or (`observe: true`, the bot not addressed)
    /// only keep it there as the group's context.
    Group { answer: bool },
    /// Drop it without a word (a reply would tell a stranger the bot exists
    /// and cost a platform call).
    Ignore(IgnoreReason),
    /// A stranger's direct message under `pairing`: the pairing flow decides
    /// what, if anything, to say. The model never sees it.
    Pair,
}

/// Why a message was ignored; logged with the ids, never with the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// `dmPolicy` is `disabled`.
    DirectMessagesDisabled,
    /// `dmPolicy` is `allowlist` and the sender is not in `allowFrom`.
    NotInAllowFrom,
    /// The group is not opted in under `groups`.
    GroupNotEnabled,
    /// The group requires a mention and there was none.
    NotMentioned,
    /// The group has its own `allowFrom` and the sender is not in it.
    NotInGroupAllowFrom,
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IgnoreReason::DirectMessagesDisabled => "direct messages are disabled (dmPolicy disabled)",
            IgnoreReason::NotInAllowFrom => "sender not in allowFrom (dmPolicy allowlist)",
            IgnoreReason::GroupNotEnabled => "group not opted in under groups",
            IgnoreReason::NotMentioned => "group requires a mention",
            IgnoreReason::NotInGroupAllowFrom => "sender not in the group's allowFrom",
        })
    }
}

impl IgnoreReason {
    /// A short code for the `reason` metric label.
    pub fn label(self) -> &'static str {
        match self {
            IgnoreReason::DirectMessagesDisabled => "dm_disabled",
            IgnoreReason::NotInAllowFrom => "not_in_allow_from",
            IgnoreReason::GroupNotEnabled => "group_not_enabled",
            IgnoreReason::NotMentioned => "not_mentioned",
            IgnoreReason::NotInGroupAllowFrom => "not_in_group_allow_from",
        }
    }
}

/// Decides `message` under `access`. Groups are governed by `groups` alone
/// (opt-in by chat id; `dmPolicy` is about direct messages), and no one is
/// ever paired in a group, where the code would be public.
pub fn decide(access: &AccessFile, message: &Inbound) -> Decision {
    if message.channel == CONSOLE {
        return Decision::Allow { greet_paired: false };
    }
    let sender = message.user_id.as_str();
    match message.chat_kind {
        ChatKind::Direct => {
            let known = access.allow_from.contains(sender);
            let allow = Decision::Allow {
                greet_paired: known && access.approved.iter().any(|n| n.user_id == sender),
            };
            match access.dm_policy {
                DmPolicy::Disabled => Decision::Ignore(IgnoreReason::DirectMessagesDisabled),
                DmPolicy::Open => allow,
                DmPolicy::Allowlist if known => allow,
                DmPolicy::Allowlist => Decision::Ignore(IgnoreReason::NotInAllowFrom),
                DmPolicy::Pairing if known => allow,
                DmPolicy::Pairing => Decision::Pair,
            }
        }
        ChatKind::Group => {
            let Some(rule) = access.groups.get(&message.chat_id) else {
                return Decision::Ignore(IgnoreReason::GroupNotEnabled);
            };
            // A group's `allowFrom` also bounds what is observed: someone
            // the operator did not let in is not kept either.
            if rule.allow_from.as_ref().is_some_and(|list| !list.contains(sender)) {
                return Decision::Ignore(IgnoreReason::NotInGroupAllowFrom);
            }
            let unasked = rule.require_mention && !message.addressed;
            match rule.memory {
                GroupMemory::Shared if unasked && rule.observe => Decision::Group { answer: false },
                _ if unasked => Decision::Ignore(IgnoreReason::NotMentioned),
                GroupMemory::Shared => Decision::Group { answer: true },
                GroupMemory::PerUser => Decision::Allow { greet_paired: false },
            }
        }
    }
}

/// The rules to run on while `access.json` is corrupt: strangers get
/// nothing (no pairing, no groups), the senders the last good copy allowed
/// keep talking, and a `disabled` channel stays disabled. Never `open`.
pub fn restrictive_fallback(last_good: Option<&AccessFile>) -> AccessFile {
    let dm_policy = match last_good.map(|f| f.dm_policy) {
        Some(DmPolicy::Disabled) => DmPolicy::Disabled,
        _ => DmPolicy::Allowlist,
    };
    AccessFile {
        dm_policy,
        allow_from: last_good.map(|f| f.allow_from.clone()).unwrap_or_default(),
        ..AccessFile::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::file::{ApprovedNotice, GroupMemory, GroupRule};
    use chrono::Utc;

    fn msg(channel: &str, kind: ChatKind, chat: &str, user: &str, addressed: bool) -> Inbound {
        Inbound {
            channel: channel.into(),
            user_id: user.into(),
            user_name: None,
            chat_id: chat.into(),
            chat_kind: kind,
            thread_id: None,
            msg_id: "m1".into(),
            text: "hello".into(),
            ts: Utc::now(),
            addressed,
            interaction: None,
            attachments: Vec::new(),
        }
    }

    fn rules(policy: DmPolicy) -> AccessFile {
        let mut f = AccessFile {
            dm_policy: policy,
            ..AccessFile::default()
        };
        f.allow_from.insert("known".into());
        f.groups.insert("G-mention".into(), GroupRule::default());
        f.groups.insert(
            "G-open".into(),
            GroupRule {
                require_mention: false,
                ..GroupRule::default()
            },
        );
        let only_known = GroupRule {
            require_mention: false,
            allow_from: Some(["known".to_string()].into()),
            ..GroupRule::default()
        };
        f.groups.insert("G-known-only".into(), only_known);
        let shared = GroupRule {
            memory: GroupMemory::Shared,
            ..GroupRule::default()
        };
        f.groups.insert("G-shared".into(), shared.clone());
        let observed = GroupRule {
            observe: true,
            allow_from: Some(["known".to_string()].into()),
            ..shared
        };
        f.groups.insert("G-observed".into(), observed);
        f
    }

    const ALLOW: Decision = Decision::Allow { greet_paired: false };

    #[test]
    fn direct_messages_follow_the_dm_policy() {
        use Decision::*;
        use IgnoreReason::*;
        let table = [
            (DmPolicy::Pairing, "known", ALLOW),
            (DmPolicy::Pairing, "stranger", Pair),
            (DmPolicy::Allowlist, "known", ALLOW),
            (DmPolicy::Allowlist, "stranger", Ignore(NotInAllowFrom)),
            (DmPolicy::Open, "known", ALLOW),
            (DmPolicy::Open, "stranger", ALLOW),
            (DmPolicy::Disabled, "known", Ignore(DirectMessagesDisabled)),
            (DmPolicy::Disabled, "stranger", Ignore(DirectMessagesDisabled)),
        ];
        for (policy, user, expected) in table {
            for addressed in [true, false] {
                let m = msg("slack", ChatKind::Direct, "D1", user, addressed);
                assert_eq!(
                    decide(&rules(policy), &m),
                    expected,
                    "{policy:?} {user} addressed={addressed}"
                );
            }
        }
    }

    #[test]
    fn groups_are_opt_in_and_ignore_the_dm_policy() {
        use Decision::*;
        use IgnoreReason::*;
        for policy in [
            DmPolicy::Pairing,
            DmPolicy::Allowlist,
            DmPolicy::Open,
            DmPolicy::Disabled,
        ] {
            let r = rules(policy);
            let d = |chat: &str, user: &str, addressed: bool| {
                decide(&r, &msg("tg", ChatKind::Group, chat, user, addressed))
            };
            for user in ["known", "stranger"] {
                assert_eq!(d("G-other", user, true), Ignore(GroupNotEnabled));
                assert_eq!(d("G-mention", user, true), ALLOW);
                assert_eq!(d("G-mention", user, false), Ignore(NotMentioned));
                assert_eq!(d("G-open", user, false), ALLOW);
            }
            assert_eq!(d("G-known-only", "known", false), ALLOW);
            assert_eq!(d("G-known-only", "stranger", true), Ignore(NotInGroupAllowFrom));
        }
    }

    #[test]
    fn a_shared_group_answers_from_its_memory_and_observes_only_when_told() {
        use Decision::*;
        use IgnoreReason::*;
        let r = rules(DmPolicy::Pairing);
        let d =
            |chat: &str, user: &str, addressed: bool| decide(&r, &msg("tg", ChatKind::Group, chat, user, addressed));
        assert_eq!(d("G-shared", "stranger", true), Group { answer: true });
        assert_eq!(d("G-shared", "stranger", false), Ignore(NotMentioned));
        assert_eq!(d("G-observed", "known", true), Group { answer: true });
        assert_eq!(d("G-observed", "known", false), Group { answer: false });
        // Someone the group's allowFrom leaves out is neither answered nor kept.
        assert_eq!(d("G-observed", "stranger", false), Ignore(NotInGroupAllowFrom));
        // The same chat id in a direct chat is never the group.
        assert_eq!(
            decide(&r, &msg("tg", ChatKind::Direct, "G-shared", "known", true)),
            ALLOW
        );
    }

    #[test]
    fn the_console_is_the_local_owner() {
        let r = rules(DmPolicy::Disabled);
        assert_eq!(
            decide(&r, &msg(CONSOLE, ChatKind::Direct, "console", "anyone", true)),
            ALLOW
        );
    }

    #[test]
    fn an_approved_sender_is_greeted_once_known() {
        let mut r = rules(DmPolicy::Pairing);
        r.approved.push(ApprovedNotice {
            user_id: "known".into(),
            approved_at: Utc::now(),
        });
        let m = msg("tg", ChatKind::Direct, "D", "known", true);
        assert_eq!(decide(&r, &m), Decision::Allow { greet_paired: true });
        r.allow_from.clear(); // revoked after approval: no greeting, no entry
        assert_eq!(decide(&r, &m), Decision::Pair);
    }

    #[test]
    fn the_fallback_is_never_more_open_than_the_last_good_file() {
        let mut good = rules(DmPolicy::Open);
        let f = restrictive_fallback(Some(&good));
        assert_eq!(f.dm_policy, DmPolicy::Allowlist);
        assert!(f.allow_from.contains("known") && f.groups.is_empty() && f.pending.is_empty());
        good.dm_policy = DmPolicy::Disabled;
        assert_eq!(restrictive_fallback(Some(&good)).dm_policy, DmPolicy::Disabled);
        let none = restrictive_fallback(None);
        assert!(none.allow_from.is_empty());
        let stranger = msg("tg", ChatKind::Direct, "D", "stranger", true);
        assert_eq!(decide(&none, &stranger), Decision::Ignore(IgnoreReason::NotInAllowFrom));
    }
}
