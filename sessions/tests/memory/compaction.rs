//! Compaction: nothing appended meanwhile is lost, a crash at any step is
//! continued by the next run, old messages are folded rather than dropped,
//! the sliding window holds the hard bound when compaction is off, and the
//! facts found fill long-term memory.

use super::fake::{FakeSummarizer, Reply, summary_text};
use super::fixture::{Memory, config, ids, memory, now, rec, recs};
use super::support::at;
use chrono::TimeDelta;
use mnemo_sessions::compaction::{self, CompactionOutcome, Compactor, FailPoint};
use mnemo_sessions::recall::Recall;
use mnemo_sessions::summarizer::{Fact, FactSection};
use mnemo_sessions::{profile, summary, topics};
use std::sync::Arc;

#[tokio::test]
async fn compaction_folds_all_but_the_window_into_summary_and_archive() {
    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let fake = FakeSummarizer::new();
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    let CompactionOutcome::Compacted {
        folded: 41,
        archived_to,
        ..
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(archived_to.starts_with(m.sb.layout.archive_dir(&m.user)));

    assert_eq!(m.log(), recs(41..51));
    assert_eq!(m.archived(), recs(0..41));
    let s = m.summary().unwrap();
    assert_eq!(s.meta.user_id, "U1");
    assert_eq!(s.meta.messages_compacted, 41);
    assert_eq!(s.meta.last_compacted, Some(now()));
    assert_eq!(s.meta.last_folded.as_ref().map(|f| f.msg_id.as_str()), Some("m40"));
    assert_eq!(s.body.trim(), summary_text(None, &ids(&recs(0..41))));

    // The next fold gets the previous summary and adds to it.
    m.append(51..92).await;
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen[1].previous.as_deref(), Some(s.body.trim()));
    assert_eq!(seen[1].msg_ids, ids(&recs(41..82)));
    assert_eq!(m.summary().unwrap().meta.messages_compacted, 82);
    assert_eq!(m.everything(), recs(0..92));
}

#[tokio::test]
async fn below_the_threshold_nothing_happens() {
    let m = memory(config(50, 10, 60));
    m.append(0..50).await;
    let fake = FakeSummarizer::new();
    assert_eq!(
        m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap(),
        CompactionOutcome::NotNeeded
    );
    assert!(fake.seen().is_empty() && m.summary().is_none() && m.archived().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_messages_appended_while_summarizing() {
    let m = Arc::new(memory(config(50, 10, 60)));
    m.append(0..60).await;
    let (fake, gate) = FakeSummarizer::gated();
    let compactor = m.compactor(&fake);
    let run = {
        let (compactor, user) = (compactor.clone(), m.user.clone());
        tokio::spawn(async move { compactor.maybe_compact(&user, now()).await })
    };
    gate.entered.notified().await;

    // A second trigger while the first runs returns at once.
    assert_eq!(
        compactor.maybe_compact(&m.user, now()).await.unwrap(),
        CompactionOutcome::AlreadyRunning
    );

    // 500 appends while the summarizer holds, 500 more racing the commit.
    m.append(60..560).await;
    let appender = {
        let m = m.clone();
        tokio::spawn(async move { m.append(560..1060).await })
    };
    gate.release();
    // The second trigger was handed to the run: done with the first fold,
    // it looks again, and the messages appended meanwhile are due.
    tokio::time::timeout(std::time::Duration::from_secs(30), gate.entered.notified())
        .await
        .expect("the run folds again for the trigger that came during it");
    gate.release();
    let outcome = run.await.unwrap().unwrap();
    appender.await.unwrap();

    assert!(matches!(outcome, CompactionOutcome::Compacted { .. }), "{outcome:?}");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "one fold, then the one the trigger asked for");
    assert_eq!(seen[0].msg_ids, ids(&recs(0..50)));
    let archived = m.archived();
    assert!(archived.len() > 50, "the second fold archived more: {}", archived.len());
    assert_eq!(archived[..50], recs(0..50)[..]);
    assert_eq!(m.everything(), recs(0..1060), "every message exactly once, in order");
}

/// Runs one compaction of 0..51 (with a topic fact) that stops after `step`
/// as if the process died, then a normal run; `None` is the uninterrupted
/// run to compare with.
async fn crashed_then_rerun(step: Option<FailPoint>) -> Memory {
    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let facts = || {
        vec![Fact {
            section: FactSection::Topics,
            key: "TOEIC".into(),
            value: "aiming for 860".into(),
        }]
    };
    let fake = FakeSummarizer::scripted([Reply::Facts(facts()), Reply::Facts(facts())]);
    if let Some(step) = step {
        let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), step);
        assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
        assert_shown_once(&m, 51, step);
    }
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    m
}

