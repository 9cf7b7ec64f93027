//! Access control and abuse limits for every channel (DESIGN §2, §6): who
//! may talk to the bot, how much, and what a refused sender hears. The
//! console is always the local owner; Slack, Telegram and Discord follow
//! their channel's `access.json` (on the Postgres store: the same rules in
//! the database).
//!
//! Code map: `file` (the access.json shape, atomic private writes, the
//! cross-process lock) → `store` (re-read on change, corrupt-file
//! quarantine and fallback), or `db` on the Postgres store (the same
//! document in the channel's database row, cached by revision, changed in
//! one transaction, shared by every broker) → `decide` (the pure decision) and `pairing`
//! (codes for strangers, approval) → `limits` (per-user token bucket,
//! message length, answer-once notices) → `gate` (the one call the pipeline
//! makes). `secrets` keeps tokens and keys out of log lines and errors.
//!
//! Invariant: a refused message is never stored, never sent to the model
//! and never logged with its text; nothing written in chat changes the rules.

pub mod db;
pub mod decide;
pub mod file;
pub mod gate;
pub mod limits;
pub mod pairing;
pub mod secrets;
pub mod store;

pub use decide::{CONSOLE, Decision, IgnoreReason, decide};
pub use file::{AccessFile, DmPolicy, GroupMemory, GroupRule};
pub use gate::{Admission, Gate};
