//! The `/session` commands end to end: chat text in, reply out, and each
//! user's data reachable only by that user. Two users carry canary strings;
//! no command of one may read, count, export or delete anything of the
//! other's.

use super::support::*;
use chrono::NaiveDate;
use mnemo_sessions::commands::{Caller, HELP, Reply, SessionCommand, execute, parse};
use mnemo_sessions::profile::{self, Owner};
use mnemo_sessions::report::{files_under, user_roots, user_storage};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::summarizer::{Fact, FactSection};
use mnemo_sessions::topics::{self, TopicWrite};
use mnemo_sessions::{SafeName, archive, summary};
use std::collections::BTreeMap;
use std::io::Read;

const NOW: &str = "2026-03-20T12:00:00Z";

/// Gives `user` data everywhere a user can have data, each piece carrying
/// `canary`.
async fn populate(stm: &Stm, user: &str, canary: &str) {
    let layout = stm.layout();
    let name = SafeName::of(user);
    say(stm, user, "2026-03-20T09:00:00Z", &format!("{canary} message one")).await;
    say(stm, user, "2026-03-20T09:01:00Z", &format!("{canary} message two")).await;
    let mut rolling = summary::empty(&name);
    rolling.body = format!("{canary} rolling summary\n");
    summary::write(layout, &name, &rolling).unwrap();
    let fact = Fact {
        section: FactSection::Preferences,
        key: "drink".into(),
        value: format!("{canary} tea"),
    };
    profile::merge_facts(
        layout,
        &name,
        Owner::default(),
        profile::Learned {
            facts: &[fact],
            batch: &[],
        },
        4000,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        utc(NOW),
    )
    .unwrap();
    for slug in ["trip", &format!("{user}-only")] {
        let body = format!("{canary} note {slug}\n");
        topics::write(
            layout,
            &name,
            slug,
            TopicWrite {
                title: slug,
                tags: &[],
                body: &body,
            },
            mnemo_sessions::versions::Change {
                by: mnemo_sessions::versions::Author::Command,
                what: "test",
            },
            utc(NOW),
        )
        .unwrap();
    }
    let daily = layout.daily_path(&name, NaiveDate::from_ymd_opt(2026, 3, 19).unwrap());
    std::fs::create_dir_all(daily.parent().unwrap()).unwrap();
    std::fs::write(&daily, format!("{canary} daily\n")).unwrap();
    let weekly = layout.weekly_path(&name, 2026, 11);
    std::fs::create_dir_all(weekly.parent().unwrap()).unwrap();
    std::fs::write(&weekly, format!("{canary} weekly\n")).unwrap();
    archive::write_batch(
        layout,
        &name,
        &[record("2026-03-01T09:00:00Z", &format!("{canary} archived"))],
    )
    .unwrap();
}

async fn two_users() -> (tempfile::TempDir, Stm) {
    let (dir, stm) = channel();
    populate(&stm, "alice", "CANARY-ALICE").await;
    populate(&stm, "bob", "CANARY-BOB").await;
    (dir, stm)
}

async fn as_user(stm: &Stm, user: &str, text: &str) -> Reply {
    let command = parse(text, Some("MnemoBot")).unwrap_or_else(|| panic!("{text:?} is a command"));
    let name = SafeName::of(user);
    execute(
        crate::files_user(stm, &name).await.as_mut(),
        Caller {
            user: &name,
            display_name: Some("Alice"),
            max_profile_chars: 4000,
            here: None,
        },
        &command,
        utc(NOW),
    )
    .await
}

/// The files of `user` under the sessions folder, relative, with contents.
fn files_of(stm: &Stm, user: &str) -> BTreeMap<String, Vec<u8>> {
    let layout = stm.layout();
    let mut out = BTreeMap::new();
    for root in user_roots(layout, &SafeName::of(user)).unwrap() {
        for (path, _) in files_under(&root).unwrap() {
            let rel = path.strip_prefix(layout.root()).unwrap().to_string_lossy().into_owned();
            out.insert(rel, std::fs::read(&path).unwrap());
        }
    }
    out
}

/// The whole tree minus alice's own paths and the derived recall indexes.
fn everything_but_alices(stm: &Stm) -> BTreeMap<String, Vec<u8>> {
    let alice: Vec<String> = files_of(stm, "alice").into_keys().collect();
    tree(stm.layout().root())
        .into_iter()
        .filter(|(k, _)| !alice.contains(k) && !k.contains("alice") && !k.starts_with("recall/") && k != "exports/")
        .collect()
}

/// What bob finds when he searches his memory for his canary.
async fn bob_search_hits(stm: &Stm) -> String {
    as_user(stm, "bob", "/session search CANARY-BOB").await.text
}

