//! The `/session` grammar (DESIGN §5): turns one chat text into a
//! [`SessionCommand`], or says it is not a `/session` command at all.
//!
//! Pure text in, value out: it never touches the file system and never
//! decides what a topic name may be (the topic store refuses hostile names
//! when the command is executed).

/// One parsed `/session` command. Every action acts on the caller's own data
/// only; the parser carries no user or channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionCommand {
    /// Your message count, summary age, LTM entries and storage use.
    Status,
    /// Clear your STM and rolling summary; LTM is kept.
    Clear,
    /// Say what `clear all` would delete and how to confirm; deletes nothing.
    ClearAll,
    /// `clear all confirm`: delete everything stored about you.
    ClearAllConfirmed,
    /// `clear group`: delete a shared group's own memory (its admins only;
    /// the broker checks who is one with the platform).
    ClearGroup,
    /// Show your long-term profile.
    Profile,
    /// Forget a fact by key or a topic note by name, or else list the facts
    /// holding these words. `topic` is what the user typed, trimmed, never
    /// empty.
    Forget { topic: String },
    /// `forget confirm <words>`: forget every fact holding the words.
    ForgetConfirmed { words: String },
    /// Add a note to your long-term memory; `text` is never empty.
    Remember { text: String },
    /// The kept versions of your long-term memory, or of one topic note.
    History { topic: Option<String> },
    /// Revert the last change to your long-term memory.
    Undo,
    /// Bundle everything stored about you into one archive file.
    Export,
    /// Search your own memory. `words` is what the user typed, trimmed,
    /// never empty.
    Search { words: String },
    /// `remind <when> <text>`: a reminder in this chat. `when` is the
    /// first word as typed; `text` the rest (checked when executed).
    Remind { when: String, text: String },
    /// `reminders`: your reminders waiting for their time.
    Reminders,
    /// `documents`: the documents you sent that memory keeps.
    Documents,
    /// `reminders cancel <id>`.
    CancelReminder { id: String },
    /// `timezone [zone]`: show, or set to an IANA zone name.
    Timezone { zone: Option<String> },
    /// `link`: a one-time code to send from another platform, and the
    /// accounts linked now; `link CODE`: link this account to the one the
    /// code came from. Answered by the broker (it knows the platforms).
    Link { code: Option<String> },
    /// `unlink <platform>`: the account on that platform has its own
    /// memory again.
    Unlink { platform: String },
    /// The list of commands.
    Help,
    /// `/session` with an action we do not know, or a known action with
    /// arguments it does not take (e.g. `clear everything`, `forget` without
    /// a topic). Answered with the help text, never guessed at: a typo must
    /// not clear anything.
    Unknown { action: String },
}

impl SessionCommand {
    /// Whether the answer shows the caller's memory (DESIGN §5): such an
    /// answer asked in a group goes to the caller alone, never to the group.
    /// Exhaustive on purpose, so a new command must decide.
    pub fn reveals_memory(&self) -> bool {
        match self {
            // `forget` may list the facts its words match; `undo` names
            // what it put back.
            SessionCommand::Status
            | SessionCommand::Profile
            | SessionCommand::Search { .. }
            | SessionCommand::Export
            | SessionCommand::Forget { .. }
            | SessionCommand::History { .. }
            | SessionCommand::Reminders
            | SessionCommand::Documents
            | SessionCommand::Timezone { .. }
            | SessionCommand::Link { .. }
            | SessionCommand::Undo => true,
            // `remember` echoes only a key made of what the user just typed.
            SessionCommand::Clear
            | SessionCommand::ClearAll
            | SessionCommand::ClearAllConfirmed
            | SessionCommand::ClearGroup
            | SessionCommand::ForgetConfirmed { .. }
            | SessionCommand::Remember { .. }
            // `remind` echoes what was just typed; `cancel` only the id.
            | SessionCommand::Remind { .. }
            | SessionCommand::CancelReminder { .. }
            | SessionCommand::Unlink { .. }
            | SessionCommand::Help
            | SessionCommand::Unknown { .. } => false,
        }
    }
}

/// The command word, compared case-insensitively.
const COMMAND: &str = "/session";

