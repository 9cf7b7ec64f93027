//! The STM log under crashes, contention and size: torn lines, many
//! concurrent writers, a million-line history.

use super::support::{record, stm};
use mnemo_sessions::SafeName;
use std::collections::HashSet;
use std::fs;
use std::io::{BufWriter, Write};

#[tokio::test]
async fn a_torn_final_line_is_sealed_and_never_glued_to_the_next_record() {
    let (_dir, stm) = stm(true);
    let user = SafeName::of("U1");
    stm.append(&user, &record(0, "complete")).await.unwrap();
    stm.append(&user, &record(1, "also complete")).await.unwrap();
    // A crash mid-write: half of a record, no trailing newline.
    let path = stm.layout().messages_path(&user);
    let half = serde_json::to_string(&record(2, "torn")).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&half.as_bytes()[..half.len() / 2])
        .unwrap();

    assert_eq!(stm.tail(&user, 1).unwrap(), vec![record(1, "also complete")]);
    stm.append(&user, &record(3, "after the crash")).await.unwrap();

    let snapshot = stm.read_all(&user).unwrap();
    assert_eq!(
        snapshot.records,
        vec![
            record(0, "complete"),
            record(1, "also complete"),
            record(3, "after the crash")
        ]
    );
    assert_eq!(snapshot.skipped_lines, 1);
    assert_eq!(stm.tail(&user, 3).unwrap(), snapshot.records);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4, "the fragment is its own line");
    assert!(text.ends_with('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_tasks_appending_two_hundred_each_lose_and_tear_nothing() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    let mut tasks = Vec::new();
    for task in 0..50 {
        let (stm, user) = (stm.clone(), user.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                let text = format!("task {task} message {i} {}", "·".repeat(i % 50));
                let mut r = record(i as i64, &text);
                r.msg_id = format!("{task}-{i}");
                stm.append(&user, &r).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let snapshot = stm.read_all(&user).unwrap();
    assert_eq!(snapshot.skipped_lines, 0);
    assert_eq!(snapshot.records.len(), 10_000);
    let ids: HashSet<_> = snapshot.records.iter().map(|r| r.msg_id.clone()).collect();
    assert_eq!(ids.len(), 10_000, "no record lost or duplicated");
    for r in &snapshot.records {
        let (task, i) = r.msg_id.split_once('-').unwrap();
        let i: usize = i.parse().unwrap();
        assert_eq!(r.text, format!("task {task} message {i} {}", "·".repeat(i % 50)));
    }
    // Each task's own records stay in the order it wrote them.
    for task in 0..50 {
        let mine: Vec<_> = snapshot
            .records
            .iter()
            .filter(|r| r.msg_id.starts_with(&format!("{task}-")))
            .map(|r| r.ts)
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "task {task} out of order");
    }
}

#[test]
fn tail_of_a_million_line_log_returns_the_right_last_records() {
    let (_dir, stm) = stm(false);
    let user = SafeName::of("U1");
    let path = stm.layout().messages_path(&user);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut out = BufWriter::new(fs::File::create(&path).unwrap());
    for i in 0..1_000_000u32 {
        writeln!(
            out,
            r#"{{"ts":"2026-03-23T03:00:00Z","role":"user","text":"line {i}","msgId":"{i}","channel":"slack"}}"#
        )
        .unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();

    let last = stm.tail(&user, 25).unwrap();
    let ids: Vec<_> = last.iter().map(|r| r.msg_id.as_str()).collect();
    let expected: Vec<_> = (999_975..1_000_000).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected);
    assert_eq!(last[24].text, "line 999999");
}
