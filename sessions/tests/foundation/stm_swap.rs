//! Dropping a folded prefix in two halves (compaction's step 4): staged
//! under the fold lock while appends go on, swapped in under the log lock.
//! What was appended in between stays, in order; a log replaced in between
//! is left alone; a stage never swapped (a crash) changes nothing.

use super::support::{record, stm};
use mnemo_sessions::SafeName;
use mnemo_sessions::fsutil::TEMP_PREFIX;
use mnemo_sessions::stm::{Stm, StmError};
use std::fs;
use std::io::Write;

fn temp_files(stm: &Stm, user: &SafeName) -> Vec<String> {
    fs::read_dir(stm.layout().stm_dir(user))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(TEMP_PREFIX))
        .collect()
}

#[tokio::test]
async fn appends_made_between_stage_and_swap_stay_after_the_dropped_prefix() {
    for fsync in [false, true] {
        let (_dir, stm) = stm(fsync);
        let user = SafeName::of("U1");
        for i in 0..5 {
            stm.append(&user, &record(i, "before")).await.unwrap();
        }
        let path = stm.layout().messages_path(&user);
        // An append half written when the stage reads the log: its line is
        // not complete yet, so the stage leaves it to the swap.
        let line = serde_json::to_vec(&record(5, "in flight")).unwrap();
        let (head, tail) = line.split_at(7);
        let mut log = fs::OpenOptions::new().append(true).open(&path).unwrap();
        log.write_all(head).unwrap();

        let fold = stm.lock_fold(&user).await;
        let folded: Vec<_> = (0..3).map(|i| record(i, "before")).collect();
        let staged = stm.stage_drop(&fold, &user, &folded).unwrap();
        log.write_all(tail).unwrap();
        log.write_all(b"\n").unwrap();
        stm.append(&user, &record(6, "during")).await.unwrap();

        let guard = stm.lock_log(&user).await;
        stm.finish_drop_locked(&guard, staged).unwrap().run().unwrap();
        drop((guard, fold));

        let left = stm.read_all(&user).unwrap();
        let expected = vec![
            record(3, "before"),
            record(4, "before"),
            record(5, "in flight"),
            record(6, "during"),
        ];
        assert_eq!(left.records, expected, "fsync {fsync}");
        assert_eq!(left.skipped_lines, 0);
        assert!(temp_files(&stm, &user).is_empty());
    }
}

#[tokio::test]
async fn a_log_replaced_between_stage_and_swap_is_left_alone() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    for i in 0..4 {
        stm.append(&user, &record(i, "x")).await.unwrap();
    }
    let fold = stm.lock_fold(&user).await;
    let staged = stm.stage_drop(&fold, &user, &[record(0, "x")]).unwrap();
    // Another writer (another process: in this one, every rewriter holds
    // the fold lock) replaces the log meanwhile.
    let path = stm.layout().messages_path(&user);
    let replaced = fs::read(&path).unwrap();
    fs::remove_file(&path).unwrap();
    fs::write(&path, &replaced).unwrap();

    let guard = stm.lock_log(&user).await;
    let err = stm.finish_drop_locked(&guard, staged).unwrap_err();
    assert!(matches!(err, StmError::PrefixMismatch { .. }), "{err}");
    assert!(err.to_string().contains("nothing was changed"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), replaced);
    assert!(temp_files(&stm, &user).is_empty());
}

#[tokio::test]
async fn a_stage_never_swapped_changes_nothing_and_leaves_no_temp_file() {
    let (_dir, stm) = stm(true);
    let user = SafeName::of("U1");
    for i in 0..4 {
        stm.append(&user, &record(i, "x")).await.unwrap();
    }
    let path = stm.layout().messages_path(&user);
    let before = fs::read(&path).unwrap();
    let fold = stm.lock_fold(&user).await;
    let staged = stm.stage_drop(&fold, &user, &[record(0, "x"), record(1, "x")]).unwrap();
    assert_eq!(temp_files(&stm, &user).len(), 1, "the rest is staged beside the log");
    drop(staged);
    assert_eq!(fs::read(&path).unwrap(), before);
    assert!(temp_files(&stm, &user).is_empty());
}

#[tokio::test]
async fn a_stage_whose_batch_is_not_the_head_of_the_log_is_refused() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    for i in 0..3 {
        stm.append(&user, &record(i, "x")).await.unwrap();
    }
    let fold = stm.lock_fold(&user).await;
    let err = stm.stage_drop(&fold, &user, &[record(1, "x")]).unwrap_err();
    assert!(matches!(err, StmError::PrefixMismatch { expected: 1, .. }), "{err}");
    let other = stm.lock_fold(&SafeName::of("U2")).await;
    let err = stm.stage_drop(&other, &user, &[record(0, "x")]).unwrap_err();
    assert!(matches!(err, StmError::WrongGuard { .. }), "{err}");
    assert!(temp_files(&stm, &user).is_empty());
    drop(fold);
}