/// Parses `text` as a `/session` command.
///
/// Accepted: `/session <action> [args]` in any case, with any whitespace
/// between words, and Telegram's `/session@botname` form. `bot_name` is this
/// bot's user name (without `@`) when the platform has one: a command
/// addressed to a different bot in a group (`/session@OtherBot`) is not ours
/// and yields `None`. With `bot_name` `None`, any `@name` is accepted.
///
/// `None` for anything that is not this command: plain text, `/sessions`,
/// `/sessionx`, `/session` in the middle of a sentence.
pub fn parse(text: &str, bot_name: Option<&str>) -> Option<SessionCommand> {
    let text = text.trim();
    let (head, rest) = match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    };
    let (word, addressee) = match head.split_once('@') {
        Some((word, name)) => (word, Some(name)),
        None => (head, None),
    };
    if !word.eq_ignore_ascii_case(COMMAND) {
        return None;
    }
    if let Some(name) = addressee {
        if !is_bot_name(name) {
            return None;
        }
        if let Some(ours) = bot_name
            && !name.eq_ignore_ascii_case(ours.trim_start_matches('@'))
        {
            return None;
        }
    }
    Some(parse_action(rest))
}

/// Bot user names on Telegram are `[A-Za-z0-9_]`; anything else after `@`
/// (a second `@`, punctuation) means this was not a command word.
fn is_bot_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The words of `args`, lower-cased, for multi-word actions.
fn words(args: &str) -> impl Iterator<Item = String> + '_ {
    args.split_whitespace().map(str::to_ascii_lowercase)
}

