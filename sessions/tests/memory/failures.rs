//! A summarizer that fails, hangs or answers nothing changes nothing but a
//! failure count, until the fallback summary keeps the log bounded; broken
//! files a person left behind neither block compaction nor get overwritten.

use super::fake::{FakeSummarizer, Reply};
use super::fixture::{config, memory, now, recs};
use super::support::write;
use mnemo_sessions::compaction::CompactionOutcome;
use mnemo_sessions::summarizer::{Fact, FactSection};

#[tokio::test]
async fn a_failing_summarizer_changes_nothing_and_is_retried() {
    let m = memory(config(50, 10, 100));
    m.append(0..51).await;
    let fake = FakeSummarizer::scripted([Reply::Fail("model down")]);
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::SummarizerFailed { failures: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(m.log(), recs(0..51));
    assert!(m.archived().is_empty());
    let s = m.summary().unwrap();
    assert_eq!(
        (s.meta.failures, s.body.trim(), s.meta.last_folded.is_none()),
        (1, "", true)
    );

    // Retried at the next trigger; success resets the count.
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compacted { folded: 41, .. }),
        "{outcome:?}"
    );
    assert_eq!(m.summary().unwrap().meta.failures, 0);
}

#[tokio::test]
async fn a_summarizer_that_times_out_changes_nothing() {
    let mut c = config(50, 10, 100);
    c.compacting.summarizer_timeout_secs = 1;
    let m = memory(c);
    m.append(0..51).await;
    let fake = FakeSummarizer::scripted([Reply::Hang]);
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    let CompactionOutcome::SummarizerFailed { failures: 1, error } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(error.contains("timed out"), "{error}");
    assert_eq!(m.log(), recs(0..51));
    assert!(m.archived().is_empty());
}

#[tokio::test]
async fn a_blank_summary_is_a_failure_not_an_erasure() {
    let m = memory(config(50, 10, 100));
    m.append(0..51).await;
    let fake = FakeSummarizer::new();
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    let before = m.summary().unwrap();
    m.append(51..92).await;
    let blank = FakeSummarizer::scripted([Reply::Blank]);
    let outcome = m.compactor(&blank).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::SummarizerFailed { failures: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(m.summary().unwrap().body, before.body, "the previous summary is kept");
    assert_eq!(m.log(), recs(41..92));
}

#[tokio::test]
async fn after_max_failures_a_fallback_summary_keeps_the_log_bounded() {
    let mut c = config(50, 10, 100);
    c.compacting.max_failures = 3;
    let m = memory(c);
    m.append(0..51).await;
    let fake = FakeSummarizer::scripted([Reply::Fail("1"), Reply::Fail("2"), Reply::Fail("3")]);
    let compactor = m.compactor(&fake);
    for failures in 1..=2 {
        let outcome = compactor.maybe_compact(&m.user, now()).await.unwrap();
        assert!(matches!(outcome, CompactionOutcome::SummarizerFailed { failures: f, .. } if f == failures));
    }
    let outcome = compactor.maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(
            outcome,
            CompactionOutcome::Fallback {
                folded: 41,
                failures: 0,
                ..
            }
        ),
        "{outcome:?}"
    );
    let s = m.summary().unwrap();
    assert!(s.meta.fallback && s.body.contains("Fallback summary") && s.body.contains("user: message 0\n"));
    assert_eq!(m.log(), recs(41..51));
    assert_eq!(m.archived(), recs(0..41));

    // The summarizer is back: it sees the fallback text and replaces it.
    m.append(51..92).await;
    compactor.maybe_compact(&m.user, now()).await.unwrap();
    let s = m.summary().unwrap();
    assert!(!s.meta.fallback);
    assert!(fake.seen()[3].previous.as_deref().unwrap().contains("Fallback summary"));
}

#[tokio::test]
async fn a_failing_summarizer_never_lets_the_log_pass_max_messages() {
    let m = memory(config(50, 10, 50));
    m.append(0..53).await;
    let fake = FakeSummarizer::scripted([Reply::Fail("down")]);
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(
            outcome,
            CompactionOutcome::Fallback {
                folded: 3,
                failures: 1,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(m.log(), recs(3..53));
    assert_eq!(m.everything(), recs(0..53));
}

#[tokio::test]
async fn a_broken_profile_does_not_stop_compaction_and_is_kept() {
    let m = memory(config(50, 10, 60));
    let path = m.sb.layout.profile_path(&m.user);
    let broken = "---\nuser_id: [\n---\n\n## Facts\n- job: teacher\n";
    write(&path, broken);
    m.append(0..51).await;
    let facts = vec![Fact {
        section: FactSection::Facts,
        key: "job".into(),
        value: "engineer".into(),
    }];
    let fake = FakeSummarizer::scripted([Reply::Facts(facts)]);
    let outcome = m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        matches!(outcome, CompactionOutcome::Compacted { folded: 41, .. }),
        "{outcome:?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);
}

#[tokio::test]
async fn a_broken_summary_file_is_salvaged_into_the_next_summary() {
    let m = memory(config(50, 10, 60));
    write(
        &m.sb.layout.summary_path(&m.user),
        "---\nfailures: [\n---\n\nThey like green tea.\n",
    );
    m.append(0..51).await;
    let fake = FakeSummarizer::new();
    m.compactor(&fake).maybe_compact(&m.user, now()).await.unwrap();
    assert!(
        fake.seen()[0]
            .previous
            .as_deref()
            .unwrap()
            .contains("They like green tea.")
    );
    assert!(m.summary().unwrap().body.contains("They like green tea."));
}
