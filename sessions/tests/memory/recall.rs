//! Recall specifications: what a turn recalls from the caller's whole
//! history, and that nothing else ever comes out — not another user's data,
//! not the same user id in another channel, not a deleted item — through
//! corruption, half-written indexes and hostile input.

use super::support::write;
use chrono::{DateTime, TimeZone, Utc};
use mnemo_sessions::commands::{self, Caller, SessionCommand};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::recall::{Recall, TurnQuery};
use mnemo_sessions::stm::Stm;
use mnemo_sessions::topics::{self, TopicWrite};
use mnemo_sessions::{Layout, Record, Role, SafeName, archive};
use std::sync::Arc;

fn day(d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, d, h, 0, 0).unwrap()
}

fn rec(at: DateTime<Utc>, role: Role, id: &str, text: &str) -> Record {
    Record {
        ts: at,
        role,
        text: text.into(),
        msg_id: id.into(),
        channel: "slack".into(),
        thread_id: None,
        chat_id: None,
        user_name: None,
    }
}

fn channel(dir: &tempfile::TempDir, name: &str) -> Stm {
    Stm::new(Layout::new(dir.path(), name), LockRegistry::new(), false)
}

/// Appends to STM and indexes, as the pipeline does.
async fn say(stm: &Stm, user: &SafeName, record: Record) {
    stm.append(user, &record).await.unwrap();
    Recall::of(stm).index(user, &record);
}

/// What a turn asking `question` recalls, rendered.
fn recalled(stm: &Stm, user: &SafeName, question: &str) -> String {
    let query = TurnQuery {
        message: question,
        recent: &[],
        max_tokens: 1500,
    };
    Recall::of(stm).for_turn(user, &query).render().unwrap_or_default()
}

fn filler(i: usize) -> String {
    [
        "the weather was grey again",
        "lunch was a sandwich",
        "the train ran late",
        "watched a film",
    ][i % 4]
        .to_string()
}

async fn history(stm: &Stm, user: &SafeName, secret: &str) {
    let mut old = Vec::new();
    for i in 0..30 {
        old.push(rec(
            day(2, 8) + chrono::TimeDelta::minutes(i as i64),
            Role::User,
            &format!("f{i}"),
            &filler(i),
        ));
    }
    old.push(rec(
        day(3, 9),
        Role::User,
        "secret",
        &format!("My locker code is {secret}"),
    ));
    archive::write_batch(stm.layout(), user, &old).unwrap();
    say(stm, user, rec(day(20, 9), Role::User, "now", "I am back from holiday")).await;
}

#[tokio::test]
async fn an_archived_fact_is_recalled_with_its_date_and_source() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let text = recalled(&stm, &alice, "what is my locker code?");
    assert!(
        text.contains("[2026-03-03, you] My locker code is canary-7731"),
        "{text}"
    );
    assert!(!text.contains("sandwich"), "unrelated filler stays out: {text}");
}

#[tokio::test]
async fn nothing_is_recalled_from_another_user_or_the_same_id_in_another_channel() {
    let dir = tempfile::tempdir().unwrap();
    let (slack, telegram) = (channel(&dir, "slack"), channel(&dir, "telegram"));
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    history(&slack, &bob, "canary-BOB").await;
    history(&telegram, &alice, "canary-TELEGRAM").await;
    // A note of bob's and a user whose id encodes to `_shared` are still not alice's.
    let note = TopicWrite {
        title: "lockers",
        tags: &[],
        body: "locker code canary-BOBNOTE",
    };
    topics::write(
        slack.layout(),
        &bob,
        "lockers",
        note,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        day(4, 9),
    )
    .unwrap();
    history(&slack, &SafeName::of("_shared"), "canary-SHAREDUSER").await;
    say(&slack, &alice, rec(day(20, 9), Role::User, "a1", "hello there")).await;

    for question in [
        "what is my locker code?",
        "locker code canary",
        "canary-BOB canary-TELEGRAM lockers",
    ] {
        let text = recalled(&slack, &alice, question);
        assert!(!text.contains("canary"), "{question}: {text}");
        let hits = Recall::of(&slack).search(&alice, question, 10);
        assert!(hits.iter().all(|h| !h.text.contains("canary")), "{question}: {hits:?}");
    }
    assert!(recalled(&telegram, &alice, "locker code").contains("canary-TELEGRAM"));
}

