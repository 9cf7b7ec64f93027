//! Two accounts' memories made one on every store (linking, issue 37):
//! another account's whole memory is read and merged into a user's by
//! time through the seam, keeping what intake stored meanwhile; merging it
//! again adds nothing; what a turn then reads — the recent messages,
//! recall, the profile — holds both, undo takes the merge back from the
//! profile, and the other's memory is deleted.

use super::specs;
use super::subject::{Subject, at, record};
use mnemo_sessions::SafeName;
use mnemo_sessions::store::EditBy;
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::versions::Author;
use mnemo_sessions::whole::merge::Sides;

specs![a_merged_memory_holds_both_by_time_and_undo_takes_back_its_profile];

fn by(m: i64) -> EditBy {
    EditBy {
        by: Author::Tool,
        max_chars: 4000,
        now: at(m),
    }
}

async fn a_merged_memory_holds_both_by_time_and_undo_takes_back_its_profile(s: Subject) {
    let (home, other) = (SafeName::of("ada"), SafeName::of("ada-elsewhere"));
    // Ada's 24 messages (folded: 19 archived), then the other account's,
    // overlapping in time and in message ids (m10…m33 against m0…m23).
    s.chat("ada", 0, 24, "lighthouse").await;
    assert!(s.store.fold(&home, at(30)).await.unwrap().is_some());
    s.chat("ada-elsewhere", 10, 24, "harbour").await;
    s.user("ada")
        .await
        .remember(by(40), FactSection::Facts, "home city: Paris")
        .await
        .unwrap();
    s.user("ada-elsewhere")
        .await
        .remember(by(41), FactSection::Facts, "home city: Rome")
        .await
        .unwrap();

    let mut theirs = s.user("ada-elsewhere").await;
    let moved = theirs.whole().await.unwrap();
    let mut mine = s.user("ada").await;
    let before = mine.whole().await.unwrap();
    // Stored for Ada by intake while the merge is under way: kept.
    let meanwhile = record(60, "arrived meanwhile");
    s.store.intake(&home, &meanwhile, at(60), 50).await.unwrap();
    let sides = Sides {
        home: &home,
        other: &other,
        from: "elsewhere",
    };
    mine.merge_in(&moved, sides, at(61)).await.unwrap();
    let after = mine.whole().await.unwrap();
    assert_eq!(after.messages.len(), before.messages.len() + moved.messages.len() + 1);
    // Merging the same memory again adds nothing.
    mine.merge_in(&moved, sides, at(62)).await.unwrap();
    let twice = mine.whole().await.unwrap();
    assert_eq!(twice.tally(), after.tally(), "merged twice");
    assert_eq!(twice.profile, after.profile, "merged twice");
    assert_eq!(twice.summary, after.summary, "merged twice");
    assert_eq!(twice.facts, after.facts, "merged twice");
    assert_eq!(twice.topics, after.topics, "merged twice");
    assert_eq!(twice.versions, after.versions, "merged twice");
    assert!(twice.same_as(&after), "merged twice");
    theirs.clear_all().await.unwrap();
    drop(theirs);

    // The turn's view: both accounts' latest messages, by time.
    let view = mine.view(5, at(62)).await.unwrap();
    let recent: Vec<&str> = view.recent.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        recent,
        [
            "harbour 30",
            "harbour 31",
            "harbour 32",
            "harbour 33",
            "arrived meanwhile"
        ]
    );
    // Recall and search find either account's words.
    for word in ["lighthouse", "harbour"] {
        let found = mine.search(word, 50).await.unwrap();
        assert!(found.iter().any(|i| i.text.contains(word)), "{word}: {found:?}");
    }
    // Both facts, the other's beside the home's.
    assert_eq!(mine.matching("Paris").await.unwrap().len(), 1);
    let rome = mine.matching("Rome").await.unwrap();
    assert_eq!(rome.len(), 1, "{rome:?}");
    // Undo takes back what the merge did to the profile.
    let undone = mine.undo(Author::Command, at(63)).await.unwrap().unwrap();
    assert_eq!(undone.file_label(), "profile");
    assert!(mine.matching("Rome").await.unwrap().is_empty());
    assert_eq!(mine.matching("Paris").await.unwrap().len(), 1);
    drop(mine);
    // The other account's memory is gone.
    let held = s.user("ada-elsewhere").await.held().await.unwrap();
    assert_eq!(held.count, 0, "{held:?}");
}
