//! Access control and abuse limits, end to end (issue 10): the real broker
//! pipeline with a fake platform channel and a fake model server, and the
//! real `mnemo access` binary. Each submodule specifies one concern. (The
//! `#[path]`s are needed because a test crate's root resolves modules next
//! to itself, not in `tests/access/`.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod support;

#[path = "access/harness.rs"]
mod harness;

#[path = "access/corrupt.rs"]
mod corrupt;
#[path = "access/leaks.rs"]
mod leaks;
#[path = "access/limits.rs"]
mod limits;
#[path = "access/pairing.rs"]
mod pairing;
#[path = "access/policies.rs"]
mod policies;
