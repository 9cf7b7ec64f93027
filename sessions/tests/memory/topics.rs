//! Topic notes: a user's own, the operator's shared ones, and the refusal of
//! hostile names before any file is touched.

use super::support::{at, sandbox, snapshot, write};
use mnemo_sessions::SafeName;
use mnemo_sessions::topics::{self, TopicError, TopicWrite};

fn note<'a>(title: &'a str, body: &'a str) -> TopicWrite<'a> {
    TopicWrite { title, tags: &[], body }
}

#[test]
fn a_user_writes_lists_reads_and_forgets_own_topics() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    topics::write(
        &sb.layout,
        &user,
        "toeic",
        note("TOEIC prep", "- aiming for 860\n"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();
    topics::write(
        &sb.layout,
        &user,
        "Cooking",
        note("Cooking", "- ramen\n"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 5),
    )
    .unwrap();

    let listed: Vec<String> = topics::list(&sb.layout, &user)
        .unwrap()
        .into_iter()
        .map(|t| t.slug)
        .collect();
    assert_eq!(listed, ["cooking", "toeic"]);
    let toeic = topics::read(&sb.layout, &user, "TOEIC").unwrap().unwrap();
    assert_eq!(
        (toeic.meta.title.as_str(), toeic.meta.owner.as_str()),
        ("TOEIC prep", "U1")
    );
    assert_eq!(toeic.body, "- aiming for 860\n");

    topics::write(
        &sb.layout,
        &user,
        "toeic",
        note("TOEIC prep", "- got 870\n"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(2, 0),
    )
    .unwrap();
    let toeic = topics::read(&sb.layout, &user, "toeic").unwrap().unwrap();
    assert_eq!(
        (toeic.meta.created, toeic.meta.updated),
        (Some(at(1, 0)), Some(at(2, 0)))
    );

    topics::delete(
        &sb.layout,
        &user,
        "toeic",
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
    )
    .unwrap();
    assert!(topics::read(&sb.layout, &user, "toeic").unwrap().is_none());
    assert!(matches!(
        topics::delete(
            &sb.layout,
            &user,
            "toeic",
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test"
            },
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
        ),
        Err(TopicError::NotFound { .. })
    ));
}

#[test]
fn forget_deletes_only_the_callers_own_topic() {
    let sb = sandbox();
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    topics::write(
        &sb.layout,
        &bob,
        "toeic",
        note("Bob's", "bob\n"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();
    let shared = sb.layout.shared_topics_dir().join("rules.md");
    write(&shared, "---\ntitle: House rules\nslug: rules\n---\n\nBe kind.\n");

    assert!(matches!(
        topics::delete(
            &sb.layout,
            &alice,
            "toeic",
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test"
            },
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
        ),
        Err(TopicError::NotFound { .. })
    ));
    assert!(matches!(
        topics::delete(
            &sb.layout,
            &alice,
            "rules",
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test"
            },
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
        ),
        Err(TopicError::NotFound { .. })
    ));
    assert!(topics::read(&sb.layout, &bob, "toeic").unwrap().is_some());
    assert!(shared.exists());
    assert_eq!(
        topics::read_shared(&sb.layout, "rules").unwrap().unwrap().body,
        "Be kind.\n"
    );
    assert_eq!(topics::list_shared(&sb.layout).unwrap()[0].title, "House rules");
}

#[test]
fn the_reserved_shared_name_cannot_own_topics() {
    let sb = sandbox();
    let shared_user = SafeName::of("_shared");
    let err = topics::write(
        &sb.layout,
        &shared_user,
        "x",
        note("x", "x"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap_err();
    assert!(matches!(err, TopicError::ReservedOwner));
    assert!(matches!(
        topics::delete(
            &sb.layout,
            &shared_user,
            "x",
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test"
            },
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
        ),
        Err(TopicError::ReservedOwner)
    ));
    assert!(!sb.layout.topics_root().exists());
}

#[test]
fn hostile_topic_slugs_are_refused_without_touching_any_file() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    topics::write(
        &sb.layout,
        &user,
        "real",
        note("Real", "keep me\n"),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();
    // Bait at every place a traversal could land.
    write(&sb.layout.topics_root().join("x.md"), "bait");
    write(&sb.layout.ltm_root().join("x.md"), "bait");
    write(&sb.layout.root().join("x.md"), "bait");
    write(&sb.layout.shared_topics_dir().join("x.md"), "---\ntitle: x\n---\n");
    let before = snapshot(sb.dir.path());

    let huge = "a".repeat(100_000);
    for slug in [
        "../x",
        "../../x",
        "..%2fx",
        "..%2F..%2Fx",
        "x\0",
        "\0",
        "",
        "   ",
        ".",
        "..",
        "a/b",
        "/etc/passwd",
        "x.md",
        &huge,
    ] {
        let write_err = topics::write(
            &sb.layout,
            &user,
            slug,
            note("t", "b"),
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test",
            },
            at(2, 0),
        )
        .unwrap_err();
        let delete_err = topics::delete(
            &sb.layout,
            &user,
            slug,
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test",
            },
            chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        )
        .unwrap_err();
        let read_err = topics::read(&sb.layout, &user, slug).unwrap_err();
        for err in [write_err, delete_err, read_err] {
            assert!(matches!(err, TopicError::InvalidSlug { .. }), "{slug:?}: {err}");
            assert!(err.to_string().len() < 300, "the error does not echo huge input");
        }
        assert!(matches!(
            topics::read_shared(&sb.layout, slug),
            Err(TopicError::InvalidSlug { .. })
        ));
    }
    assert_eq!(
        snapshot(sb.dir.path()),
        before,
        "no file was created, changed or removed"
    );
}

#[test]
fn an_oversized_topic_is_refused() {
    let sb = sandbox();
    let body = "x".repeat(topics::MAX_TOPIC_BYTES + 1);
    let err = topics::write(
        &sb.layout,
        &SafeName::of("U1"),
        "big",
        note("big", &body),
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap_err();
    assert!(matches!(err, TopicError::TooLarge { .. }));
}

#[test]
fn ongoing_topic_facts_fill_a_note_without_repeating_themselves() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    let (slug, changed) = topics::merge_fact(
        &sb.layout,
        &user,
        "TOEIC 860 prep",
        "studying listening",
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(1, 0),
    )
    .unwrap();
    assert_eq!((slug.as_str(), changed), ("toeic-860-prep", true));
    let (_, changed) = topics::merge_fact(
        &sb.layout,
        &user,
        "toeic 860 prep",
        "Studying  listening",
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(2, 0),
    )
    .unwrap();
    assert!(!changed, "the same value is not added twice");
    topics::merge_fact(
        &sb.layout,
        &user,
        "TOEIC 860 prep",
        "mock test: 820",
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        at(3, 0),
    )
    .unwrap();
    let note = topics::read(&sb.layout, &user, "toeic-860-prep").unwrap().unwrap();
    assert_eq!(note.meta.title, "TOEIC 860 prep");
    assert_eq!(
        note.body,
        "- 2026-03-01: studying listening\n- 2026-03-01: mock test: 820\n"
    );
    assert_eq!(note.meta.tags, ["toeic-860-prep"]);
}
