//! Folding: past the threshold a fold summarizes the older messages into
//! the rolling summary and the profile, and the view keeps the recent ones.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::SafeName;

specs![a_fold_summarizes_older_messages_and_learns_their_facts,];

async fn a_fold_summarizes_older_messages_and_learns_their_facts(s: Subject) {
    s.chat("ada", 0, 24, "my dentist moved").await;
    let mut mine = s.user("ada").await;
    let appended = mine
        .append(&super::subject::record(24, "and now?"), at(24))
        .await
        .unwrap();
    assert!(appended.fold_due, "25 unfolded messages, the threshold is 20");
    drop(mine);
    let label = s.store.fold(&SafeName::of("ada"), at(30)).await.unwrap();
    assert_eq!(label, Some("compacted"));
    let mut mine = s.user("ada").await;
    let view = mine.view(50, at(31)).await.unwrap();
    assert!(
        view.summary.as_deref().is_some_and(|s| s.contains("messages folded")),
        "{view:?}"
    );
    assert!(
        view.profile.as_deref().is_some_and(|p| p.contains("Dr. Okafor")),
        "{view:?}"
    );
    assert!(view.recent.len() < 25, "the older messages left short-term memory");
    assert_eq!(view.recent.last().unwrap().text, "and now?");
    let status = mine.status().await.unwrap();
    assert_eq!(status.stm_messages + status.archived_messages, 25);
    assert!(status.archived_messages > 0);
    assert_eq!(status.profile_entries, Some(2), "the dentist and the boat trip");
    assert_eq!(status.topic_notes, 1);
    // Nothing more to do.
    drop(mine);
    assert_eq!(s.store.fold(&SafeName::of("ada"), at(32)).await.unwrap(), None);
}
