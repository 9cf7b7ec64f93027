//! The index is derived from the markdown and never leaks: rebuilt when
//! missing, stale or corrupt; every search is confined to the caller plus
//! the operator's shared notes.

use crate::support::{at, sandbox, write};
use mnemo_sessions::SafeName;
use mnemo_sessions::index::{self, EntryKind, Query};
use mnemo_sessions::profile::{self, Owner};
use mnemo_sessions::summarizer::{Fact, FactSection};
use mnemo_sessions::topics::{self, TopicWrite};

fn text(q: &str) -> Query {
    Query {
        tags: Vec::new(),
        text: q.into(),
    }
}

fn tag(t: &str) -> Query {
    Query {
        tags: vec![t.into()],
        text: String::new(),
    }
}

/// Paths of the hits, sorted (search orders by recency, which is not the point here).
fn ids(hits: &[index::IndexEntry]) -> Vec<String> {
    let mut paths: Vec<String> = hits.iter().map(|h| h.path.clone()).collect();
    paths.sort();
    paths
}

fn topic(sb: &crate::support::Sandbox, user: &SafeName, slug: &str, tags: &[&str], body: &str) {
    let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
    topics::write(
        &sb.layout,
        user,
        slug,
        TopicWrite {
            title: slug,
            tags: &tags,
            body,
        },
        at(1, 0),
    )
    .unwrap();
}

#[test]
fn search_never_returns_another_users_topic_or_profile() {
    let sb = sandbox();
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    topic(&sb, &alice, "secret", &["private"], "canary-ALICE-7f3a\n");
    topic(&sb, &bob, "secret", &["private"], "canary-BOB-91c2\n");
    let facts = [Fact {
        section: FactSection::Facts,
        key: "pin".into(),
        value: "canary-BOBPROFILE".into(),
    }];
    profile::merge_facts(&sb.layout, &bob, Owner::default(), &facts, 4000, at(1, 0)).unwrap();
    // A user whose id encodes to `_shared` owns a profile, not the shared folder.
    let shared_user = SafeName::of("_shared");
    let facts = [Fact {
        section: FactSection::Facts,
        key: "x".into(),
        value: "canary-SHAREDUSER".into(),
    }];
    profile::merge_facts(&sb.layout, &shared_user, Owner::default(), &facts, 4000, at(1, 0)).unwrap();
    write(
        &sb.layout.shared_topics_dir().join("faq.md"),
        "---\ntitle: FAQ\ntags: [private]\n---\n\ncanary-SHARED\n",
    );

    for query in [text("canary"), tag("private"), text(""), text("secret")] {
        let hits = index::search(&sb.layout, &alice, &query).unwrap();
        for hit in &hits {
            assert!(hit.shared || hit.owner == "alice", "{query:?} leaked {hit:?}");
            assert!(!hit.text.contains("BOB") && !hit.text.contains("SHAREDUSER"), "{hit:?}");
        }
    }
    let hits = index::search(&sb.layout, &alice, &text("CANARY")).unwrap();
    assert_eq!(ids(&hits), ["ltm/topics/_shared/faq.md", "ltm/topics/alice/secret.md"]);
    let hits = index::search(&sb.layout, &bob, &text("canary bob")).unwrap();
    assert_eq!(hits.len(), 2, "bob finds his topic and his profile: {hits:?}");
    assert!(hits.iter().any(|h| h.kind == EntryKind::Profile));
}

#[test]
fn index_is_rebuilt_when_missing_or_corrupt() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    topic(&sb, &user, "toeic", &["exam"], "listening practice\n");
    let path = sb.layout.index_path();

    std::fs::remove_file(&path).unwrap();
    assert_eq!(index::search(&sb.layout, &user, &tag("EXAM")).unwrap().len(), 1);
    assert!(path.exists(), "the rebuilt index is saved");

    for garbage in ["{not json", "", "{\"version\": 99, \"entries\": []}", "\0\0\0"] {
        std::fs::write(&path, garbage).unwrap();
        let hits = index::search(&sb.layout, &user, &text("Listening")).unwrap();
        assert_eq!(ids(&hits), ["ltm/topics/U1/toeic.md"], "after {garbage:?}");
    }
}

#[test]
fn index_follows_files_deleted_or_edited_behind_its_back() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    topic(&sb, &user, "toeic", &[], "listening\n");
    topic(&sb, &user, "cooking", &[], "ramen\n");
    assert_eq!(index::search(&sb.layout, &user, &text("")).unwrap().len(), 2);

    // An operator removes one note and edits the other by hand.
    std::fs::remove_file(sb.layout.topic_path(&user, &SafeName::of("cooking")).unwrap()).unwrap();
    write(
        &sb.layout.topic_path(&user, &SafeName::of("toeic")).unwrap(),
        "---\ntitle: TOEIC\n---\n\nreading now, much more text\n",
    );
    let hits = index::search(&sb.layout, &user, &text("")).unwrap();
    assert_eq!(ids(&hits), ["ltm/topics/U1/toeic.md"]);
    assert!(hits[0].text.contains("reading now"));
    assert!(index::search(&sb.layout, &user, &text("ramen")).unwrap().is_empty());
}

#[test]
fn removing_an_owner_drops_only_that_owners_entries() {
    let sb = sandbox();
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    topic(&sb, &alice, "a", &[], "a\n");
    topic(&sb, &bob, "b", &[], "b\n");
    std::fs::remove_dir_all(sb.layout.user_topics_dir(&alice).unwrap()).unwrap();
    index::remove_owner(&sb.layout, &alice).unwrap();
    let stored = index::load(&sb.layout).unwrap();
    assert_eq!(
        stored.entries.iter().map(|e| e.owner.as_str()).collect::<Vec<_>>(),
        ["bob"]
    );
}

#[test]
fn a_note_with_broken_frontmatter_is_not_searchable_but_does_not_break_search() {
    let sb = sandbox();
    let user = SafeName::of("U1");
    topic(&sb, &user, "good", &[], "findme\n");
    write(
        &sb.layout.topic_path(&user, &SafeName::of("bad")).unwrap(),
        "---\ntags: [\n---\nfindme too\n",
    );
    let hits = index::search(&sb.layout, &user, &text("findme")).unwrap();
    assert_eq!(ids(&hits), ["ltm/topics/U1/good.md"]);
    let rebuilt = index::rebuild(&sb.layout).unwrap();
    assert!(rebuilt.entries.iter().any(|e| e.unreadable && e.id == "bad"));
}