fn parse_action(rest: &str) -> SessionCommand {
    if rest.is_empty() {
        return SessionCommand::Help;
    }
    let (action, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    let unknown = || SessionCommand::Unknown {
        action: rest.to_string(),
    };
    match action.to_ascii_lowercase().as_str() {
        "status" if args.is_empty() => SessionCommand::Status,
        "clear" if args.is_empty() => SessionCommand::Clear,
        "clear" if args.eq_ignore_ascii_case("all") => SessionCommand::ClearAll,
        "clear" if words(args).eq(["all", "confirm"]) => SessionCommand::ClearAllConfirmed,
        "clear" if args.eq_ignore_ascii_case("group") => SessionCommand::ClearGroup,
        "profile" if args.is_empty() => SessionCommand::Profile,
        "export" if args.is_empty() => SessionCommand::Export,
        "help" => SessionCommand::Help,
        "forget" if words(args).next().as_deref() == Some("confirm") && words(args).nth(1).is_some() => {
            SessionCommand::ForgetConfirmed {
                words: args["confirm".len()..].trim().to_string(),
            }
        }
        "forget" if !args.is_empty() => SessionCommand::Forget {
            topic: args.to_string(),
        },
        // With no words it is still a search: its reply asks for them.
        "search" => SessionCommand::Search {
            words: args.to_string(),
        },
        "remember" if !args.is_empty() => SessionCommand::Remember { text: args.to_string() },
        "history" => SessionCommand::History {
            topic: (!args.is_empty()).then(|| args.to_string()),
        },
        "undo" if args.is_empty() => SessionCommand::Undo,
        // Without a time or words it is still `remind`: its reply says how.
        "remind" => {
            let (when, text) = match args.find(char::is_whitespace) {
                Some(i) => (&args[..i], args[i..].trim()),
                None => (args, ""),
            };
            SessionCommand::Remind {
                when: when.to_string(),
                text: text.to_string(),
            }
        }
        "link" if args.is_empty() => SessionCommand::Link { code: None },
        "link" => SessionCommand::Link {
            code: Some(args.to_string()),
        },
        "unlink" if !args.is_empty() && !args.contains(char::is_whitespace) => SessionCommand::Unlink {
            platform: args.to_ascii_lowercase(),
        },
        "reminders" if args.is_empty() => SessionCommand::Reminders,
        "documents" if args.is_empty() => SessionCommand::Documents,
        "reminders" => match args.split_whitespace().collect::<Vec<_>>()[..] {
            [cancel, id] if cancel.eq_ignore_ascii_case("cancel") => {
                SessionCommand::CancelReminder { id: id.to_string() }
            }
            _ => unknown(),
        },
        "timezone" if args.split_whitespace().count() <= 1 => SessionCommand::Timezone {
            zone: (!args.is_empty()).then(|| args.to_string()),
        },
        _ => unknown(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionCommand::*;

    fn p(text: &str) -> Option<SessionCommand> {
        parse(text, None)
    }

    #[test]
    fn every_documented_action_parses() {
        assert_eq!(p("/session status"), Some(Status));
        assert_eq!(p("/session clear"), Some(Clear));
        assert_eq!(p("/session clear all"), Some(ClearAll));
        assert_eq!(p("/session clear  ALL confirm"), Some(ClearAllConfirmed));
        assert!(matches!(p("/session clear all now"), Some(Unknown { .. })));
        assert_eq!(p("/session clear GROUP"), Some(ClearGroup));
        assert_eq!(p("/session link"), Some(Link { code: None }));
        assert_eq!(
            p("/session link k7qm4-xwpab"),
            Some(Link {
                code: Some("k7qm4-xwpab".into())
            })
        );
        assert_eq!(
            p("/session unlink Slack"),
            Some(Unlink {
                platform: "slack".into()
            })
        );
        assert!(matches!(p("/session unlink"), Some(Unknown { .. })));
        assert!(matches!(p("/session clear group now"), Some(Unknown { .. })));
        assert_eq!(p("/session profile"), Some(Profile));
        assert_eq!(p("/session forget toeic"), Some(Forget { topic: "toeic".into() }));
        assert_eq!(p("/session export"), Some(Export));
        assert_eq!(p("/session help"), Some(Help));
        assert_eq!(
            p("/session remember I like tea"),
            Some(Remember {
                text: "I like tea".into()
            })
        );
        assert_eq!(p("/session history"), Some(History { topic: None }));
        assert_eq!(
            p("/session history boat"),
            Some(History {
                topic: Some("boat".into())
            })
        );
        assert_eq!(p("/session undo"), Some(Undo));
        assert_eq!(
            p("/session remind +10m  call the bank"),
            Some(Remind {
                when: "+10m".into(),
                text: "call the bank".into()
            })
        );
        assert_eq!(
            p("/session remind"),
            Some(Remind {
                when: String::new(),
                text: String::new()
            })
        );
        assert_eq!(p("/session reminders"), Some(Reminders));
        assert_eq!(p("/session documents"), Some(Documents));
        assert!(matches!(p("/session documents all"), Some(Unknown { .. })));
        assert_eq!(
            p("/session reminders CANCEL k3f9qa"),
            Some(CancelReminder { id: "k3f9qa".into() })
        );
        assert!(matches!(p("/session reminders delete k3f9qa"), Some(Unknown { .. })));
        assert_eq!(p("/session timezone"), Some(Timezone { zone: None }));
        assert_eq!(
            p("/session timezone Europe/Lisbon"),
            Some(Timezone {
                zone: Some("Europe/Lisbon".into())
            })
        );
        assert!(matches!(p("/session timezone Europe Lisbon"), Some(Unknown { .. })));
        assert_eq!(
            p("/session forget CONFIRM tea  time"),
            Some(ForgetConfirmed {
                words: "tea  time".into()
            })
        );
        assert_eq!(
            p("/session forget confirm"),
            Some(Forget {
                topic: "confirm".into()
            })
        );
        assert!(matches!(p("/session undo everything"), Some(Unknown { .. })));
        assert!(matches!(p("/session remember"), Some(Unknown { .. })));
    }

    #[test]
    fn case_and_extra_spaces_do_not_matter() {
        assert_eq!(p("  /SESSION   Clear \t ALL  "), Some(ClearAll));
        assert_eq!(p("/Session\tstatus"), Some(Status));
        assert_eq!(
            p("/session forget   TOEIC prep  "),
            Some(Forget {
                topic: "TOEIC prep".into()
            })
        );
    }

    #[test]
    fn bare_command_and_help_with_words_show_help() {
        assert_eq!(p("/session"), Some(Help));
        assert_eq!(p("/session help me please"), Some(Help));
    }

    #[test]
    fn telegram_bot_suffix_is_accepted_only_for_this_bot() {
        assert_eq!(parse("/session@MnemoBot status", Some("mnemobot")), Some(Status));
        assert_eq!(parse("/session@MnemoBot status", Some("@MnemoBot")), Some(Status));
        assert_eq!(parse("/session@OtherBot clear all", Some("MnemoBot")), None);
        assert_eq!(parse("/session@AnyBot status", None), Some(Status));
        assert_eq!(p("/session@ status"), None);
        assert_eq!(p("/session@bad-name status"), None);
    }

    #[test]
    fn look_alike_commands_and_plain_text_are_not_commands() {
        for text in [
            "/sessions status",
            "/sessionx status",
            "/session-status",
            "session status",
            "please /session status",
            "hello",
            "",
            "   ",
            "/status",
        ] {
            assert_eq!(p(text), None, "{text:?}");
        }
    }

    #[test]
    fn unknown_or_malformed_actions_are_never_guessed() {
        assert_eq!(p("/session stats"), Some(Unknown { action: "stats".into() }));
        assert_eq!(
            p("/session clear everything"),
            Some(Unknown {
                action: "clear everything".into()
            })
        );
        assert_eq!(
            p("/session forget"),
            Some(Unknown {
                action: "forget".into()
            })
        );
        assert_eq!(
            p("/session status now"),
            Some(Unknown {
                action: "status now".into()
            })
        );
    }

    #[test]
    fn hostile_topics_reach_the_executor_verbatim() {
        assert_eq!(p("/session forget ../x"), Some(Forget { topic: "../x".into() }));
        assert_eq!(p("/session forget a\0b"), Some(Forget { topic: "a\0b".into() }));
    }
}
