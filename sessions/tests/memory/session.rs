//! The session-state seam: what a turn reads comes from memory, and memory
//! always says what the files say — after our own appends, after a
//! compaction (finished or crashed at any step), after a change made behind
//! the bot's back, after a failed write, and for more users than it keeps.

use super::fake::FakeSummarizer;
use super::fixture::{Memory, config, memory, now, rec, recs};
use super::support::write;
use chrono::{DateTime, Utc};
use mnemo_sessions::Record;
use mnemo_sessions::SafeName;
use mnemo_sessions::compaction::{self, CompactionOutcome, Compactor, FailPoint};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::profile;
use mnemo_sessions::session::{Appended, ContextView, FILES_RECHECK, Sessions};
use mnemo_sessions::stm::Stm;
use std::sync::Arc;

fn sessions(m: &Memory, fake: &Arc<FakeSummarizer>) -> Sessions {
    Sessions::new(m.stm.clone(), m.config.clone(), m.compactor(fake))
}

/// The view a turn would get by reading every file, as before the seam.
/// What a turn does with its message: stored as it arrives (intake), then
/// the turn's view of the last `n` records.
async fn store_then_view(
    s: &Sessions,
    user: &SafeName,
    record: &Record,
    at: DateTime<Utc>,
    n: usize,
) -> (Appended, ContextView) {
    let appended = s
        .append_new(user, record, at, n)
        .await
        .unwrap()
        .expect("a new message is stored");
    (appended, s.turn_view(user, n, at).await.unwrap())
}

fn from_disk(m: &Memory, user: &SafeName, n: usize) -> ContextView {
    let recent = compaction::read_for_context(&m.stm, user, n).unwrap();
    ContextView {
        summary: recent.summary.map(Arc::from),
        profile: profile::read_body(&m.sb.layout, user).unwrap().map(Arc::from),
        recent: recent.recent.into_iter().map(Arc::new).collect(),
    }
}

#[tokio::test]
async fn the_view_from_memory_equals_the_files_through_appends_and_compactions() {
    for fsync in [false, true] {
        let mut m = memory(config(8, 3, 12));
        m.stm = Stm::new(m.sb.layout.clone(), LockRegistry::new(), fsync);
        let fake = FakeSummarizer::new();
        let s = sessions(&m, &fake);
        let mut compactions = 0;
        for i in 0..40 {
            let appended = s.append(&m.user, &rec(i), now()).await.unwrap();
            assert_eq!(
                s.context_view(&m.user, 4).await.unwrap(),
                from_disk(&m, &m.user, 4),
                "after m{i}"
            );
            if appended.fold_due {
                let outcome = s.compact(&m.user, now()).await.unwrap();
                assert!(matches!(outcome, CompactionOutcome::Compacted { .. }), "{outcome:?}");
                compactions += 1;
                assert_eq!(s.context_view(&m.user, 4).await.unwrap(), from_disk(&m, &m.user, 4));
            }
        }
        assert_eq!(
            compactions, 6,
            "fsync {fsync}: at m8, then every 6 messages (threshold 8, window 3)"
        );
        assert_eq!(m.everything(), recs(0..40), "fsync {fsync}: nothing lost or doubled");
    }
}

#[tokio::test]
async fn a_fold_is_due_from_the_counters_exactly_when_the_rules_say() {
    let m = memory(config(6, 2, 10));
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    for i in 0..6 {
        assert!(!s.append(&m.user, &rec(i), now()).await.unwrap().fold_due, "m{i}");
    }
    assert!(
        s.append(&m.user, &rec(6), now()).await.unwrap().fold_due,
        "past the threshold"
    );
    assert!(s.fold_due(&m.user, now()));
    s.compact(&m.user, now()).await.unwrap();
    assert!(
        !s.append(&m.user, &rec(7), now()).await.unwrap().fold_due,
        "3 unfolded after the fold"
    );
    // The age rule: the oldest unfolded message is past maxAgeMinutes.
    let later = now() + chrono::TimeDelta::minutes(m.config.stm.max_age_minutes as i64 + 1);
    assert!(s.append(&m.user, &rec(8), later).await.unwrap().fold_due, "aged out");
}

