//! The STM log: order, reading, tail, prefix dropping, guards, listing.

use super::support::{at, record, stm};
use mnemo_sessions::SafeName;
use mnemo_sessions::stm::{MALFORMED_FILE, StmError};
use proptest::prelude::*;
use std::fs;
use std::io::Write;

#[tokio::test]
async fn appended_records_read_back_in_order() {
    let (_dir, stm) = stm(true);
    let user = SafeName::of("U1");
    let records: Vec<_> = (0..5).map(|i| record(i, &format!("message {i}"))).collect();
    for r in &records {
        stm.append(&user, r).await.unwrap();
    }
    let snapshot = stm.read_all(&user).unwrap();
    assert_eq!(snapshot.records, records);
    assert_eq!(snapshot.skipped_lines, 0);
    assert_eq!(stm.count(&user).unwrap(), 5);
    assert_eq!(stm.tail(&user, 2).unwrap(), records[3..]);
    assert_eq!(stm.last_activity(&user).unwrap(), Some(at(4)));
}

#[test]
fn a_missing_log_reads_as_empty() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("nobody");
    assert!(stm.read_all(&user).unwrap().records.is_empty());
    assert!(stm.tail(&user, 10).unwrap().is_empty());
    assert_eq!(stm.count(&user).unwrap(), 0);
    assert_eq!(stm.last_activity(&user).unwrap(), None);
    assert!(stm.users().unwrap().is_empty());
}

#[tokio::test]
async fn each_record_is_exactly_one_line_of_the_documented_form() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "two\nlines")).await.unwrap();
    let text = fs::read_to_string(stm.layout().messages_path(&user)).unwrap();
    assert_eq!(
        text,
        "{\"ts\":\"2026-03-23T03:00:00Z\",\"role\":\"user\",\"text\":\"two\\nlines\",\"msgId\":\"m0\",\"channel\":\"slack\"}\n"
    );
}

#[tokio::test]
async fn malformed_lines_are_skipped_and_counted_never_fatal() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "first")).await.unwrap();
    let path = stm.layout().messages_path(&user);
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"not json\n{\"ts\":\"yesterday\"}\n\n\xff\xfe\n")
        .unwrap();
    stm.append(&user, &record(1, "second")).await.unwrap();

    let snapshot = stm.read_all(&user).unwrap();
    assert_eq!(snapshot.records, vec![record(0, "first"), record(1, "second")]);
    assert_eq!(snapshot.skipped_lines, 3, "blank lines are not counted");
    assert_eq!(stm.tail(&user, 5).unwrap(), snapshot.records);
}

#[test]
fn tail_reads_across_block_boundaries_and_very_long_lines() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    let path = stm.layout().messages_path(&user);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Lines from a few bytes to several 64 KiB blocks long.
    let records: Vec<_> = (0..40)
        .map(|i| record(i, &"x".repeat((i as usize * 7919) % 200_000)))
        .collect();
    let mut text = String::new();
    for r in &records {
        text.push_str(&serde_json::to_string(r).unwrap());
        text.push('\n');
    }
    fs::write(&path, text).unwrap();
    for n in [0, 1, 2, 17, 39, 40, 41, 1000] {
        let expected = &records[records.len().saturating_sub(n)..];
        assert_eq!(stm.tail(&user, n).unwrap(), expected, "n = {n}");
    }
}

#[tokio::test]
async fn drop_prefix_keeps_records_appended_after_the_snapshot() {
    let (_dir, stm) = stm(true);
    let user = SafeName::of("U1");
    for i in 0..6 {
        stm.append(&user, &record(i, "before")).await.unwrap();
    }
    let snapshot = stm.read_all(&user).unwrap();
    let folded = &snapshot.records[..4];
    // The log grows while "the summarizer runs".
    stm.append(&user, &record(6, "during")).await.unwrap();
    stm.append(&user, &record(7, "during")).await.unwrap();

    let guard = stm.lock(&user).await;
    stm.drop_prefix_locked(&guard, &user, folded).unwrap();
    drop(guard);
    let left = stm.read_all(&user).unwrap().records;
    let expected: Vec<_> = [(4, "before"), (5, "before"), (6, "during"), (7, "during")]
        .into_iter()
        .map(|(i, t)| record(i, t))
        .collect();
    assert_eq!(left, expected);
}

