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
    let outcome = run.await.unwrap().unwrap();
    appender.await.unwrap();

    assert!(
        matches!(outcome, CompactionOutcome::Compacted { folded: 50, .. }),
        "{outcome:?}"
    );
    assert_eq!(fake.seen()[0].msg_ids, ids(&recs(0..50)));
    assert_eq!(m.archived(), recs(0..50));
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
