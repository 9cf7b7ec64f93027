//! The channel's `_shared` index is read by every user's search at once
//! (issue 40: a mutex held for a whole search made two users' turns take
//! turns), and a note changed meanwhile is still seen by the next search.

use super::*;
use crate::locks::LockRegistry;
use std::sync::mpsc;
use std::thread;

/// Long enough for a search on a loaded machine; a search that waits for
/// another one held for [`HELD`] misses it.
const WAIT: Duration = Duration::from_secs(10);
const HELD: Duration = Duration::from_secs(40);

#[test]
#[allow(clippy::disallowed_methods, reason = "a test's own temp folder")]
fn two_users_search_side_by_side_and_a_note_edited_meanwhile_is_seen_after() {
    let dir = tempfile::tempdir().unwrap();
    let stm = Stm::new(Layout::new(dir.path(), "slack"), LockRegistry::new(), false);
    let notes = stm.layout().shared_topics_dir();
    std::fs::create_dir_all(&notes).unwrap();
    let note = notes.join("deploys.md");
    std::fs::write(&note, "Deploys run on fridays\n").unwrap();
    let recall = Recall::of(&stm);
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));

    // Alice's search, held in the middle (where the plan would run).
    let (started, is_started) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let held = {
        let recall = recall.clone();
        thread::spawn(move || {
            recall.ranked(&alice, None, |_, shared| {
                started.send(shared.bm25.live_docs()).unwrap();
                let _ = released.recv_timeout(HELD);
                Vec::new()
            })
        })
    };
    assert_eq!(
        is_started.recv_timeout(WAIT).unwrap(),
        1,
        "alice's search sees the note"
    );

    // Bob's search runs to its end while Alice's is in progress.
    let search = |words: &'static str| {
        let (recall, bob) = (recall.clone(), bob.clone());
        let (done, is_done) = mpsc::channel();
        thread::spawn(move || done.send(recall.search(&bob, words, 5)).unwrap());
        is_done
    };
    let found = search("deploys fridays")
        .recv_timeout(WAIT)
        .expect("bob's search waited for alice's to end");
    assert!(found.len() == 1 && found[0].text.contains("fridays"), "{found:?}");

    // The note edited in place (same folder entries) while Alice's search
    // still reads the index: Bob's next search updates it once hers is done.
    std::fs::write(&note, "Deploys moved to tuesdays, never fridays\n").unwrap();
    let is_done = search("deploys tuesdays");
    release.send(()).unwrap();
    held.join().unwrap();
    let found = is_done.recv_timeout(WAIT).unwrap();
    assert!(
        found.len() == 1 && found[0].text.contains("tuesdays"),
        "the edited note, once: {found:?}"
    );
}
