//! Two accounts' memories made one on every store (linking, issue 37):
//! a user's whole memory is read, merged with another's by time and
//! written back through the seam; what a turn then reads — the recent
//! messages, recall, the profile — holds both, undo takes the merge back
//! from the profile, and the other's memory is deleted.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::SafeName;
use mnemo_sessions::store::EditBy;
use mnemo_sessions::summarizer::FactSection;
use mnemo_sessions::versions::Author;
use mnemo_sessions::whole::merge::{Sides, merge};

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
    let mut mine = s.user("ada").await;
    let (before, moved) = (mine.whole().await.unwrap(), theirs.whole().await.unwrap());
    let sides = Sides {
        home: &home,
        other: &other,
        from: "elsewhere",
    };
    let merged = merge(before.clone(), moved.clone(), sides, at(50));
    assert_eq!(merged.messages.len(), before.messages.len() + moved.messages.len());
    mine.replace_whole(&merged, at(50)).await.unwrap();
    assert!(mine.whole().await.unwrap().same_as(&merged), "read back as written");
    theirs.clear_all().await.unwrap();
    drop(theirs);

    // The turn's view: both accounts' latest messages, by time.
    let view = mine.view(5, at(60)).await.unwrap();
    let recent: Vec<&str> = view.recent.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        recent,
        ["harbour 29", "harbour 30", "harbour 31", "harbour 32", "harbour 33"]
    );
    let mut times: Vec<_> = view.recent.iter().map(|r| r.ts).collect();
    times.sort();
    assert_eq!(times, view.recent.iter().map(|r| r.ts).collect::<Vec<_>>());
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
    let undone = mine.undo(Author::Command, at(61)).await.unwrap().unwrap();
    assert_eq!(undone.file_label(), "profile");
    assert!(mine.matching("Rome").await.unwrap().is_empty());
    assert_eq!(mine.matching("Paris").await.unwrap().len(), 1);
    drop(mine);
    // The other account's memory is gone.
    let held = s.user("ada-elsewhere").await.held().await.unwrap();
    assert_eq!(held.count, 0, "{held:?}");
}
