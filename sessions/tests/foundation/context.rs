//! The context builder: order, the answered message, the token budget and
//! its visible cuts.

use super::support::record;
use mnemo_sessions::context::{Context, ContextInput, Turn, build, build_with_report};
use mnemo_sessions::{Record, Role};

fn input<'a>(recent: &'a [Record], max_tokens: usize) -> ContextInput<'a> {
    ContextInput {
        system_prompt: "You are helpful.",
        profile: Some("Prefers short answers."),
        summary: Some("They talked about trains."),
        recalled: None,
        recent,
        answering: None,
        max_tokens,
    }
}

#[test]
fn sections_come_in_order_and_messages_oldest_first() {
    let recent = [record(0, "hello"), record(1, "hi there")];
    let context = build(&input(&recent, 6000));
    let profile_at = context.system.find("Prefers short answers.").unwrap();
    let summary_at = context.system.find("They talked about trains.").unwrap();
    assert!(context.system.starts_with("You are helpful."));
    assert!(profile_at < summary_at);
    assert_eq!(
        context.turns,
        vec![
            Turn {
                role: Role::User,
                content: "hello".into()
            },
            Turn {
                role: Role::Assistant,
                content: "hi there".into()
            },
        ]
    );
    let (_, report) = build_with_report(&input(&recent, 6000));
    assert!(!report.cut_anything());
}

#[test]
fn missing_or_blank_profile_and_summary_add_no_section() {
    let context = build(&ContextInput {
        profile: None,
        summary: Some("  \n"),
        recalled: None,
        ..input(&[], 6000)
    });
    assert_eq!(context.system, "You are helpful.");
    assert_eq!(
        context,
        Context {
            system: "You are helpful.".into(),
            turns: vec![]
        }
    );
}

#[test]
fn the_answered_message_is_not_duplicated_in_the_turns() {
    let recent = [record(0, "earlier"), record(1, "reply"), record(2, "the question")];
    let context = build(&ContextInput {
        answering: Some("m2"),
        ..input(&recent, 6000)
    });
    assert_eq!(context.turns.len(), 2);
    assert!(context.turns.iter().all(|t| t.content != "the question"));
    assert!(!context.flat().contains("the question"));
}

#[test]
fn over_budget_the_oldest_messages_go_first_and_the_cut_is_marked() {
    // 20 messages of 100 chars (25 tokens each) against a 300-token budget.
    let recent: Vec<_> = (0..20)
        .map(|i| record(i, &format!("{i:03}{}", "x".repeat(97))))
        .collect();
    let (context, report) = build_with_report(&input(&recent, 300));
    assert!(report.omitted_messages > 0);
    assert!(report.estimated_tokens <= 300);
    assert_eq!(context.estimated_tokens(), report.estimated_tokens);
    assert!(
        context
            .system
            .contains(&format!("[{} older messages omitted]", report.omitted_messages))
    );
    let kept = 20 - report.omitted_messages;
    assert_eq!(context.turns.len(), kept);
    assert!(
        context.turns.last().unwrap().content.starts_with("019"),
        "the newest survives"
    );
    assert!(
        context.turns[0]
            .content
            .starts_with(&format!("{:03}", report.omitted_messages))
    );
    // Summary and profile are cut only after every message is gone.
    assert_eq!((report.summary_chars_cut, report.profile_chars_cut), (0, 0));
}

#[test]
fn then_the_summary_then_the_profile_are_clipped_with_a_marker() {
    let summary = "s".repeat(4000);
    let profile = "p".repeat(4000);
    let recent = [record(0, "hello")];
    let base = ContextInput {
        profile: Some(&profile),
        summary: Some(&summary),
        recalled: None,
        ..input(&recent, 0)
    };

    // Room for the whole profile and part of the summary.
    let (context, report) = build_with_report(&ContextInput {
        max_tokens: 1500,
        ..base
    });
    assert_eq!(report.omitted_messages, 1);
    assert!(report.summary_chars_cut > 0 && report.profile_chars_cut == 0);
    assert!(
        context
            .system
            .contains(&format!("…[+{} chars]", report.summary_chars_cut))
    );
    assert!(context.system.contains(&profile));
    assert!(report.estimated_tokens <= 1500 && !report.over_budget);

    // Room for part of the profile only.
    let (context, report) = build_with_report(&ContextInput {
        max_tokens: 600,
        ..base
    });
    assert!(report.profile_chars_cut > 0);
    assert!(
        context
            .system
            .contains(&format!("…[+{} chars]", report.profile_chars_cut))
    );
    assert!(context.system.starts_with("You are helpful."));
    assert!(report.estimated_tokens <= 600 && !report.over_budget);
}

#[test]
fn the_base_prompt_is_never_cut_even_when_it_alone_busts_the_budget() {
    let prompt = "b".repeat(2000);
    let recent = [record(0, "hello")];
    let (context, report) = build_with_report(&ContextInput {
        system_prompt: &prompt,
        ..input(&recent, 256)
    });
    assert!(context.system.starts_with(&prompt));
    assert!(report.over_budget);
    assert!(context.turns.is_empty());
}

#[test]
fn the_budget_holds_for_many_shapes_of_input() {
    for max_tokens in [256, 300, 500, 1000, 3000] {
        for n in [0, 1, 5, 40] {
            for size in [10, 333, 2000] {
                let recent: Vec<_> = (0..n).map(|i| record(i, &"é".repeat(size))).collect();
                let long = "ü".repeat(size * 3);
                let (context, report) = build_with_report(&ContextInput {
                    profile: Some(&long),
                    summary: Some(&long),
                    recalled: None,
                    ..input(&recent, max_tokens)
                });
                assert!(!report.over_budget, "{max_tokens} {n} {size}");
                assert!(context.estimated_tokens() <= max_tokens, "{max_tokens} {n} {size}");
            }
        }
    }
}

#[test]
fn flat_gives_the_system_text_then_a_transcript() {
    let recent = [record(0, "hello"), record(1, "hi!")];
    let context = build(&ContextInput {
        profile: None,
        summary: None,
        recalled: None,
        ..input(&recent, 6000)
    });
    assert_eq!(
        context.flat(),
        "You are helpful.\n\n## Recent conversation\nUser: hello\nAssistant: hi!"
    );
    assert_eq!(
        Context {
            system: "only".into(),
            turns: vec![]
        }
        .flat(),
        "only"
    );
}