/// In any state, the context shows every message once: in the summary (the
/// fake names every folded id) or in the unfolded log, never both.
fn assert_shown_once(m: &Memory, total: usize, step: FailPoint) {
    let view = compaction::read_for_context(&m.stm, &m.user, 1000).unwrap();
    let in_summary = view.summary.unwrap_or_default();
    for r in &view.recent {
        assert!(
            !in_summary.split_whitespace().any(|w| w == r.msg_id),
            "{step:?}: {} twice",
            r.msg_id
        );
    }
    let shown = in_summary.split_whitespace().filter(|w| w.starts_with('m')).count() + view.recent.len();
    assert_eq!(shown, total, "{step:?}: every message is shown once");
}

#[tokio::test]
async fn a_crash_at_any_step_is_continued_by_the_next_run() {
    let clean = crashed_then_rerun(None).await;
    let clean_summary = clean.summary().unwrap();
    for step in FailPoint::ALL {
        let m = crashed_then_rerun(Some(step)).await;
        let s = m.summary().unwrap();
        assert_eq!(s.body, clean_summary.body, "{step:?}");
        assert_eq!(s.meta.last_folded, clean_summary.meta.last_folded, "{step:?}");
        assert_eq!(
            s.meta.messages_compacted, clean_summary.meta.messages_compacted,
            "{step:?}"
        );
        assert_eq!(
            m.archive_names(),
            clean.archive_names(),
            "{step:?}: one archive file, same name"
        );
        assert_eq!(m.archived(), clean.archived(), "{step:?}: nothing archived twice");
        assert_eq!(m.log(), clean.log(), "{step:?}");
        assert_eq!(m.everything(), recs(0..51), "{step:?}: nothing lost");
        assert_eq!(
            compaction::unfolded_recent(&m.stm, &m.user, 100).unwrap(),
            recs(41..51),
            "{step:?}"
        );
        assert_shown_once(&m, 51, step);
        let note = topics::read(&m.sb.layout, &m.user, "toeic").unwrap().unwrap();
        assert_eq!(
            note.body.lines().count(),
            1,
            "{step:?}: the repeated fact is recorded once"
        );
    }
}

#[tokio::test]
async fn an_interrupted_batch_is_finished_before_new_messages_are_folded() {
    for step in [FailPoint::AfterSummary, FailPoint::AfterArchive] {
        let m = memory(config(50, 10, 100));
        m.append(0..51).await;
        let fake = FakeSummarizer::new();
        let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), step);
        assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
        m.append(51..95).await; // the user keeps talking: 54 unfolded now
        assert_shown_once(&m, 95, step);

        let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
        assert!(
            matches!(outcome, CompactionOutcome::Compacted { folded: 44, .. }),
            "{step:?} {outcome:?}"
        );
        assert_eq!(
            fake.seen().last().unwrap().msg_ids,
            ids(&recs(41..85)),
            "{step:?}: m0..m40 not folded again"
        );
        assert_eq!(m.archived(), recs(0..85), "{step:?}");
        assert_eq!(m.log(), recs(85..95), "{step:?}");
        assert_eq!(m.summary().unwrap().meta.messages_compacted, 85, "{step:?}");
        assert_shown_once(&m, 95, step);
    }
}

#[tokio::test]
async fn a_crash_in_the_sliding_window_is_continued_too() {
    let mut c = config(50, 10, 20);
    c.compacting.enabled = false;
    for step in [FailPoint::AfterSummary, FailPoint::AfterArchive] {
        let m = memory(c.clone());
        m.append(0..25).await;
        let fake = FakeSummarizer::new();
        let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), step);
        assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
        assert_eq!(
            compaction::unfolded_recent(&m.stm, &m.user, 100).unwrap(),
            recs(5..25),
            "{step:?}"
        );
        m.append(25..26).await;
        let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
        assert!(
            matches!(outcome, CompactionOutcome::SlidingWindow { archived: 1, .. }),
            "{step:?} {outcome:?}"
        );
        assert_eq!(m.archived(), recs(0..6), "{step:?}");
        assert_eq!(m.log(), recs(6..26), "{step:?}");
        assert_eq!(m.archive_names().len(), 2, "{step:?}");
    }
}