#[tokio::test]
async fn after_a_compaction_an_active_user_stays_in_memory_with_what_the_files_say() {
    let m = memory(config(6, 2, 10));
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    for i in 0..7 {
        s.append(&m.user, &rec(i), now()).await.unwrap();
    }
    let outcome = s.compact(&m.user, now()).await.unwrap();
    assert!(matches!(outcome, CompactionOutcome::Compacted { .. }), "{outcome:?}");
    assert_eq!(
        s.active(),
        1,
        "reloaded after the fold, not dropped for the next turn to reload"
    );
    let (_, view) = store_then_view(&s, &m.user, &rec(7), now(), 4).await;
    assert_eq!(view, from_disk(&m, &m.user, 4));
    assert!(view.summary.is_some(), "the fold's summary is in the view");

    // A compaction of a user who is not in memory (another channel's
    // sessions over the same files: the sweep for quiet users) loads no one.
    let quiet = sessions(&m, &fake);
    let other = SafeName::of("quiet-one");
    for i in 10..17 {
        s.append(&other, &rec(i), now()).await.unwrap();
    }
    let outcome = quiet.compact(&other, now()).await.unwrap();
    assert!(matches!(outcome, CompactionOutcome::Compacted { .. }), "{outcome:?}");
    assert_eq!(quiet.active(), 0);
    assert_eq!(m.everything(), recs(0..8), "the first user's messages, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_racing_their_own_compactions_always_see_their_latest_messages_once() {
    let m = memory(config(8, 3, 40));
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    let mut folds = tokio::task::JoinSet::new();
    for i in 0..150 {
        let (appended, view) = store_then_view(&s, &m.user, &rec(i), now(), 4).await;
        let ids: Vec<String> = view.recent.iter().map(|r| r.msg_id.clone()).collect();
        let first = i + 1 - ids.len();
        assert!(ids.len() >= 3.min(i + 1), "m{i}: {ids:?}");
        assert_eq!(ids, (first..=i).map(|j| format!("m{j}")).collect::<Vec<_>>(), "m{i}");
        if appended.fold_due {
            let (s, user) = (s.clone(), m.user.clone());
            folds.spawn(async move { s.compact(&user, now()).await });
        }
    }
    while let Some(done) = folds.join_next().await {
        done.unwrap().unwrap();
    }
    s.compact(&m.user, now()).await.unwrap();
    assert_eq!(s.context_view(&m.user, 4).await.unwrap(), from_disk(&m, &m.user, 4));
    assert_eq!(m.everything(), recs(0..150), "nothing lost or doubled");
}

#[tokio::test]
async fn files_changed_behind_the_sessions_back_are_reloaded_not_overwritten() {
    let m = memory(config(50, 4, 60));
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    for i in 0..3 {
        s.append(&m.user, &rec(i), now()).await.unwrap();
    }
    assert_eq!(s.context_view(&m.user, 5).await.unwrap().recent_records(), recs(0..3));

    // Another writer appends (as a second process would), an operator edits
    // the profile and writes a summary by hand.
    m.stm.append(&m.user, &rec(3)).await.unwrap();
    write(
        &m.sb.layout.profile_path(&m.user),
        "---\nuserId: U1\n---\n## Preferences\n- tea\n",
    );
    write(
        &m.sb.layout.summary_path(&m.user),
        "---\nuserId: U1\n---\nThey talked about tea.\n",
    );
    let view = s.context_view(&m.user, 5).await.unwrap();
    assert_eq!(view.recent_records(), recs(0..4), "the other writer's message is seen");
    assert_eq!(view.profile.as_deref(), Some("## Preferences\n- tea"));
    assert_eq!(view.summary.as_deref(), Some("They talked about tea."));

    // Our next append goes after theirs, never over it.
    m.stm.append(&m.user, &rec(4)).await.unwrap();
    s.append(&m.user, &rec(5), now()).await.unwrap();
    assert_eq!(m.log(), recs(0..6));
    // The profile is edited in place again: same inode, new length.
    write(
        &m.sb.layout.profile_path(&m.user),
        "---\nuserId: U1\n---\n## Preferences\n- coffee now\n",
    );
    let view = s.context_view(&m.user, 5).await.unwrap();
    assert_eq!(view.recent_records(), recs(1..6));
    assert_eq!(view.profile.as_deref(), Some("## Preferences\n- coffee now"));
    assert_eq!(view, from_disk(&m, &m.user, 5));
}

#[tokio::test]
async fn a_failed_append_is_not_in_memory_and_the_next_turn_sees_the_disk() {
    for fsync in [false, true] {
        a_failed_append_is_not_in_memory(fsync).await;
    }
}

async fn a_failed_append_is_not_in_memory(fsync: bool) {
    let mut m = memory(config(50, 4, 60));
    m.stm = Stm::new(m.sb.layout.clone(), LockRegistry::new(), fsync);
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    s.append(&m.user, &rec(0), now()).await.unwrap();
    // The user's folder is replaced by a file: the log cannot be written.
    let dir = m.sb.layout.stm_dir(&m.user);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    assert!(s.append(&m.user, &rec(1), now()).await.is_err());
    assert_eq!(s.active(), 0, "the state that failed is dropped");
    std::fs::remove_file(&dir).unwrap();
    let view = s.context_view(&m.user, 5).await.unwrap();
    assert!(
        view.recent.is_empty(),
        "neither the lost m0 nor the failed m1: {view:?}"
    );
    s.append(&m.user, &rec(2), now()).await.unwrap();
    assert_eq!(m.log(), vec![rec(2)]);
    assert_eq!(s.context_view(&m.user, 5).await.unwrap().recent_records(), vec![rec(2)]);
}

#[tokio::test]
async fn a_compaction_crashed_at_any_step_never_shows_a_message_twice_and_is_finished() {
    for step in FailPoint::ALL {
        let m = memory(config(10, 3, 30));
        let fake = FakeSummarizer::new();
        let s = sessions(&m, &fake);
        for i in 0..11 {
            s.append(&m.user, &rec(i), now()).await.unwrap();
        }
        assert_eq!(s.context_view(&m.user, 4).await.unwrap().recent_records(), recs(7..11));
        // A compaction that is not ours (the CLI's `sessions maintain`)
        // stops after `step`: memory is now behind the disk.
        let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), step);
        assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
        let view = s.context_view(&m.user, 4).await.unwrap();
        assert_eq!(view, from_disk(&m, &m.user, 4), "{step:?}");
        if step != FailPoint::AfterLtm {
            let summary = view.summary.unwrap_or_default();
            assert!(
                view.recent
                    .iter()
                    .all(|r| !summary.contains(&format!(" {} ", r.msg_id))),
                "{step:?}"
            );
        }

        // The next append says a fold is due (the batch waiting at the
        // head, or the threshold), and our compaction finishes it.
        assert!(s.append(&m.user, &rec(11), now()).await.unwrap().fold_due, "{step:?}");
        s.compact(&m.user, now()).await.unwrap();
        assert_eq!(
            s.context_view(&m.user, 4).await.unwrap(),
            from_disk(&m, &m.user, 4),
            "{step:?}"
        );
        assert_eq!(m.everything(), recs(0..12), "{step:?}: nothing lost or doubled");
    }
}