#[tokio::test]
async fn read_only_commands_see_only_the_callers_data_and_change_nothing() {
    let (_dir, stm) = two_users().await;
    let before = tree(stm.layout().root());
    for text in [
        "/session status",
        "/session profile",
        "/session help",
        "/session bogus",
        "/session",
    ] {
        let reply = as_user(&stm, "alice", text).await;
        assert!(
            !reply.text.contains("CANARY-BOB") && !reply.text.contains("bob"),
            "{text}: {}",
            reply.text
        );
        assert_eq!(reply.export, None);
    }
    assert_eq!(tree(stm.layout().root()), before, "reading changed a file");

    let status = as_user(&stm, "alice", "/session status").await.text;
    let own = user_storage(&stm, &SafeName::of("alice")).unwrap();
    assert!(
        status.contains("2 messages in short-term memory, 1 archived"),
        "{status}"
    );
    assert!(status.contains("1 profile entry, 2 topic notes"), "{status}");
    assert!(status.contains(&format!("in {} files", own.files)), "{status}");
    assert!(status.contains("for Alice"), "{status}");

    let profile = as_user(&stm, "alice", "/session profile").await.text;
    assert!(
        profile.contains("CANARY-ALICE tea") && profile.contains("alice-only"),
        "{profile}"
    );
    assert!(as_user(&stm, "alice", "/session bogus").await.text.contains(HELP));
}

#[tokio::test]
async fn export_holds_every_file_of_the_caller_and_none_of_another_users() {
    let (_dir, stm) = two_users().await;
    let bob_before = everything_but_alices(&stm);
    let expected = files_of(&stm, "alice");
    let reply = as_user(&stm, "alice", "/session export").await;
    let bundle = reply.export.clone().expect("an export path");
    assert!(bundle.starts_with(stm.layout().exports_dir()));
    assert!(
        reply.text.contains(&format!("{} files", expected.len())),
        "{}",
        reply.text
    );

    let mut unpacked = BTreeMap::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&bundle).unwrap()));
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        unpacked.insert(path, bytes);
    }
    for (path, bytes) in &expected {
        assert_eq!(unpacked.get(path), Some(bytes), "{path} missing or different");
    }
    let readme = String::from_utf8(unpacked["README.txt"].clone()).unwrap();
    assert!(
        readme.contains("stm/alice/messages.jsonl\n    your recent messages"),
        "{readme}"
    );
    assert_eq!(unpacked.len(), expected.len() + 1, "the README only besides the files");
    for (path, bytes) in &unpacked {
        assert!(!path.contains("bob"), "{path}");
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains("CANARY-BOB"), "{path} leaks bob's data");
    }
    // The archive batch is gzip: check bob's canary is not inside either.
    let archived = archive::read_all(stm.layout(), &SafeName::of("alice")).unwrap();
    assert!(archived.iter().all(|r| !r.text.contains("CANARY-BOB")));
    assert_eq!(everything_but_alices(&stm), bob_before);
}

#[tokio::test]
async fn clear_removes_only_the_callers_short_term_memory() {
    let (_dir, stm) = two_users().await;
    let layout = stm.layout().clone();
    let bob_before = everything_but_alices(&stm);
    let reply = as_user(&stm, "alice", "/session clear").await;
    assert!(reply.text.contains("2 messages"), "{}", reply.text);
    let alice = SafeName::of("alice");
    assert!(!layout.stm_dir(&alice).exists());
    assert!(layout.profile_path(&alice).exists(), "long-term memory is kept");
    assert_eq!(everything_but_alices(&stm), bob_before);
}

#[tokio::test]
async fn clear_all_removes_everything_of_the_caller_and_nothing_of_anyone_elses() {
    let (_dir, stm) = two_users().await;
    let layout = stm.layout().clone();
    as_user(&stm, "alice", "/session export").await;
    as_user(&stm, "bob", "/session export").await;
    let bob_before = everything_but_alices(&stm);
    let bob_hits = bob_search_hits(&stm).await;
    assert!(bob_hits.contains("Found 10 matches"), "{bob_hits}");

    let asked = as_user(&stm, "alice", "/session clear all").await;
    assert!(
        asked.text.contains("This would delete") && asked.text.contains("/session clear all confirm"),
        "{}",
        asked.text
    );
    assert!(!files_of(&stm, "alice").is_empty(), "asking deletes nothing");
    let reply = as_user(&stm, "alice", "/session clear all confirm").await;
    assert!(reply.text.contains("Deleted everything"), "{}", reply.text);
    assert!(files_of(&stm, "alice").is_empty());
    assert!(
        tree(layout.root()).keys().all(|k| !k.contains("alice")),
        "{:?}",
        tree(layout.root()).keys()
    );
    assert!(
        tree(layout.root())
            .values()
            .all(|v| !String::from_utf8_lossy(v).contains("CANARY-ALICE"))
    );
    assert_eq!(everything_but_alices(&stm), bob_before);
    assert_eq!(bob_search_hits(&stm).await, bob_hits);
    let alice_hits = as_user(&stm, "alice", "/session search CANARY-ALICE archived")
        .await
        .text;
    assert!(alice_hits.starts_with("I found nothing"), "{alice_hits}");
    assert_eq!(
        as_user(&stm, "alice", "/session clear all confirm").await.text,
        "I had nothing stored about you."
    );
}

