//! The `/session` application command as Discord registers it: one command
//! with a subcommand per action of DESIGN §5. Only the shape lives here; the
//! broker answers the commands, and the handler registers this at start.

use serenity::all::{CommandOptionType, CreateCommand, CreateCommandOption};

/// The command's name, as typed after the slash.
pub const NAME: &str = "session";

/// Subcommands and their descriptions. `clear-all` reaches the broker as
/// `/session clear all` and `forget-confirm` as `/session forget confirm …`
/// (Discord names cannot contain spaces).
const SUBCOMMANDS: [(&str, &str); 20] = [
    (
        "status",
        "Your message count, summary age, long-term entries and storage use",
    ),
    (
        "clear",
        "Clear your recent messages and rolling summary (long-term memory kept)",
    ),
    (
        "clear-all",
        "Clear all your data: messages, long-term memory, topics, summaries, archive",
    ),
    ("profile", "Show your long-term profile"),
    (
        "forget",
        "Forget a fact (by key, or list the ones matching words), a topic note or a document (by id)",
    ),
    ("forget-confirm", "Forget every fact matching these words (undoable)"),
    ("export", "All your data as one archive file"),
    ("search", "Search your own memory"),
    ("remember", "Add a note to your long-term memory"),
    ("history", "Recent changes to your long-term memory"),
    ("undo", "Take back the last change to your long-term memory"),
    (
        "remind",
        "I message you here at a time: +10m, +2h, +3d or 2026-12-24T09:00:00+01:00",
    ),
    ("reminders", "Your reminders waiting for their time"),
    ("reminders-cancel", "Cancel one of your reminders by its id"),
    (
        "timezone",
        "Show or set your timezone (an IANA name like Europe/Lisbon)",
    ),
    ("documents", "The documents you sent me that I keep, with their ids"),
    (
        "clear-group",
        "In a channel with its own memory: delete it (server admins only)",
    ),
    (
        "link",
        "One memory for your accounts on several platforms: get a code, or link with one",
    ),
    ("unlink", "Give that platform's account its own memory again"),
    ("help", "What these commands do"),
];

/// A subcommand's arguments, in the order they follow it in the text
/// form: name, description, required.
fn arguments(subcommand: &str) -> &'static [(&'static str, &'static str, bool)] {
    match subcommand {
        "forget" => &[("topic", "The fact's key, words it holds, or a topic note's name", true)],
        "forget-confirm" => &[("words", "Words the facts to forget hold", true)],
        "search" => &[("words", "What to look for", true)],
        "remember" => &[("text", "What to remember", true)],
        "history" => &[("topic", "Only this topic note's changes", false)],
        "remind" => &[
            ("when", "+10m, +2h, +3d, or a date and time with its offset", true),
            ("text", "What to remind you of", true),
        ],
        "reminders-cancel" => &[("id", "The reminder's id (see /session reminders)", true)],
        "timezone" => &[("zone", "An IANA name like Europe/Lisbon; empty shows yours", false)],
        "link" => &[("code", "The code your other account got; empty gets one here", false)],
        "unlink" => &[("platform", "telegram, slack or discord", true)],
        _ => &[],
    }
}

/// The command definition sent to Discord at start.
pub fn session() -> CreateCommand {
    SUBCOMMANDS.iter().fold(
        CreateCommand::new(NAME).description("Manage what the bot remembers about you"),
        |cmd, (name, description)| {
            let mut sub = CreateCommandOption::new(CommandOptionType::SubCommand, *name, *description);
            if *name == "clear-all" {
                sub = sub.add_sub_option(
                    CreateCommandOption::new(
                        CommandOptionType::String,
                        "confirm",
                        "Type confirm to delete; without it you are told what would go",
                    )
                    .add_string_choice("confirm", "confirm"),
                );
            }
            for (arg, description, required) in arguments(name) {
                sub = sub.add_sub_option(
                    CreateCommandOption::new(CommandOptionType::String, *arg, *description).required(*required),
                );
            }
            cmd.add_option(sub)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_session_action_is_a_subcommand_and_forget_search_and_remember_require_their_words() {
        let json = serde_json::to_value(session()).unwrap_or_default();
        assert_eq!(json["name"], "session");
        let names: Vec<&str> = json["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "status",
                "clear",
                "clear-all",
                "profile",
                "forget",
                "forget-confirm",
                "export",
                "search",
                "remember",
                "history",
                "undo",
                "remind",
                "reminders",
                "reminders-cancel",
                "timezone",
                "documents",
                "clear-group",
                "link",
                "unlink",
                "help"
            ]
        );
        let remind = &json["options"][11];
        assert_eq!(remind["options"][0]["name"], "when");
        assert_eq!(remind["options"][1]["name"], "text");
        assert_eq!(json["options"][13]["options"][0]["name"], "id");
        let search = &json["options"][7];
        assert_eq!(json["options"][8]["options"][0]["name"], "text");
        assert_eq!(json["options"][9]["options"][0]["required"], false);
        assert_eq!(search["options"][0]["name"], "words");
        assert_eq!(search["options"][0]["required"], true);
        let forget = &json["options"][4];
        assert_eq!(forget["type"], 1, "a subcommand");
        assert_eq!(forget["options"][0]["name"], "topic");
        assert_eq!(forget["options"][0]["required"], true);
    }
}
