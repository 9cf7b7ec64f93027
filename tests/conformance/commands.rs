//! Every `/session` command answers the same words on every store (the
//! replies are written once, above the seam; the stores only count and
//! change).

use super::specs;
use super::subject::Subject;
use mnemo_sessions::commands::{self, HELP, memory as replies};

specs![
    status_counts_the_callers_memory,
    remember_forget_history_and_undo_answer_the_same_words,
    profile_shows_the_facts_and_topic_notes,
    search_finds_what_the_user_said_before,
    clear_forgets_short_term_memory_and_keeps_the_profile,
    clear_all_asks_first_then_deletes_everything,
    help_and_unknown_commands_list_the_commands,
];

async fn status_counts_the_callers_memory(s: Subject) {
    let empty = s.say("ada", "status").await.text;
    assert!(
        empty.starts_with("Your memory here:\n• 0 messages in short-term memory, 0 archived"),
        "{empty}"
    );
    assert!(empty.contains("• no rolling summary yet"), "{empty}");
    assert!(
        empty.contains("• long-term: 0 profile entries, 0 topic notes"),
        "{empty}"
    );
    s.chat("ada", 0, 3, "hello").await;
    s.say("ada", "remember I keep bees").await;
    let status = s.say("ada", "status").await.text;
    assert!(
        status.contains("• 3 messages in short-term memory, 0 archived"),
        "{status}"
    );
    assert!(
        status.contains("• long-term: 1 profile entry, 0 topic notes"),
        "{status}"
    );
}

async fn remember_forget_history_and_undo_answer_the_same_words(s: Subject) {
    let reply = s.say("ada", "remember my bike is blue").await.text;
    assert_eq!(reply, replies::remembered("my-bike-is-blue"));
    s.say("ada", "remember my car is blue").await;
    let preview = s.say("ada", "forget blue").await.text;
    assert!(preview.starts_with("This would forget 2 facts:"), "{preview}");
    assert!(preview.contains("/session forget confirm blue"), "{preview}");
    let profile = s.say("ada", "profile").await.text;
    assert!(
        profile.contains("my bike is blue"),
        "a preview deletes nothing: {profile}"
    );
    let reply = s.say("ada", "forget confirm blue").await.text;
    assert_eq!(reply, replies::forgot_confirmed(2));
    let history = s.say("ada", "history").await.text;
    assert!(history.contains("forgot 2 facts by your command"), "{history}");
    let undo = s.say("ada", "undo").await.text;
    assert!(undo.starts_with("Undid the last change to your profile"), "{undo}");
    assert!(s.say("ada", "profile").await.text.contains("my car is blue"));
    let reply = s.say("ada", "forget my-bike-is-blue").await.text;
    assert_eq!(
        reply,
        replies::forgot(&mnemo_sessions::edits::Forgotten::Fact {
            key: "my-bike-is-blue".into()
        })
    );
    let nothing = s.say("ada", "forget submarine").await.text;
    assert!(
        nothing.starts_with("I have no fact or topic note that matches."),
        "{nothing}"
    );
    let long = format!("remember {}", "x".repeat(400));
    let reply = s.say("ada", &long).await.text;
    assert_eq!(reply, replies::invalid("the text is longer than 300 characters"));
}

async fn profile_shows_the_facts_and_topic_notes(s: Subject) {
    let none = s.say("ada", "profile").await.text;
    assert_eq!(none, "I have no long-term profile for you yet.");
    s.say("ada", "remember I keep bees").await;
    let profile = s.say("ada", "profile").await.text;
    assert!(profile.starts_with("What I remember about you:\n\n"), "{profile}");
    assert!(profile.contains("I keep bees"), "{profile}");
}

async fn search_finds_what_the_user_said_before(s: Subject) {
    s.chat("ada", 0, 4, "the heliotrope blooms").await;
    let found = s.say("ada", "search heliotrope").await.text;
    assert!(found.starts_with("Found "), "{found}");
    assert!(found.contains("heliotrope blooms"), "{found}");
    let nothing = s.say("ada", "search zeppelin").await.text;
    assert!(
        nothing.starts_with("I found nothing in your memory for that."),
        "{nothing}"
    );
    for bare in ["search", "search ?!"] {
        assert_eq!(s.say("ada", bare).await.text, commands::NO_WORDS, "{bare}");
    }
}

async fn clear_forgets_short_term_memory_and_keeps_the_profile(s: Subject) {
    let nothing = s.say("ada", "clear").await.text;
    assert_eq!(
        nothing,
        "There was nothing in your short-term memory. Your long-term notes are kept."
    );
    s.chat("ada", 0, 3, "hello").await;
    s.say("ada", "remember I keep bees").await;
    let cleared = s.say("ada", "clear").await.text;
    assert_eq!(
        cleared,
        "Cleared our recent conversation (3 messages) and its summary. Your long-term profile and notes are kept."
    );
    let view = s.user("ada").await.view(10, super::subject::at(10)).await.unwrap();
    assert!(view.recent.is_empty(), "{view:?}");
    assert!(s.say("ada", "profile").await.text.contains("I keep bees"));
}

async fn clear_all_asks_first_then_deletes_everything(s: Subject) {
    let nothing = s.say("ada", "clear all").await.text;
    assert_eq!(
        nothing,
        "I have nothing stored about you, so there is nothing to clear."
    );
    s.chat("ada", 0, 3, "hello").await;
    s.say("ada", "remember I keep bees").await;
    let preview = s.say("ada", "clear all").await.text;
    assert!(
        preview.starts_with("This would delete everything I store about you here"),
        "{preview}"
    );
    assert!(
        preview.ends_with("To go ahead, send `/session clear all confirm`."),
        "{preview}"
    );
    assert!(
        s.say("ada", "profile").await.text.contains("I keep bees"),
        "a preview deletes nothing"
    );
    let done = s.say("ada", "clear all confirm").await.text;
    assert!(done.starts_with("Deleted everything I stored about you here"), "{done}");
    assert_eq!(
        s.say("ada", "profile").await.text,
        "I have no long-term profile for you yet."
    );
    assert_eq!(
        s.say("ada", "clear all confirm").await.text,
        "I had nothing stored about you."
    );
}

async fn help_and_unknown_commands_list_the_commands(s: Subject) {
    assert_eq!(s.say("ada", "help").await.text, HELP);
    let unknown = s.say("ada", "frobnicate").await.text;
    assert_eq!(unknown, format!("I don't know that /session command.\n\n{HELP}"));
}