#[tokio::test]
async fn shared_operator_notes_reach_every_user_and_hostile_frontmatter_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    let shared = stm.layout().shared_topics_dir();
    write(
        &shared.join("wifi.md"),
        "---\ntitle: Wifi\n---\nThe office wifi password is canary-WIFI\n",
    );
    write(
        &shared.join("broken.md"),
        "---\ntitle: [unclosed\n---\nwifi canary-BROKEN\n",
    );
    write(&shared.join("open.md"), "---\ntitle: no end\nwifi canary-UNCLOSED\n");
    write(&shared.join("..%2Fescape.md"), "wifi canary-STRAY\n");
    // Aliases galore: parsed or refused, it must cost no more than a note.
    let laughs: String = (1..9)
        .map(|i| {
            format!(
                "l{i}: &l{i} [*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p}]\n",
                p = i - 1
            )
        })
        .collect();
    write(
        &shared.join("laughs.md"),
        &format!("---\nl0: &l0 [lol]\n{laughs}---\nwifi laughs\n"),
    );
    say(&stm, &alice, rec(day(20, 9), Role::User, "a1", "hello")).await;
    let text = recalled(&stm, &alice, "what is the wifi password");
    assert!(
        text.contains("[shared note: wifi] The office wifi password is canary-WIFI"),
        "{text}"
    );
    for bad in ["canary-BROKEN", "canary-UNCLOSED", "canary-STRAY"] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
}

#[tokio::test]
async fn a_shared_note_edited_in_place_added_or_deleted_is_seen_by_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    let shared = stm.layout().shared_topics_dir();
    write(&shared.join("wifi.md"), "The wifi password is canary-OLD\n");
    say(&stm, &alice, rec(day(20, 9), Role::User, "a1", "hello")).await;
    assert!(recalled(&stm, &alice, "wifi password").contains("canary-OLD"));
    // An editor rewriting the file in place: the folder's entries (and so
    // its stamp) stay the same, only the file's own stamp moves.
    std::fs::write(shared.join("wifi.md"), "The wifi password is now canary-EDITED\n").unwrap();
    let text = recalled(&stm, &alice, "wifi password");
    assert!(text.contains("canary-EDITED") && !text.contains("canary-OLD"), "{text}");
    write(&shared.join("printer.md"), "The printer password is canary-PRINTER\n");
    assert!(recalled(&stm, &alice, "printer password").contains("canary-PRINTER"));
    std::fs::remove_file(shared.join("printer.md")).unwrap();
    assert!(!recalled(&stm, &alice, "printer password").contains("canary-PRINTER"));
}

#[tokio::test]
async fn clear_clear_all_and_forget_take_the_users_items_out_of_recall_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-ARCHIVED").await;
    say(
        &stm,
        &alice,
        rec(day(20, 10), Role::User, "live", "my bike lock code is canary-LIVE"),
    )
    .await;
    let note = TopicWrite {
        title: "boat",
        tags: &[],
        body: "the boat is moored at pier canary-NOTE",
    };
    topics::write(
        stm.layout(),
        &alice,
        "boat",
        note,
        mnemo_sessions::versions::Change {
            by: mnemo_sessions::versions::Author::Command,
            what: "test",
        },
        day(5, 9),
    )
    .unwrap();
    assert!(recalled(&stm, &alice, "bike lock code").contains("canary-LIVE"));
    assert!(recalled(&stm, &alice, "where is the boat moored").contains("canary-NOTE"));

    let run = |command: SessionCommand| {
        let stm = stm.clone();
        let alice = alice.clone();
        async move {
            let caller = Caller {
                user: &alice,
                display_name: None,
                max_profile_chars: 4000,
                here: None,
            };
            commands::try_execute(
                crate::files_user(&stm, caller.user).await.as_mut(),
                caller,
                &command,
                day(21, 9),
            )
            .await
            .unwrap()
        }
    };
    run(SessionCommand::Forget { topic: "boat".into() }).await;
    assert!(!recalled(&stm, &alice, "where is the boat moored").contains("canary-NOTE"));

    run(SessionCommand::Clear).await;
    let text = recalled(&stm, &alice, "bike lock code locker code");
    assert!(!text.contains("canary-LIVE"), "cleared STM is gone: {text}");
    assert!(text.contains("canary-ARCHIVED"), "the archive is kept by clear: {text}");

    run(SessionCommand::ClearAllConfirmed).await;
    assert_eq!(recalled(&stm, &alice, "bike lock code locker code"), "");
    assert!(Recall::of(&stm).search(&alice, "canary", 10).is_empty());
}

