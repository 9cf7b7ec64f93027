//! The archive: every message that left STM, once, gzipped, readable by range.

use super::support::{at, record};
use mnemo_sessions::archive::{self, ArchiveError};
use mnemo_sessions::{Layout, SafeName};
use std::fs;

fn setup() -> (tempfile::TempDir, Layout, SafeName) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), "slack");
    (dir, layout, SafeName::of("U1"))
}

#[test]
fn archived_records_read_back_chronologically_across_batches() {
    let (_dir, layout, user) = setup();
    let later: Vec<_> = (10..15)
        .map(|i| record(i, &format!("later {i} \"quoted\"\n")))
        .collect();
    let earlier: Vec<_> = (0..5).map(|i| record(i, &format!("earlier {i} 😀"))).collect();
    let second = archive::write_batch(&layout, &user, &later).unwrap();
    let first = archive::write_batch(&layout, &user, &earlier).unwrap();
    assert!(second.starts_with(layout.archive_dir(&user)));
    assert!(first.file_name().unwrap().to_str().unwrap().ends_with(".jsonl.gz"));
    assert_eq!(archive::files(&layout, &user).unwrap(), vec![first, second]);
    let all = archive::read_all(&layout, &user).unwrap();
    assert_eq!(all, [earlier, later].concat());
}

#[test]
fn writing_the_same_batch_twice_leaves_one_file() {
    let (_dir, layout, user) = setup();
    let batch: Vec<_> = (0..3).map(|i| record(i, "x")).collect();
    let once = archive::write_batch(&layout, &user, &batch).unwrap();
    let again = archive::write_batch(&layout, &user, &batch).unwrap();
    assert_eq!(once, again);
    assert_eq!(archive::files(&layout, &user).unwrap().len(), 1);
    assert_eq!(archive::read_all(&layout, &user).unwrap(), batch);
    // Only the content decides the name: a different batch is a new file.
    let other = archive::write_batch(&layout, &user, &batch[..2]).unwrap();
    assert_ne!(other, once);
    assert_eq!(fs::read_dir(layout.archive_dir(&user)).unwrap().count(), 2);
}

#[test]
fn read_between_includes_from_and_excludes_to() {
    let (_dir, layout, user) = setup();
    let batch: Vec<_> = (0..10).map(|i| record(i, "x")).collect();
    archive::write_batch(&layout, &user, &batch[..5]).unwrap();
    archive::write_batch(&layout, &user, &batch[5..]).unwrap();
    let got = archive::read_between(&layout, &user, at(3), at(7)).unwrap();
    assert_eq!(got, batch[3..7]);
    assert!(
        archive::read_between(&layout, &user, at(10), at(20))
            .unwrap()
            .is_empty()
    );
    assert!(archive::read_between(&layout, &user, at(4), at(4)).unwrap().is_empty());
    // A range ending inside a batch and one starting at its last record.
    assert_eq!(
        archive::read_between(&layout, &user, at(-5), at(1)).unwrap(),
        batch[..1]
    );
    assert_eq!(
        archive::read_between(&layout, &user, at(9), at(99)).unwrap(),
        batch[9..]
    );
}

#[test]
fn sub_millisecond_timestamps_are_not_lost_by_range_reads() {
    let (_dir, layout, user) = setup();
    let mut r = record(0, "x");
    r.ts += chrono::TimeDelta::microseconds(500);
    archive::write_batch(&layout, &user, std::slice::from_ref(&r)).unwrap();
    let from = at(0) + chrono::TimeDelta::microseconds(200);
    assert_eq!(archive::read_between(&layout, &user, from, at(1)).unwrap(), vec![r]);
}

#[test]
fn an_empty_batch_is_refused_and_writes_nothing() {
    let (_dir, layout, user) = setup();
    let err = archive::write_batch(&layout, &user, &[]).unwrap_err();
    assert!(matches!(err, ArchiveError::EmptyBatch { .. }), "{err}");
    assert!(archive::files(&layout, &user).unwrap().is_empty());
}

#[test]
fn a_damaged_or_foreign_file_does_not_hide_the_rest() {
    let (_dir, layout, user) = setup();
    let good = archive::write_batch(&layout, &user, &[record(5, "kept")]).unwrap();
    let dir = layout.archive_dir(&user);
    fs::write(dir.join("messages-00000000T000000.000Z-broken.jsonl.gz"), b"not gzip").unwrap();
    fs::write(dir.join(".tmp-messages-x.jsonl.gz-1-2-3"), b"leftover").unwrap();
    fs::write(dir.join("notes.txt"), b"operator's file").unwrap();
    assert_eq!(archive::files(&layout, &user).unwrap().len(), 2);
    assert!(archive::files(&layout, &user).unwrap().contains(&good));
    assert_eq!(archive::read_all(&layout, &user).unwrap(), vec![record(5, "kept")]);
}

#[test]
fn another_users_archive_is_never_read() {
    let (_dir, layout, user) = setup();
    archive::write_batch(&layout, &SafeName::of("U2"), &[record(0, "not yours")]).unwrap();
    assert!(archive::read_all(&layout, &user).unwrap().is_empty());
}

#[test]
fn a_record_archived_in_two_overlapping_batches_reads_once() {
    let (_dir, layout, user) = setup();
    let batch: Vec<_> = (0..6).map(|i| record(i, "x")).collect();
    // A crash after archiving the first four, then a retry that folded six.
    archive::write_batch(&layout, &user, &batch[..4]).unwrap();
    archive::write_batch(&layout, &user, &batch).unwrap();
    assert_eq!(archive::files(&layout, &user).unwrap().len(), 2);
    assert_eq!(archive::read_all(&layout, &user).unwrap(), batch);
    assert_eq!(
        archive::read_between(&layout, &user, at(2), at(5)).unwrap(),
        batch[2..5]
    );
}