#[tokio::test]
async fn messages_older_than_max_age_are_folded_not_dropped() {
    let mut c = config(50, 10, 60);
    c.stm.max_age_minutes = 60;
    let m = memory(c);
    m.append(0..6).await; // 09:00:00 .. 09:00:50
    let later = at(10, 0) + TimeDelta::seconds(25); // m0..m2 are over an hour old
    let fake = FakeSummarizer::new();
    let outcome = m.compactor(&fake).maybe_compact(&m.user, later).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compacted { folded: 3, .. }),
        "{outcome:?}"
    );
    assert_eq!(m.summary().unwrap().body.trim(), "folded: m0 m1 m2");
    assert_eq!(compaction::unfolded_recent(&m.stm, &m.user, 10).unwrap(), recs(3..6));
}

#[tokio::test]
async fn with_compaction_off_the_oldest_slide_out_unsummarized() {
    let mut c = config(50, 10, 20);
    c.compacting.enabled = false;
    let m = memory(c);
    m.append(0..20).await;
    let fake = FakeSummarizer::new();
    assert_eq!(
        m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap(),
        CompactionOutcome::NotNeeded
    );
    m.append(20..27).await;
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::SlidingWindow { archived: 7, .. }),
        "{outcome:?}"
    );
    assert_eq!(m.log(), recs(7..27));
    assert_eq!(m.archived(), recs(0..7));
    assert!(fake.seen().is_empty(), "no summarizer call");
    assert_eq!(summary::read_body(&m.sb.layout, &m.user).unwrap(), None);
}

#[tokio::test]
async fn a_log_cleared_during_summarization_is_not_overwritten() {
    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let (fake, gate) = FakeSummarizer::gated();
    let compactor = m.compactor(&fake);
    let run = {
        let (compactor, user) = (compactor.clone(), m.user.clone());
        tokio::spawn(async move { compactor.maybe_compact(&user, now()).await })
    };
    gate.entered.notified().await;
    {
        let guard = m.stm.lock(&m.user).await;
        m.stm.remove_locked(&guard, &m.user).unwrap(); // `/session clear`
    }
    m.append(100..101).await;
    gate.release();
    assert_eq!(run.await.unwrap().unwrap(), CompactionOutcome::Superseded);
    assert_eq!(m.log(), vec![rec(100)]);
    assert!(m.summary().is_none() && m.archived().is_empty());
}

#[tokio::test]
async fn facts_from_compaction_fill_profile_topics_and_index() {
    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let facts = vec![
        Fact {
            section: FactSection::Preferences,
            key: "language".into(),
            value: "English".into(),
        },
        Fact {
            section: FactSection::Topics,
            key: "TOEIC 860".into(),
            value: "listening drills".into(),
        },
    ];
    let fake = FakeSummarizer::scripted([Reply::Facts(facts)]);
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();

    let p = profile::read(&m.sb.layout, &m.user).unwrap().unwrap();
    assert_eq!(p.meta.display_name.as_deref(), Some("Kevin"));
    let body = profile::read_body(&m.sb.layout, &m.user).unwrap().unwrap();
    assert!(
        body.contains("## Preferences\n- language: English")
            && body.contains("## Ongoing topics\n- TOEIC 860: listening drills")
    );
    let note = topics::read(&m.sb.layout, &m.user, "toeic-860").unwrap().unwrap();
    assert!(note.body.contains("listening drills"));
    // The profile bullet, its entry in the fact log and the topic note are
    // searchable at once.
    let hits = Recall::of(&m.stm).search(&m.user, "listening", 10);
    assert_eq!(
        hits.iter().filter(|h| h.text.contains("listening drills")).count(),
        3,
        "{hits:?}"
    );

    // The next compaction shows the summarizer the profile it filled.
    m.append(51..92).await;
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(fake.seen()[1].profile.as_deref().unwrap().contains("language: English"));
}