#[tokio::test]
async fn a_corrupt_or_half_written_index_is_rebuilt_and_a_turn_still_recalls() {
    for damage in ["torn", "garbage", "meta", "version", "v2", "archive-gone"] {
        let dir = tempfile::tempdir().unwrap();
        let stm = channel(&dir, "slack");
        let alice = SafeName::of("alice");
        history(&stm, &alice, "canary-7731").await;
        say(&stm, &alice, rec(day(20, 10), Role::User, "x", "my gym is canary-GYM")).await;
        let index = stm.layout().recall_dir(&alice);
        let messages = index.join("messages.tsv");
        match damage {
            "torn" => {
                let mut bytes = std::fs::read(&messages).unwrap();
                bytes.truncate(bytes.len() - 5);
                std::fs::write(&messages, bytes).unwrap();
            }
            "garbage" => std::fs::write(&messages, "{not json\n").unwrap(),
            "meta" => std::fs::write(index.join("meta.json"), "").unwrap(),
            "version" => std::fs::write(index.join("meta.json"), r#"{"version":999,"archives":[]}"#).unwrap(),
            "v2" => {
                // The previous stored shape: a JSON object per line.
                let line = r#"{"terms":"gym canari","record":{"ts":"2026-03-20T10:00:00Z","role":"user","text":"my gym is canary-OLD","msgId":"x","channel":"slack"}}"#;
                std::fs::write(&messages, format!("{line}\n")).unwrap();
                let meta = std::fs::read_to_string(index.join("meta.json")).unwrap();
                std::fs::write(index.join("meta.json"), meta.replace("\"version\":4", "\"version\":2")).unwrap();
            }
            _ => {
                let batch = archive::files(stm.layout(), &alice).unwrap().remove(0);
                std::fs::remove_file(batch).unwrap();
            }
        }
        // A restart: the process's cache is gone, the damaged files remain.
        drop(stm);
        let stm = channel(&dir, "slack");
        let text = recalled(&stm, &alice, "what is my gym and my locker code?");
        assert!(text.contains("canary-GYM"), "{damage}: {text}");
        assert_eq!(
            text.contains("canary-7731"),
            damage != "archive-gone",
            "{damage}: {text}"
        );
        let stored = std::fs::read_to_string(&messages).unwrap();
        assert!(
            stored.ends_with('\n') && stored.contains("canary-GYM") && !stored.contains("canary-OLD"),
            "{damage}: rebuilt on disk"
        );
    }
}

#[tokio::test]
async fn a_fresh_index_is_stored_as_messages_tsv_with_tab_separated_lines() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let index = stm.layout().recall_dir(&alice);
    let stored = std::fs::read_to_string(index.join("messages.tsv")).unwrap();
    assert_eq!(stored.lines().count(), 32, "the archived batch and the live message");
    assert!(stored.contains("canary-7731"));
    // Six fields a line (tabs inside a text are escaped): named for what it is.
    assert!(stored.lines().all(|line| line.matches('\t').count() == 5), "{stored}");
    assert!(!index.join("messages.jsonl").exists());
}

