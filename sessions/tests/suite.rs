//! The store's specifications, in one test binary: `foundation` (the STM log
//! and its crash rules, locks, archive, config, context), `memory` (compaction,
//! profile, facts, topics, session state, recall) and `upkeep` (commands,
//! expiry, digests). Run one area with `cargo test -p mnemo-sessions --test
//! suite <module>::`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod foundation;
mod memory;
mod upkeep;