#[tokio::test]
async fn drop_prefix_with_a_stale_snapshot_changes_nothing() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    for i in 0..4 {
        stm.append(&user, &record(i, "x")).await.unwrap();
    }
    let path = stm.layout().messages_path(&user);
    let before = fs::read(&path).unwrap();
    let guard = stm.lock(&user).await;

    let not_a_prefix = [record(1, "x"), record(2, "x")];
    let err = stm.drop_prefix_locked(&guard, &user, &not_a_prefix).unwrap_err();
    assert!(matches!(err, StmError::PrefixMismatch { expected: 2, .. }), "{err}");
    assert!(err.to_string().contains("nothing was changed"));

    let longer_than_log: Vec<_> = (0..5).map(|i| record(i, "x")).collect();
    let err = stm.drop_prefix_locked(&guard, &user, &longer_than_log).unwrap_err();
    assert!(err.to_string().contains("only 4 valid records"), "{err}");

    assert_eq!(fs::read(&path).unwrap(), before);
    stm.drop_prefix_locked(&guard, &user, &[]).unwrap();
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn malformed_lines_in_a_dropped_prefix_are_kept_aside_not_lost() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "a")).await.unwrap();
    let path = stm.layout().messages_path(&user);
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"garbage one\n")
        .unwrap();
    stm.append(&user, &record(1, "b")).await.unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"garbage two\n")
        .unwrap();
    stm.append(&user, &record(2, "c")).await.unwrap();

    let guard = stm.lock(&user).await;
    stm.drop_prefix_locked(&guard, &user, &[record(0, "a"), record(1, "b")])
        .unwrap();
    let kept = fs::read_to_string(stm.layout().stm_dir(&user).join(MALFORMED_FILE)).unwrap();
    assert_eq!(kept, "garbage one\n");
    // A malformed line after the prefix stays where it was.
    let snapshot = stm.read_all(&user).unwrap();
    assert_eq!(snapshot.records, vec![record(2, "c")]);
    assert_eq!(snapshot.skipped_lines, 1);
}

#[tokio::test]
async fn a_guard_for_another_user_is_refused_and_changes_nothing() {
    let (_dir, stm) = stm(false);
    let (alice, bob) = (SafeName::of("alice"), SafeName::of("bob"));
    stm.append(&bob, &record(0, "bob's")).await.unwrap();
    let alices_guard = stm.lock(&alice).await;
    let err = stm.append_locked(&alices_guard, &bob, &record(1, "x")).unwrap_err();
    assert!(matches!(err, StmError::WrongGuard { .. }), "{err}");
    assert!(stm.remove_locked(&alices_guard, &bob).is_err());
    assert!(
        stm.drop_prefix_locked(&alices_guard, &bob, &[record(0, "bob's")])
            .is_err()
    );
    assert_eq!(stm.read_all(&bob).unwrap().records, vec![record(0, "bob's")]);
}

#[tokio::test]
async fn remove_locked_deletes_the_log_and_tolerates_a_missing_one() {
    let (_dir, stm) = stm(true);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "x")).await.unwrap();
    let guard = stm.lock(&user).await;
    stm.remove_locked(&guard, &user).unwrap();
    assert!(!stm.layout().messages_path(&user).exists());
    stm.remove_locked(&guard, &user).unwrap();
}

#[tokio::test]
async fn users_lists_only_folders_that_are_valid_names() {
    let (_dir, stm) = stm(false);
    for raw in ["U2", "../evil", "U1"] {
        stm.append(&SafeName::of(raw), &record(0, "x")).await.unwrap();
    }
    let root = stm.layout().stm_root();
    fs::create_dir_all(root.join(".tmp-leftover")).unwrap();
    fs::write(root.join("U3"), "a file, not a folder").unwrap();
    let users = stm.users().unwrap();
    let expected: Vec<_> = ["%2E%2E%2Fevil", "U1", "U2"]
        .into_iter()
        .map(|n| SafeName::from_encoded(n).unwrap())
        .collect();
    assert_eq!(users, expected);
}

fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[\"\\\\\n\r\t\u{0}\u{1b}\u{7f}\u{2028}😀é ]{0,40}",
        Just("\n".to_string()),
        Just("\"}\n{\"ts\":".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_text_round_trips_through_append_and_read(texts in prop::collection::vec(arbitrary_text(), 1..6)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (_dir, stm) = stm(false);
        let user = SafeName::of("U1");
        let records: Vec<_> = texts.iter().enumerate().map(|(i, t)| record(i as i64, t)).collect();
        runtime.block_on(async {
            for r in &records {
                stm.append(&user, r).await.unwrap();
            }
        });
        let snapshot = stm.read_all(&user).unwrap();
        prop_assert_eq!(&snapshot.records, &records);
        prop_assert_eq!(snapshot.skipped_lines, 0);
        prop_assert_eq!(stm.tail(&user, records.len()).unwrap(), records);
    }
}

#[tokio::test]
async fn a_generous_tail_returns_the_whole_log() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "only")).await.unwrap();
    assert_eq!(stm.tail(&user, usize::MAX).unwrap(), vec![record(0, "only")]);
}