#[tokio::test]
async fn an_index_under_its_former_name_is_renamed_in_place_not_rebuilt() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let index = stm.layout().recall_dir(&alice);
    // A state folder from before the rename: the same index, the old name.
    drop(stm);
    std::fs::rename(index.join("messages.tsv"), index.join("messages.jsonl")).unwrap();
    let former = std::fs::metadata(index.join("messages.jsonl")).unwrap();

    let stm = channel(&dir, "slack");
    assert!(recalled(&stm, &alice, "what is my locker code?").contains("canary-7731"));
    assert!(!index.join("messages.jsonl").exists(), "the former name is gone");
    let current = std::fs::metadata(index.join("messages.tsv")).unwrap();
    // A rebuild writes a new file and renames it over; the migration keeps
    // the file itself.
    assert_eq!(
        (current.dev(), current.ino()),
        (former.dev(), former.ino()),
        "renamed, not rebuilt"
    );
    assert_eq!(current.len(), former.len());
}

#[tokio::test]
async fn reindexing_a_folder_from_before_the_rename_leaves_no_index_under_the_former_name() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let index = stm.layout().recall_dir(&alice);
    std::fs::rename(index.join("messages.tsv"), index.join("messages.jsonl")).unwrap();

    assert_eq!(Recall::of(&stm).reindex(&alice, &mut |_| {}).unwrap(), 32);
    assert!(!index.join("messages.jsonl").exists());
    let stored = std::fs::read_to_string(index.join("messages.tsv")).unwrap();
    assert!(stored.contains("canary-7731"));
}

#[tokio::test]
async fn a_message_missing_from_the_index_after_a_crash_is_caught_up_from_stm_and_archive() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    // Appended to STM but never indexed (crash between the two), and a batch
    // archived after the index was written.
    stm.append(&alice, &rec(day(20, 11), Role::User, "y", "my tailor is canary-TAILOR"))
        .await
        .unwrap();
    archive::write_batch(
        stm.layout(),
        &alice,
        &[rec(day(10, 9), Role::User, "z", "my barber is canary-BARBER")],
    )
    .unwrap();
    drop(stm);
    let stm = channel(&dir, "slack");
    assert!(recalled(&stm, &alice, "who is my tailor").contains("canary-TAILOR"));
    assert!(recalled(&stm, &alice, "who is my barber").contains("canary-BARBER"));
}

#[tokio::test]
async fn hostile_queries_recall_nothing_or_something_sensible_and_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let long = format!("locker {}", "ab ".repeat(4000));
    for question in [
        "what is it that you were on about?",
        "🎉🔥👍🏽",
        "<script>alert(1)</script> **` ``` <@U123>",
        &long,
        "",
    ] {
        let text = recalled(&stm, &alice, question);
        assert!(text.chars().count() <= 1500 * 4, "budget holds for {:.20}", question);
        if !question.starts_with("locker") {
            assert_eq!(text, "", "nothing to match in {question:.20}");
        }
    }
    assert!(recalled(&stm, &alice, &long).contains("canary-7731"));
}

#[tokio::test]
async fn items_already_in_the_recent_window_are_not_repeated_and_the_budget_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    let mut records = Vec::new();
    for i in 0..60 {
        let r = rec(
            day(1 + i % 20, 9) + chrono::TimeDelta::minutes(i as i64),
            Role::User,
            &format!("k{i}"),
            &format!("kayak trip number {i} on the river with a long description of the water and the weather"),
        );
        say(&stm, &alice, r.clone()).await;
        records.push(r);
    }
    let recent: Vec<Arc<Record>> = records[50..].iter().cloned().map(Arc::new).collect();
    let query = TurnQuery {
        message: "tell me about the kayak trips",
        recent: &recent,
        max_tokens: 300,
    };
    let out = Recall::of(&stm).for_turn(&alice, &query);
    let text = out.render().unwrap();
    assert!(text.chars().count().div_ceil(4) <= 300, "{}", text.len());
    assert!(out.omitted > 0 && text.ends_with("did not fit]"), "cut visibly: {text}");
    for r in recent {
        assert!(
            !text.contains(&format!("number {} on", r.msg_id.trim_start_matches('k'))),
            "{} repeated",
            r.msg_id
        );
    }
    let days: std::collections::HashSet<_> = out.items.iter().map(|i| i.at.date_naive()).collect();
    assert!(days.len() >= out.items.len().min(10) / 2, "spread across days: {text}");
}