#[tokio::test]
async fn lines_not_in_mnemos_encoding_are_archived_as_written_and_a_crashed_fold_of_them_finishes_once() {
    let m = memory(config(10, 3, 30));
    // The log as another tool wrote it: the same records, other bytes
    // (spaces after every `:` and `,`) than mnemo's own encoding.
    let line = |i: usize| {
        let mut line = serde_json::to_string_pretty(&rec(i)).unwrap().replace('\n', "");
        line.push('\n');
        line
    };
    let written: String = (0..11).map(line).collect();
    write(&m.sb.layout.messages_path(&m.user), &written);
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);

    // A fold of the first 8 stops right after writing its summary.
    let crashing = Compactor::failing_after(m.stm.clone(), m.config.clone(), fake.clone(), FailPoint::AfterSummary);
    assert!(crashing.maybe_compact(&m.user, now()).await.is_err());
    let view = s.context_view(&m.user, 4).await.unwrap();
    assert_eq!(
        view.recent_records(),
        recs(8..11),
        "the folded batch is recognised by its lines"
    );
    let summary = view.summary.unwrap_or_default();
    assert!(summary.contains(" m7"), "{summary}");

    // The next run finishes it: archived once, byte for byte as the log
    // held it, and dropped from the log.
    s.compact(&m.user, now()).await.unwrap();
    let files = mnemo_sessions::archive::files(&m.sb.layout, &m.user).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut archived = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&files[0]).unwrap()),
        &mut archived,
    )
    .unwrap();
    assert_eq!(archived, (0..8).map(line).collect::<String>());
    assert_eq!(m.everything(), recs(0..11), "nothing lost or doubled");
}

