//! The memory seam's contract, specified once and run against every store:
//! each spec is one `async fn(Subject)` here, and [`specs!`] runs it on the
//! file store and on Postgres (a real PostgreSQL from the test kit), both
//! opened the way the broker opens them (`ChannelMemory::open`, then
//! `on_postgres`). A behaviour both stores have belongs here; what only
//! one store does (SQL, locks, files) is tested beside that store.
//!
//! Areas: `turns` (intake, the view, what settles a question, what a
//! restart finds), `folds` (fold and its bound), `commands` (every
//! `/session` command's reply), `edits` (long-term memory: remember,
//! update, forget, versions and undo, hostile arguments), `scope` (one
//! user never reaches another's memory: recall, search, commands, tools),
//! `lifecycle` (clear, clear all, export, expiry and retention at
//! maintenance), `access` (who may talk: the rules in `access.json` or in
//! the database), `reminders` (set, claimed once, missed, told once),
//! `usage` (tokens per user and day, the channel's total, kept and shared),
//! `documents` (kept once, recalled by content, forgotten, exported, scoped),
//! `recall` (what a turn's recall picks: repeats once, facts told in two
//! places joined by the person they name), `merge` (two accounts' whole
//! memories made one: read, merged by time, written back, undone).

mod access;
mod commands;
mod documents;
mod edits;
mod folds;
mod groups;
mod lifecycle;
mod merge;
mod people;
mod recall;
mod reminders;
mod scope;
mod subject;
mod turns;
mod usage;

/// Runs each spec (a function of this module's area taking a
/// [`subject::Subject`]) once per store: `files::<spec>` and
/// `postgres::<spec>`.
macro_rules! specs {
    ($($spec:ident),* $(,)?) => {
        mod files {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $spec() {
                    super::$spec(crate::conformance::subject::Subject::files().await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $spec() {
                    super::$spec(crate::conformance::subject::Subject::postgres().await).await
                }
            )*
        }
    };
}
use specs;
