//! Folding: past the threshold a fold summarizes the older messages into
//! the rolling summary and the profile, and the view keeps the recent ones.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::SafeName;

specs![
    a_fold_summarizes_older_messages_and_learns_their_facts,
    a_failing_summarizer_changes_nothing_then_the_bound_retires_the_oldest,
];

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

async fn a_failing_summarizer_changes_nothing_then_the_bound_retires_the_oldest(s: Subject) {
    let ada = SafeName::of("ada");
    s.summarizer.down.store(true, std::sync::atomic::Ordering::SeqCst);
    s.chat("ada", 0, 25, "words").await;
    let before = s.user("ada").await.view(50, at(30)).await.unwrap();
    assert_eq!(s.store.fold(&ada, at(30)).await.unwrap(), Some("summarizer_failed"));
    let after = s.user("ada").await.view(50, at(31)).await.unwrap();
    assert_eq!(after, before, "a failed fold changes nothing a turn sees");
    // Past `stm.maxMessages` (30) and `compacting.maxFailures` (2), the
    // oldest are retired unsummarized, still in the archive.
    s.chat("ada", 25, 8, "more words").await;
    let retired = s.store.fold(&ada, at(40)).await.unwrap();
    assert!(matches!(retired, Some("fallback" | "sliding_window")), "{retired:?}");
    let mut mine = s.user("ada").await;
    let status = mine.status().await.unwrap();
    assert!(status.stm_messages <= 30, "{status:?}");
    assert_eq!(status.stm_messages + status.archived_messages, 33, "{status:?}");
    let view = mine.view(50, at(41)).await.unwrap();
    assert_eq!(view.recent.last().unwrap().text, "more words 32");
}
