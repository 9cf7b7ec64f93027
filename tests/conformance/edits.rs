//! Long-term memory edits on the seam: remember, update and forget keep
//! versions that undo takes back, a topic note is forgotten by its name,
//! and hostile keys and texts are refused with nothing written.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::edits::Forgotten;
use mnemo_sessions::store::{EditBy, StoreError};
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::versions::Author;

specs![
    remember_update_forget_and_undo_keep_versions,
    hostile_keys_and_texts_are_refused_and_nothing_is_written,
    a_topic_note_from_a_fold_is_forgotten_by_name_and_brought_back,
];

fn by(author: Author, m: i64) -> EditBy {
    EditBy {
        by: author,
        max_chars: 4000,
        now: at(m),
    }
}

async fn remember_update_forget_and_undo_keep_versions(s: Subject) {
    let mut mine = s.user("ada").await;
    let key = mine
        .remember(by(Author::Tool, 1), FactSection::Facts, "home city: Paris")
        .await
        .unwrap();
    assert_eq!(key, "home-city-paris");
    mine.update(by(Author::Tool, 2), &key, "Rome").await.unwrap();
    let facts = mine.matching("Rome").await.unwrap();
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].key, "home-city-paris");
    let found = mine.search("Rome", 10).await.unwrap();
    assert!(found.iter().any(|i| i.text.contains("Rome")), "{found:?}");
    let forgotten = mine.forget(by(Author::Tool, 3), "home-city-paris").await.unwrap();
    assert_eq!(
        forgotten,
        Forgotten::Fact {
            key: "home-city-paris".into()
        }
    );
    assert!(mine.matching("Rome").await.unwrap().is_empty());
    let found = mine.search("Rome", 10).await.unwrap();
    assert!(
        found.iter().all(|i| !i.text.contains("Rome")),
        "forgotten, not found: {found:?}"
    );
    let history = mine.history().await.unwrap();
    assert_eq!(history.len(), 3, "one version per change: {history:?}");
    assert!(history.iter().all(|v| v.by == Author::Tool));
    let undone = mine.undo(Author::Command, at(4)).await.unwrap().unwrap();
    assert_eq!(undone.file_label(), "profile");
    assert_eq!(undone.undone, Some(at(4)));
    assert_eq!(mine.matching("Rome").await.unwrap().len(), 1, "undo brought it back");
    // The change undone stays in the history, marked; the next undo goes
    // further back (the update), not forward again.
    let history = mine.history().await.unwrap();
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(
        history.iter().map(|v| v.undone).collect::<Vec<_>>(),
        [Some(at(4)), None, None]
    );
    let text = mnemo_sessions::commands::memory::history_text(history, None);
    assert!(
        text.contains(&format!("(undone {})", at(4).format("%Y-%m-%d %H:%M UTC"))),
        "{text}"
    );
    let second = mine.undo(Author::Command, at(5)).await.unwrap().unwrap();
    assert_eq!(
        (second.seq, second.undone),
        (history_seq(&mine.history().await.unwrap(), 1), Some(at(5)))
    );
    assert!(mine.matching("Rome").await.unwrap().is_empty(), "back to Paris");
    assert_eq!(mine.matching("Paris").await.unwrap().len(), 1);
    mine.update(by(Author::Tool, 5), "home-city-paris", "Rome")
        .await
        .unwrap();
    let removed = mine
        .forget_facts(by(Author::Command, 5), &["home-city-paris"])
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert!(matches!(
        mine.update(by(Author::Tool, 6), "home-city-paris", "Oslo").await,
        Err(StoreError::NotFound)
    ));
}

/// The seq of the `i`th newest version.
fn history_seq(history: &[mnemo_sessions::versions::Version], i: usize) -> u64 {
    history[i].seq
}

async fn hostile_keys_and_texts_are_refused_and_nothing_is_written(s: Subject) {
    let mut mine = s.user("ada").await;
    for key in ["a\u{0}b", &"k".repeat(65), "a\nb", "k: v", ""] {
        let refused = mine.forget(by(Author::Tool, 1), key).await.unwrap_err();
        assert!(matches!(refused, StoreError::Invalid(_)), "{key:?}: {refused}");
    }
    for key in ["../etc/passwd", "../../spec0/bob", "_shared"] {
        let refused = mine.forget(by(Author::Tool, 1), key).await.unwrap_err();
        assert!(matches!(refused, StoreError::NotFound), "{key:?}: {refused}");
    }
    let long = "x".repeat(301);
    let refused = mine
        .remember(by(Author::Tool, 1), FactSection::Notes, &long)
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Invalid(_)), "{refused}");
    let refused = mine
        .remember(by(Author::Tool, 1), FactSection::Notes, "  \n ")
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Invalid(_)), "{refused}");
    assert!(mine.history().await.unwrap().is_empty());
    assert!(mine.profile().await.unwrap().is_none());
    assert_eq!(mine.held().await.unwrap().count, 0, "nothing was stored");
    // A NUL in a fact is kept out of what is stored (a database cannot
    // hold one), and the fact is there.
    mine.remember(by(Author::Command, 2), FactSection::Notes, "nul \u{0} here")
        .await
        .unwrap();
    let facts = mine.matching("nul").await.unwrap();
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(!facts[0].value.contains('\u{0}'));
}

async fn a_topic_note_from_a_fold_is_forgotten_by_name_and_brought_back(s: Subject) {
    s.chat("ada", 0, 25, "about the trip").await;
    let folded = s
        .store
        .fold(&mnemo_sessions::SafeName::of("ada"), at(30))
        .await
        .unwrap();
    assert_eq!(folded, Some("compacted"));
    let mut mine = s.user("ada").await;
    assert_eq!(
        mine.topic_slugs().await.unwrap(),
        ["boat-trip"],
        "an ongoing topic gets a note"
    );
    let found = mine.search("Ischia", 8).await.unwrap();
    assert!(found.iter().any(|i| i.text.contains("Ischia")), "{found:?}");
    let forgotten = mine.forget(by(Author::Command, 1), "Boat-Trip").await.unwrap();
    assert_eq!(
        forgotten,
        Forgotten::Topic {
            slug: "boat-trip".into()
        }
    );
    assert!(mine.topic_slugs().await.unwrap().is_empty());
    let undone = mine.undo(Author::Command, at(2)).await.unwrap().unwrap();
    assert_eq!(undone.file_label(), "topic boat-trip");
    assert_eq!(mine.topic_slugs().await.unwrap(), ["boat-trip"]);
}
