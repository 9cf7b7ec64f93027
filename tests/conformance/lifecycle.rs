//! The life of a user's memory: clear keeps the long term, clear all
//! leaves nothing for recall, export bundles the user's memory and no one
//! else's, and idle short-term memory expires into the archive at
//! maintenance.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::SafeName;
use std::io::Read as _;

specs![
    clear_all_leaves_nothing_for_recall_or_search,
    export_bundles_the_users_memory_and_no_one_elses,
    idle_short_term_memory_expires_into_the_archive_at_maintenance,
    archived_messages_past_their_keep_time_are_deleted_at_maintenance,
];

async fn clear_all_leaves_nothing_for_recall_or_search(s: Subject) {
    s.chat("ada", 0, 24, "the heliotrope blooms").await;
    s.store.fold(&SafeName::of("ada"), at(30)).await.unwrap();
    s.say("ada", "remember heliotrope is my flower").await;
    s.chat("bob", 0, 4, "the heliotrope blooms for bob too").await;
    s.say("ada", "clear all confirm").await;
    let mut ada = s.user("ada").await;
    let recalled = ada.recall("heliotrope", &[], 500).await.unwrap();
    assert!(recalled.items.is_empty(), "{:?}", recalled.items);
    assert!(ada.search("heliotrope", 10).await.unwrap().is_empty());
    let view = ada.view(50, at(40)).await.unwrap();
    assert!(view.recent.is_empty() && view.summary.is_none() && view.profile.is_none());
    assert_eq!(ada.status().await.unwrap().archived_messages, 0);
    drop(ada);
    let view = s.user("bob").await.view(50, at(40)).await.unwrap();
    assert_eq!(view.recent.len(), 4, "the other user keeps theirs");
}

/// The names and bytes of the files in a `.tar.gz` bundle, as stored.
pub fn unpack_bytes(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        out.push((name, bytes));
    }
    out
}

/// The names and contents of the files in a `.tar.gz` bundle.
pub fn unpack(path: &std::path::Path) -> Vec<(String, String)> {
    let file = std::fs::File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        let text = if name.ends_with(".gz") {
            let mut text = String::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_string(&mut text)
                .unwrap();
            text
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        out.push((name, text));
    }
    out
}

async fn export_bundles_the_users_memory_and_no_one_elses(s: Subject) {
    s.chat("ada", 0, 24, "ada's words").await;
    s.store.fold(&SafeName::of("ada"), at(30)).await.unwrap();
    s.say("ada", "remember I keep bees").await;
    s.chat("bob", 0, 4, "bob's secret words").await;
    let reply = s.say("ada", "export").await;
    assert!(
        reply
            .text
            .starts_with("I packed everything I store about you into one archive"),
        "{}",
        reply.text
    );
    let bundle = reply.export.expect("the bundle's path");
    assert!(
        bundle.starts_with(s.memory.layout.exports_dir()),
        "{}",
        bundle.display()
    );
    let files = unpack(&bundle);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let ada = SafeName::of("ada");
    for wanted in [
        format!("stm/{}/messages.jsonl", ada.as_str()),
        format!("ltm/users/{}.md", ada.as_str()),
    ] {
        assert!(names.iter().any(|n| n.ends_with(&wanted)), "{wanted} in {names:?}");
    }
    let all: String = files.iter().map(|(_, text)| text.as_str()).collect();
    assert!(all.contains("ada's words 0"), "the archived messages too");
    assert!(all.contains("ada's words 24") || all.contains("ada's words 23"));
    assert!(all.contains("I keep bees"));
    assert!(!all.contains("bob's secret"), "nothing of another user");
    let empty = s.say("carol", "export").await;
    assert_eq!(
        empty.text,
        "I store nothing about you right now; the archive only holds a README."
    );
}

async fn idle_short_term_memory_expires_into_the_archive_at_maintenance(s: Subject) {
    s.chat("ada", 0, 6, "short chat").await;
    // `stm.maxAgeMinutes` is 60: a day later the chat is idle (the files
    // go by when they were written, the database by the messages' times:
    // a day after both).
    let later = chrono::Utc::now() + chrono::TimeDelta::days(1);
    let runs = s.store.maintain(later).await;
    assert!(!runs.is_empty());
    assert!(runs.iter().all(|r| r.outcome != Some("failed")), "{runs:?}");
    let mut ada = s.user("ada").await;
    let view = ada.view(50, later).await.unwrap();
    assert!(view.recent.is_empty(), "expired out of short-term memory: {view:?}");
    let status = ada.status().await.unwrap();
    assert_eq!((status.stm_messages, status.archived_messages), (0, 6), "{status:?}");
}

async fn archived_messages_past_their_keep_time_are_deleted_at_maintenance(s: Subject) {
    // Folded now (the archive's age counts from when it was archived).
    let now = chrono::Utc::now();
    s.chat("ada", 0, 25, "old words").await;
    assert_eq!(
        s.store.fold(&SafeName::of("ada"), now).await.unwrap(),
        Some("compacted")
    );
    let folded = s.user("ada").await.status().await.unwrap().archived_messages;
    assert!(folded > 0);
    // `scheduler.archiveKeepDays` is 14: 13 days on, the fold's archive is
    // kept (and the idle rest of short-term memory expires into it) ...
    s.store.maintain(now + chrono::TimeDelta::days(13)).await;
    let status = s.user("ada").await.status().await.unwrap();
    assert_eq!((status.stm_messages, status.archived_messages), (0, 25), "{status:?}");
    // ... 15 days on, the fold's archive is deleted, the expiry's kept.
    let runs = s.store.maintain(now + chrono::TimeDelta::days(15)).await;
    assert!(runs.iter().all(|r| r.outcome != Some("failed")), "{runs:?}");
    let status = s.user("ada").await.status().await.unwrap();
    assert_eq!(status.archived_messages, 25 - folded, "{status:?}");
}