/// An in-process embedder at the `Embedder` seam (the network side lives
/// in the broker): a hashed bag of lowercased words, 16 dimensions, that
/// can be held mid-call so a test can act while a fill is in flight.
struct HeldEmbedder {
    gate: tokio::sync::Semaphore,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl mnemo_sessions::recall::Embedder for HeldEmbedder {
    async fn embed(
        &self,
        texts: &[String],
        _: mnemo_sessions::recall::EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, mnemo_sessions::recall::EmbedError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _pass = self.gate.acquire().await.unwrap();
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 16];
                for w in t.split_whitespace() {
                    let h = w
                        .to_lowercase()
                        .bytes()
                        .fold(7usize, |h, b| h.wrapping_mul(31) + b as usize);
                    v[h % 16] += 1.0;
                }
                v
            })
            .collect())
    }

    fn model(&self) -> &str {
        "held"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vector_fill_racing_clear_all_stores_nothing_of_what_was_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let ada = SafeName::of("ada");
    history(&stm, &ada, "my locker code is 4471").await;
    let embedder = std::sync::Arc::new(HeldEmbedder {
        gate: tokio::sync::Semaphore::new(0),
        calls: Default::default(),
    });
    let recall = Recall::of(&stm);
    recall.use_embedder(Some((embedder.clone(), std::time::Duration::from_millis(100))));

    // The fill asks for the first batch and is held there …
    let filling = tokio::spawn({
        let (recall, ada) = (recall.clone(), ada.clone());
        async move { recall.embed_missing(&ada, &mut |_| {}).await }
    });
    for _ in 0..60_000 {
        if embedder.calls.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(
        embedder.calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the fill is held"
    );
    // … while the user deletes everything.
    let caller = Caller {
        user: &ada,
        display_name: None,
        max_profile_chars: 4000,
        here: None,
    };
    commands::try_execute(
        crate::files_user(&stm, &ada).await.as_mut(),
        caller,
        &SessionCommand::ClearAllConfirmed,
        day(21, 9),
    )
    .await
    .unwrap();
    embedder.gate.add_permits(1000);
    filling.await.unwrap().unwrap();

    assert_eq!(recall.vectors_held(&ada), 0, "nothing deleted came back as a vector");
    #[allow(clippy::disallowed_methods, reason = "a test names the file it checks")]
    let file = stm.layout().recall_dir(&ada).join("vectors.bin");
    let stored = std::fs::read(&file).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&stored).contains("4471"));
    assert!(stored.len() < 200, "at most a header: {} bytes", stored.len());
}

/// What `f` logs at warn and above on this thread, beside its result.
fn warnings<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Capture(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let capture = Capture(Arc::default());
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let logged = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    (out, logged)
}

fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

#[tokio::test]
async fn an_index_is_opened_from_its_segment_and_a_crash_mid_append_is_cut_off_not_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    say(
        &stm,
        &alice,
        rec(day(20, 10), Role::User, "gym", "my gym is canary-GYM"),
    )
    .await;
    let index = stm.layout().recall_dir(&alice);
    let (segment, messages) = (index.join("segment.bin"), index.join("messages.tsv"));
    assert!(std::fs::read(&segment).unwrap().starts_with(b"MNRSEG04"));
    // The crash: the message is in the short-term log, its index line was
    // cut short.
    stm.append(
        &alice,
        &rec(day(20, 11), Role::User, "tailor", "my tailor is canary-TAILOR"),
    )
    .await
    .unwrap();
    drop(stm);
    let mut torn = std::fs::OpenOptions::new().append(true).open(&messages).unwrap();
    std::io::Write::write_all(
        &mut torn,
        b"1773999999\t0\tu\ttailor\ttailor canari\tmy tailor is canary-TA",
    )
    .unwrap();
    let before = inode(&segment);

    let stm = channel(&dir, "slack");
    let (text, logged) = warnings(|| recalled(&stm, &alice, "who is my tailor, what is my gym and my locker code?"));
    for canary in ["canary-TAILOR", "canary-GYM", "canary-7731"] {
        assert!(text.contains(canary), "{canary}: {text}");
    }
    assert_eq!(logged, "", "cut off quietly, not rebuilt");
    assert_eq!(inode(&segment), before, "the segment is the one written before");
    let stored = std::fs::read_to_string(&messages).unwrap();
    assert!(stored.ends_with('\n'), "the torn line is gone");
    assert_eq!(stored.matches("canary-TAILOR").count(), 1, "{stored}");
    assert!(!stored.contains("canary-TA\n") && !stored.contains("canary-TA1"));
}