#[tokio::test]
async fn forget_deletes_only_the_callers_topic_and_says_when_nothing_matches() {
    let (_dir, stm) = two_users().await;
    let layout = stm.layout().clone();
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    let reply = as_user(&stm, "alice", "/session forget TRIP").await;
    assert!(reply.text.contains("Forgot"), "{}", reply.text);
    assert!(!layout.topic_path(&alice, &SafeName::of("trip")).unwrap().exists());
    assert!(layout.topic_path(&bob, &SafeName::of("trip")).unwrap().exists());

    let before = tree(layout.root());
    let reply = as_user(&stm, "alice", "/session forget bob-only").await;
    assert!(
        reply.text.contains("no fact or topic note that matches") && reply.text.contains("alice-only"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("bob-only"));
    assert_eq!(tree(layout.root()), before);
}

#[tokio::test]
async fn hostile_topic_names_are_refused_without_touching_any_file() {
    let (_dir, stm) = two_users().await;
    let layout = stm.layout().clone();
    let before = tree(layout.root());
    for topic in [
        "../x",
        "..%2f",
        "a\0b",
        "..",
        "../bob/trip",
        "/etc/passwd",
        "_shared/../../x",
        "trip/../../bob",
    ] {
        let command = SessionCommand::Forget {
            topic: topic.to_string(),
        };
        let alice = SafeName::of("alice");
        let reply = execute(
            crate::files_user(&stm, &alice).await.as_mut(),
            Caller {
                user: &alice,
                display_name: None,
                max_profile_chars: 4000,
                here: None,
            },
            &command,
            utc(NOW),
        )
        .await;
        assert!(reply.text.contains("Nothing was deleted"), "{topic:?}: {}", reply.text);
        assert_eq!(tree(layout.root()), before, "{topic:?} touched a file");
    }
    let reply = as_user(&stm, "alice", "/session forget ../x").await;
    assert!(reply.text.contains("Nothing was deleted"), "{}", reply.text);
    assert_eq!(tree(layout.root()), before);
}

#[tokio::test]
async fn a_user_named_shared_cannot_reach_the_operators_notes() {
    let (_dir, stm) = channel();
    let layout = stm.layout().clone();
    let note = layout.shared_topics_dir().join("rules.md");
    std::fs::create_dir_all(note.parent().unwrap()).unwrap();
    std::fs::write(&note, "---\ntitle: rules\n---\n\nbe kind\n").unwrap();
    let before = tree(layout.root());
    as_user(&stm, "_shared", "/session forget rules").await;
    as_user(&stm, "_shared", "/session clear all confirm").await;
    assert_eq!(tree(layout.root()), before);
}

#[tokio::test]
async fn search_finds_the_callers_memory_in_every_source_and_nothing_of_anyone_elses() {
    let (_dir, stm) = two_users().await;
    let bob_before = everything_but_alices(&stm);
    let reply = as_user(&stm, "alice", "/session search canary").await.text;
    assert!(reply.starts_with("Found 10 matches"), "{reply}");
    for piece in [
        "[2026-03-20, you] CANARY-ALICE message",
        "[2026-03-01, you] CANARY-ALICE archived",
        "[summary 2026-03-19] CANARY-ALICE daily",
        "[summary 2026-W11] CANARY-ALICE weekly",
        "[note: trip] CANARY-ALICE note trip",
        "CANARY-ALICE rolling summary",
        "[profile] - drink: CANARY-ALICE tea",
        "fact] drink: CANARY-ALICE tea",
    ] {
        assert!(reply.contains(piece), "{piece:?} missing from {reply}");
    }
    for query in [
        "/session search canary bob",
        "/session search CANARY-BOB bob-only",
        "/session search bob",
    ] {
        let reply = as_user(&stm, "alice", query).await.text;
        assert!(
            !reply.contains("CANARY-BOB") && !reply.contains("bob-only"),
            "{query}: {reply}"
        );
    }
    assert_eq!(
        everything_but_alices(&stm),
        bob_before,
        "searching writes nothing of bob's"
    );
}

#[tokio::test]
async fn search_is_a_memory_revealing_command() {
    let command = parse("/session search dentist appointment", None).unwrap();
    assert_eq!(
        command,
        SessionCommand::Search {
            words: "dentist appointment".into()
        }
    );
    assert!(command.reveals_memory());
    assert!(!parse("/session help", None).unwrap().reveals_memory());
    assert_eq!(
        parse("/session search", None),
        Some(SessionCommand::Search { words: String::new() }),
        "a search without words is answered, not unknown"
    );
}