#[tokio::test]
async fn memory_stays_bounded_however_many_users_write_once() {
    let m = memory(config(50, 4, 60));
    let fake = FakeSummarizer::new();
    let s = Sessions::with_limits(m.stm.clone(), m.config.clone(), m.compactor(&fake), 64, 8);
    for u in 0..1000 {
        let user = SafeName::of(&format!("U{u}"));
        s.append(&user, &rec(u), now()).await.unwrap();
        assert!(s.active() <= 64, "{} states after {u} users", s.active());
        assert!(s.open_logs() <= 8);
    }
    // An evicted user comes back: their state is read again from the files.
    let first = SafeName::of("U0");
    s.append(&first, &rec(1), now()).await.unwrap();
    assert_eq!(
        s.context_view(&first, 5).await.unwrap().recent_records(),
        vec![rec(0), rec(1)]
    );
    drop(s);
    assert_eq!(m.stm.users().unwrap().len(), 1000);
}

/// With `stm.fsync` on, appends of many users at once: each is durable
/// and in memory exactly as on disk, nothing lost or doubled, each user's
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_of_many_users_at_once_with_fsync_are_each_on_disk_once_and_in_memory() {
    let mut m = memory(config(50, 4, 60));
    m.stm = Stm::new(m.sb.layout.clone(), LockRegistry::new(), true);
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    let users: Vec<SafeName> = (0..40).map(|u| SafeName::of(&format!("U{u}"))).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for user in users.clone() {
        let s = s.clone();
        tasks.spawn(async move {
            for i in 0..6 {
                s.append(&user, &rec(i), now()).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    for user in &users {
        assert_eq!(m.stm.read_all(user).unwrap().records, recs(0..6), "{user}");
        assert_eq!(s.context_view(user, 4).await.unwrap(), from_disk(&m, user, 4), "{user}");
    }
}

/// A turn dropped while its append is on the blocking pool (a shutdown, a
/// cancelled task): the append finishes — the lock moves along — so the
/// message is on disk once, the view shows it once, and the next append
/// neither loses nor doubles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_dropped_while_it_syncs_is_on_disk_once_and_in_the_view_once() {
    let mut m = memory(config(50, 4, 60));
    m.stm = Stm::new(m.sb.layout.clone(), LockRegistry::new(), true);
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    s.append(&m.user, &rec(0), now()).await.unwrap();
    // Polled once: the write and fsync are a thread hop away, so the zero
    // timeout drops the turn midway.
    let _ = tokio::time::timeout(std::time::Duration::ZERO, s.append(&m.user, &rec(1), now())).await;
    assert_eq!(s.context_view(&m.user, 4).await.unwrap().recent_records(), recs(0..2));
    s.append(&m.user, &rec(2), now()).await.unwrap();
    assert_eq!(m.log(), recs(0..3), "nothing lost or doubled on disk");
    assert_eq!(s.context_view(&m.user, 4).await.unwrap(), from_disk(&m, &m.user, 4));
}

/// What a turn does with the user's message: stored on intake, then its
/// view — the view is the files' view with the message in it,
/// through folds, a reload after a change behind our back, and fsync.
/// (Turns a second apart: a turn looks at the profile at most once per
/// `FILES_RECHECK`, see the next spec.)
#[tokio::test]
async fn a_turns_view_after_its_store_shows_what_the_files_show_including_the_new_message() {
    for fsync in [false, true] {
        let mut m = memory(config(8, 3, 12));
        m.stm = Stm::new(m.sb.layout.clone(), LockRegistry::new(), fsync);
        let fake = FakeSummarizer::new();
        let s = sessions(&m, &fake);
        for i in 0..20 {
            if i == 11 {
                // An operator's edit, behind the sessions' back.
                write(
                    &m.sb.layout.profile_path(&m.user),
                    "---\nuserId: U1\n---\n## Preferences\n- tea\n",
                );
            }
            let at = now() + FILES_RECHECK * i as i32;
            let (appended, view) = store_then_view(&s, &m.user, &rec(i), at, 4).await;
            assert_eq!(view, from_disk(&m, &m.user, 4), "fsync {fsync}, m{i}");
            assert_eq!(view.recent.last().map(|r| &**r), Some(&rec(i)), "fsync {fsync}, m{i}");
            assert_eq!(appended.fold_due, s.fold_due(&m.user, at), "fsync {fsync}, m{i}");
            if appended.fold_due {
                s.compact(&m.user, at).await.unwrap();
            }
        }
        assert_eq!(m.everything(), recs(0..20), "fsync {fsync}: nothing lost or doubled");
    }
}

/// Turns go on while a compaction summarizes; a trigger that finds it
/// running is not lost: the run looks again when it ends and folds what
/// came in meanwhile, so the log is back within its bound without waiting
/// for the user's next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_during_a_compaction_is_folded_when_that_compaction_ends() {
    let m = memory(config(6, 2, 8));
    let (fake, gate) = FakeSummarizer::gated();
    let s = sessions(&m, &fake);
    for i in 0..7 {
        s.append(&m.user, &rec(i), now()).await.unwrap();
    }
    let first = {
        let (s, user) = (s.clone(), m.user.clone());
        tokio::spawn(async move { s.compact(&user, now()).await })
    };
    gate.entered.notified().await;
    for i in 7..14 {
        s.append(&m.user, &rec(i), now()).await.unwrap();
    }
    assert_eq!(
        s.compact(&m.user, now()).await.unwrap(),
        CompactionOutcome::AlreadyRunning
    );
    gate.release();
    gate.release();
    assert!(matches!(
        first.await.unwrap().unwrap(),
        CompactionOutcome::Compacted { .. }
    ));
    assert_eq!(fake.seen().len(), 2, "the first run folded again when it ended");
    assert!(m.log().len() <= 8, "back within maxMessages: {}", m.log().len());
    assert_eq!(m.everything(), recs(0..14), "nothing lost or doubled");
    assert_eq!(s.context_view(&m.user, 2).await.unwrap(), from_disk(&m, &m.user, 2));
}

/// A turn's view looks at the summary and profile on disk at most once per
/// `FILES_RECHECK` of message time (the log, which appends go to, every
/// time): an edit made behind the bot's back is in the context within that
/// second, and never overwritten — and at once when an in-process rewriter
/// of the user's files (`Stm::lock`: a memory tool's edit, clear, expiry)
/// ran, or when the clock went back. `context_view` always looks.
#[tokio::test]
async fn an_edit_behind_the_bots_back_reaches_a_turns_view_within_the_recheck_interval() {
    let m = memory(config(50, 4, 60));
    let fake = FakeSummarizer::new();
    let s = sessions(&m, &fake);
    let profile = |likes: &str| {
        write(
            &m.sb.layout.profile_path(&m.user),
            &format!("---\nuserId: U1\n---\n## Preferences\n- {likes}\n"),
        )
    };
    let t0 = now();
    store_then_view(&s, &m.user, &rec(0), t0, 4).await;

    // An operator's edit and another writer's append, within the second.
    profile("tea");
    write(&m.sb.layout.summary_path(&m.user), "---\nuserId: U1\n---\nAbout tea.\n");
    m.stm.append(&m.user, &rec(1)).await.unwrap();
    let half = t0 + FILES_RECHECK / 2;
    let (_, view) = store_then_view(&s, &m.user, &rec(2), half, 4).await;
    assert_eq!(view.recent_records(), recs(0..3), "the log is looked at every time");
    // (The other writer's append changed the log, so this turn reloaded
    // everything; the next edit is one the log does not give away.)
    assert_eq!(view, from_disk(&m, &m.user, 4));
    profile("coffee");
    let (_, view) = store_then_view(&s, &m.user, &rec(3), half, 4).await;
    assert_eq!(
        view.profile.as_deref(),
        Some("## Preferences\n- tea"),
        "not looked at again within the second"
    );
    assert_eq!(view.recent_records(), recs(0..4));
    let (_, view) = store_then_view(&s, &m.user, &rec(4), half + FILES_RECHECK, 4).await;
    assert_eq!(
        view.profile.as_deref(),
        Some("## Preferences\n- coffee"),
        "a second later"
    );
    assert_eq!(view, from_disk(&m, &m.user, 4));
    assert_eq!(
        std::fs::read_to_string(m.sb.layout.profile_path(&m.user)).unwrap(),
        "---\nuserId: U1\n---\n## Preferences\n- coffee\n",
        "the edit is never overwritten"
    );

    // The bot's own rewriter, under the user's lock: seen at once.
    {
        let _guard = m.stm.lock(&m.user).await;
        profile("oolong");
    }
    let t = half + FILES_RECHECK;
    let (_, view) = store_then_view(&s, &m.user, &rec(5), t, 4).await;
    assert_eq!(view.profile.as_deref(), Some("## Preferences\n- oolong"));

    // A clock that went back looks too.
    profile("water");
    let (_, view) = store_then_view(&s, &m.user, &rec(6), t0, 4).await;
    assert_eq!(view.profile.as_deref(), Some("## Preferences\n- water"));

    // Outside a turn, always.
    profile("juice");
    assert_eq!(
        s.context_view(&m.user, 4).await.unwrap().profile.as_deref(),
        Some("## Preferences\n- juice")
    );
    assert_eq!(m.log(), recs(0..7), "nothing lost or doubled");
}
