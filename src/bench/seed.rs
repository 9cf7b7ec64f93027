//! Seeding a bench user's history the way the product keeps it: `n`
//! earlier messages of which all but the STM's usual bound were folded —
//! archived in compaction-sized batches through [`archive::write_batch`]
//! (the product's own path), summed up in `summary.md` — and the newest
//! `contextWindow` still in the short-term log — and indexed for recall
//! the way `mnemo sessions reindex` stores it ([`Recall::reindex`]), so the
//! first turn loads the index instead of rebuilding it.
//!
//! This is the one place history is seeded. It writes only the given
//! user's memory files, and does blocking file work: run it off the async
//! workers (the bench seeds users on the blocking pool).

use anyhow::{Context as _, Result};
use chrono::{DateTime, TimeDelta, Utc};
use mnemo_sessions::recall::Recall;
use mnemo_sessions::session::Sessions;
use mnemo_sessions::{Record, Role, SafeName, archive, summary};

/// Gives `user` `n` earlier messages, one a minute, ending a minute before
/// `now` (young enough that none has aged out of the STM).
pub async fn seed_history(
    sessions: &Sessions,
    recall: &Recall,
    user_id: &str,
    n: usize,
    now: DateTime<Utc>,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let user = SafeName::of(user_id);
    let Shape {
        folded,
        batch_len,
        first_ts,
    } = shape(sessions.config(), n, now);
    let layout = sessions.layout();

    let mut start = 0;
    while start < folded {
        let end = (start + batch_len).min(folded);
        let batch: Vec<Record> = (start..end).map(|i| record(user_id, i, first_ts)).collect();
        archive::write_batch(layout, &user, &batch).with_context(|| format!("seeding the archive of {user_id}"))?;
        start = end;
    }
    if folded > 0 {
        let mut rolling = summary::empty(&user);
        rolling.body = summary_text(folded);
        rolling.meta.messages_compacted = folded as u64;
        rolling.meta.last_compacted = Some(now);
        summary::write(layout, &user, &rolling).with_context(|| format!("seeding the summary of {user_id}"))?;
    }
    for i in folded..n {
        sessions
            .stm()
            .append(&user, &record(user_id, i, first_ts))
            .await
            .with_context(|| format!("seeding the short-term log of {user_id}"))?;
    }
    recall
        .reindex(&user, &mut |_| {})
        .with_context(|| format!("seeding the recall index of {user_id}"))?;
    Ok(())
}

/// The same history in the Postgres store ([`mnemo_pg::seed`]): the same
/// messages, folds of the same size, the same summary.
pub async fn seed_history_pg(pg: &mnemo_pg::PgChannel, user_id: &str, n: usize, now: DateTime<Utc>) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let Shape {
        folded,
        batch_len,
        first_ts,
    } = shape(pg.config(), n, now);
    let records: Vec<Record> = (0..n).map(|i| record(user_id, i, first_ts)).collect();
    let summary = if folded > 0 {
        summary_text(folded)
    } else {
        String::new()
    };
    mnemo_pg::seed::seed_history(pg, &SafeName::of(user_id), records, folded, batch_len, &summary, now)
        .await
        .with_context(|| format!("seeding the history of {user_id} in the database"))
}

/// How a seeded history of `n` messages is laid out.
struct Shape {
    /// Archived (the rest stay short-term: the context window's worth).
    folded: usize,
    /// Messages per fold, as compaction folds them at the threshold.
    batch_len: usize,
    first_ts: DateTime<Utc>,
}

fn shape(config: &mnemo_sessions::config::SessionConfig, n: usize, now: DateTime<Utc>) -> Shape {
    let in_stm = n.min(config.stm.context_window);
    Shape {
        folded: n - in_stm,
        batch_len: (config.compacting.threshold + 1)
            .saturating_sub(config.stm.context_window)
            .max(1),
        first_ts: now - TimeDelta::minutes(n as i64),
    }
}

fn summary_text(folded: usize) -> String {
    format!("We talked about the build pipeline ({folded} earlier messages).\n")
}

/// Message `i` of a seeded history: user and assistant in turn.
fn record(user_id: &str, i: usize, first_ts: DateTime<Utc>) -> Record {
    let user = i.is_multiple_of(2);
    Record {
        ts: first_ts + TimeDelta::minutes(i as i64),
        role: if user { Role::User } else { Role::Assistant },
        text: if user {
            format!(
                "Earlier question {i}: why did the nightly build of the API server fail on step {}?",
                i % 17
            )
        } else {
            format!(
                "Earlier answer {i}: the cache key changed, so step {} rebuilt everything and timed out.",
                i % 17
            )
        },
        msg_id: format!("seed-{i}"),
        channel: super::instant::CHANNEL.to_string(),
        thread_id: None,
        chat_id: Some(format!("D-{user_id}")),
        user_name: user.then(|| user_id.to_string()),
    }
}
