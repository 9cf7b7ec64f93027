//! The platform adapters against fake platforms on 127.0.0.1, in one test
//! binary: one module per platform. Run one with `cargo test -p
//! mnemo-channels --test suite <platform>::`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod discord;
mod slack;
mod telegram;
