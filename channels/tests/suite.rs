//! The platform adapters against fake platforms on 127.0.0.1, in one test
//! binary: one module per platform. Run one with `cargo test -p
//! mnemo-channels --test suite <platform>::`.

mod discord;
mod slack;
mod telegram;
