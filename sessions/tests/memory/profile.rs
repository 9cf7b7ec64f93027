//! The long-term profile: facts are merged, not piled up; it stays under its
//! cap with a visible cut; a broken file is reported and kept.

use super::support::{at, sandbox, write};
use mnemo_sessions::SafeName;
use mnemo_sessions::profile::{self, MergeReport, Owner, ProfileError};
use mnemo_sessions::summarizer::{Fact, FactSection};

fn fact(section: FactSection, key: &str, value: &str) -> Fact {
    Fact {
        section,
        key: key.into(),
        value: value.into(),
    }
}

#[test]
fn profile_merge_does_not_repeat_a_fact_and_replaces_a_changed_one() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    let first = [
        fact(FactSection::Preferences, "Language", "Traditional Chinese"),
        fact(FactSection::Facts, "Exam", "TOEIC"),
    ];
    profile::merge_facts(
        &sb.layout,
        &user,
        Owner::default(),
        profile::Learned {
            facts: &first,
            batch: &[],
        },
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();

    let second = [
        fact(FactSection::Preferences, "language", "traditional chinese"),
        fact(FactSection::Facts, "EXAM", "TOEIC 860"),
        fact(FactSection::Notes, "Exam", "kept apart: another section"),
    ];
    let report = profile::merge_facts(
        &sb.layout,
        &user,
        Owner::default(),
        profile::Learned {
            facts: &second,
            batch: &[],
        },
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(2, 0),
    )
    .unwrap();
    assert_eq!(
        report,
        MergeReport {
            added: 1,
            replaced: 1,
            unchanged: 1,
            ..MergeReport::default()
        }
    );

    let p = profile::read(&sb.layout, &user).unwrap().unwrap();
    assert_eq!(
        profile::bullets(&p, FactSection::Preferences),
        vec![("Language".to_string(), "Traditional Chinese".to_string())]
    );
    assert_eq!(
        profile::bullets(&p, FactSection::Facts),
        vec![("EXAM".to_string(), "TOEIC 860".to_string())]
    );
    assert_eq!(profile::bullets(&p, FactSection::Notes).len(), 1);
    assert_eq!(p.meta.created, Some(at(1, 0)));
    assert_eq!(p.meta.updated, Some(at(2, 0)));
}

#[test]
fn profile_keeps_hand_written_text_and_operator_fields() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    let path = sb.layout.profile_path(&user);
    write(
        &path,
        "---\nuser_id: U1\nchannel: slack\ntags: [toeic]\nvip: true\n---\n\nMet at the 2025 meetup.\n\n## Preferences\n- Timezone: UTC+8\n\n## Pets\n- cat: Mochi\n",
    );
    let facts = [fact(FactSection::Preferences, "language", "English")];
    profile::merge_facts(
        &sb.layout,
        &user,
        Owner {
            display_name: Some("Kevin"),
        },
        profile::Learned {
            facts: &facts,
            batch: &[],
        },
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    for kept in [
        "vip: true",
        "- toeic",
        "Met at the 2025 meetup.",
        "- Timezone: UTC+8",
        "## Pets\n- cat: Mochi",
    ] {
        assert!(text.contains(kept), "{kept:?} lost from:\n{text}");
    }
    assert!(text.contains("display_name: Kevin") && text.contains("- language: English"));
}

#[test]
fn profile_over_its_cap_drops_oldest_entries_with_a_visible_marker() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    for batch in 0..10 {
        let facts: Vec<Fact> = (0..10)
            .map(|i| {
                fact(
                    FactSection::Facts,
                    &format!("fact {batch}-{i}"),
                    "a value of some length",
                )
            })
            .collect();
        profile::merge_facts(
            &sb.layout,
            &user,
            Owner::default(),
            profile::Learned {
                facts: &facts,
                batch: &[],
            },
            1000,
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test",
            },
            at(1, batch),
        )
        .unwrap();
    }
    let body = profile::read_body(&sb.layout, &user).unwrap().unwrap();
    assert!(body.chars().count() <= 1000, "{} chars", body.chars().count());
    let marker = body.lines().next().unwrap();
    assert!(
        marker.starts_with("> mnemo: ") && marker.contains("older entries dropped"),
        "{marker}"
    );
    let kept = body.lines().filter(|l| l.starts_with("- fact")).count();
    let dropped: usize = marker["> mnemo: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert_eq!(kept + dropped, 100, "every fact is either kept or counted as dropped");
    assert!(
        body.contains("fact 9-9") && !body.contains("fact 0-0:"),
        "the newest stay, the oldest go"
    );
}

#[test]
fn profile_with_broken_frontmatter_is_reported_and_kept() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    let path = sb.layout.profile_path(&user);
    let broken = "---\nuser_id: U1\ntags: [unclosed\n---\n\n## Facts\n- job: teacher\n";
    write(&path, broken);

    let facts = [fact(FactSection::Facts, "job", "engineer")];
    let err = profile::merge_facts(
        &sb.layout,
        &user,
        Owner::default(),
        profile::Learned {
            facts: &facts,
            batch: &[],
        },
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap_err();
    assert!(matches!(err, ProfileError::Frontmatter(_)));
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("line"),
        "{msg}"
    );
    assert!(matches!(
        profile::read_body(&sb.layout, &user),
        Err(ProfileError::Frontmatter(_))
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken, "the file is untouched");
}

#[test]
fn a_user_without_a_profile_has_no_profile_body() {
    let sb = sandbox();
    assert_eq!(profile::read_body(&sb.layout, &SafeName::of("nobody")).unwrap(), None);
}