#[tokio::test]
async fn an_index_of_the_former_version_is_rebuilt_once_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let stm = channel(&dir, "slack");
    let alice = SafeName::of("alice");
    history(&stm, &alice, "canary-7731").await;
    let index = stm.layout().recall_dir(&alice);
    drop(stm);
    // A folder as format 3 left it: lines and meta, no segment.
    std::fs::remove_file(index.join("segment.bin")).unwrap();
    let meta = std::fs::read_to_string(index.join("meta.json")).unwrap();
    std::fs::write(index.join("meta.json"), meta.replace("\"version\":4", "\"version\":3")).unwrap();

    let stm = channel(&dir, "slack");
    let (text, logged) = warnings(|| recalled(&stm, &alice, "what is my locker code?"));
    assert!(text.contains("canary-7731"), "{text}");
    assert!(
        logged.contains("version 3") && logged.contains("rebuilding"),
        "{logged}"
    );
    assert!(
        std::fs::read_to_string(index.join("meta.json"))
            .unwrap()
            .contains("\"version\":4")
    );
    assert!(
        std::fs::read(index.join("segment.bin"))
            .unwrap()
            .starts_with(b"MNRSEG04")
    );
    // Once: the next open takes the rebuilt index as it is.
    drop(stm);
    let stm = channel(&dir, "slack");
    let (text, logged) = warnings(|| recalled(&stm, &alice, "what is my locker code?"));
    assert!(text.contains("canary-7731") && logged.is_empty(), "{logged}");
}

#[tokio::test]
async fn a_corrupt_segment_is_rebuilt_with_a_warning_and_a_turn_still_recalls() {
    for damage in ["header", "short", "inside"] {
        let dir = tempfile::tempdir().unwrap();
        let stm = channel(&dir, "slack");
        let alice = SafeName::of("alice");
        history(&stm, &alice, "canary-7731").await;
        let index = stm.layout().recall_dir(&alice);
        let (segment, messages) = (index.join("segment.bin"), index.join("messages.tsv"));
        drop(stm);
        match damage {
            "header" => {
                let mut bytes = std::fs::read(&segment).unwrap();
                bytes[..8].copy_from_slice(b"GARBAGE!");
                std::fs::write(&segment, bytes).unwrap();
            }
            "short" => {
                let bytes = std::fs::read(&segment).unwrap();
                std::fs::write(&segment, &bytes[..bytes.len() / 2]).unwrap();
            }
            _ => {
                // The shape adds up; the line a search returns does not
                // read: found during the turn, rebuilt at the next use.
                let stored = std::fs::read_to_string(&messages).unwrap();
                let line = stored.lines().find(|l| l.contains("canary-7731")).unwrap();
                let junk = "x".repeat(line.len());
                std::fs::write(&messages, stored.replace(line, &junk)).unwrap();
            }
        }
        let stm = channel(&dir, "slack");
        let (text, logged) = warnings(|| recalled(&stm, &alice, "what is my locker code?"));
        assert!(logged.contains("WARN"), "{damage}: {logged}");
        if damage != "inside" {
            assert!(text.contains("canary-7731"), "{damage}: {text}");
        }
        let (text, _) = warnings(|| recalled(&stm, &alice, "what is my locker code?"));
        assert!(text.contains("canary-7731"), "{damage}: {text}");
        assert!(std::fs::read(&segment).unwrap().starts_with(b"MNRSEG04"), "{damage}");
        let stored = std::fs::read_to_string(&messages).unwrap();
        assert!(
            stored.contains("canary-7731") && !stored.contains("xxxx"),
            "{damage}: rebuilt on disk"
        );
    }
}