/// The fold marker and the archive file come from one encoding of the
/// batch: the file name carries the first 16 hex digits of the marker's
/// SHA-256, and that digest is the SHA-256 of the archive's decompressed
/// bytes — the batch's JSON lines, as they always were. A run that
/// finishes an interrupted batch names its file from the marker's batch
/// the same way.
#[tokio::test]
async fn the_archive_name_carries_the_fold_markers_digest_of_the_archived_bytes() {
    use flate2::read::GzDecoder;
    use sha2::{Digest, Sha256};
    use std::io::Read;

    let lines = |records: &[mnemo_sessions::Record]| -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            out.extend(serde_json::to_vec(r).unwrap());
            out.push(b'\n');
        }
        out
    };
    let check = |m: &Memory, folded: std::ops::Range<usize>| {
        let marker = m.summary().unwrap().meta.last_folded.unwrap();
        assert_eq!(marker.batch_len, folded.len());
        let names = m.archive_names();
        let name = names.last().unwrap();
        let path = m.sb.layout.archive_dir(&m.user).join(name);
        let mut bytes = Vec::new();
        GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_end(&mut bytes)
            .unwrap();
        assert_eq!(bytes, lines(&recs(folded)), "the archive holds the batch's JSON lines");
        let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(marker.batch_sha256, digest, "the marker hashes the archived bytes");
        assert!(
            name.ends_with(&format!("-{}.jsonl.gz", &digest[..16])),
            "{name} is named by the marker's digest {digest}"
        );
    };

    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let fake = FakeSummarizer::new();
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    check(&m, 0..41);

    // Stopped right after the summary (marker written, nothing archived),
    // then finished by the next run from the marker alone.
    m.append(51..92).await;
    let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), FailPoint::AfterSummary);
    assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
    assert_eq!(m.archive_names().len(), 1);
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Resumed { archived: 41, .. }),
        "{outcome:?}"
    );
    check(&m, 41..82);
    assert_eq!(m.everything(), recs(0..92));
}

/// The log is read once per run and the drop is staged from those bytes:
/// malformed lines inside the folded part leave with it and are kept in
/// `malformed.jsonl`, the one after it stays, and messages appended while
/// the summarizer ran are copied after the rest, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_staged_from_the_first_read_keeps_malformed_lines_and_later_appends() {
    use std::io::Write;

    let m = Arc::new(memory(config(50, 10, 60)));
    let path = m.sb.layout.messages_path(&m.user);
    let garbage = |text: &[u8]| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(text)
            .unwrap()
    };
    m.append(0..5).await;
    garbage(b"garbage inside the batch\n");
    m.append(5..45).await;
    garbage(b"garbage after the batch\n");
    m.append(45..51).await;
    let (fake, gate) = FakeSummarizer::gated();
    let run = {
        let (compactor, user) = (m.compactor(&fake), m.user.clone());
        tokio::spawn(async move { compactor.maybe_compact(&user, now()).await })
    };
    gate.entered.notified().await;
    m.append(51..60).await;
    gate.release();
    let outcome = run.await.unwrap().unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compacted { folded: 41, .. }),
        "{outcome:?}"
    );
    let kept = std::fs::read_to_string(m.sb.layout.malformed_path(&m.user)).unwrap();
    assert_eq!(kept, "garbage inside the batch\n");
    let snapshot = m.stm.read_all(&m.user).unwrap();
    assert_eq!(snapshot.records, recs(41..60));
    assert_eq!(snapshot.skipped_lines, 1, "the line after the batch stays in the log");
    assert_eq!(m.archived(), recs(0..41));
}

/// Phase 3 trusts the first read only while the log is the same file: a
/// log rewritten behind the run's back — even with the same records at its
/// head, as another process's rewrite could leave it — supersedes the run,
/// and nothing is written.
#[tokio::test]
async fn a_log_rewritten_during_summarization_supersedes_the_run() {
    let m = memory(config(50, 10, 60));
    m.append(0..51).await;
    let (fake, gate) = FakeSummarizer::gated();
    let run = {
        let (compactor, user) = (m.compactor(&fake), m.user.clone());
        tokio::spawn(async move { compactor.maybe_compact(&user, now()).await })
    };
    gate.entered.notified().await;
    let path = m.sb.layout.messages_path(&m.user);
    let bytes = std::fs::read(&path).unwrap();
    let copy = path.with_extension("copy");
    std::fs::write(&copy, &bytes).unwrap();
    std::fs::rename(&copy, &path).unwrap();
    gate.release();
    assert_eq!(run.await.unwrap().unwrap(), CompactionOutcome::Superseded);
    assert_eq!(m.log(), recs(0..51));
    assert!(m.summary().is_none() && m.archived().is_empty());
}
