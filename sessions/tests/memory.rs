//! Specifications of mnemo's compaction and long-term memory, driven through
//! the public API of `mnemo-sessions` against real files in a temp folder
//! and an in-process fake summarizer.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

#[path = "memory/support.rs"]
mod support;

#[path = "memory/fake.rs"]
mod fake;

#[path = "memory/fixture.rs"]
mod fixture;

#[path = "memory/compaction.rs"]
mod compaction;

#[path = "memory/failures.rs"]
mod failures;

#[path = "memory/profile.rs"]
mod profile;

#[path = "memory/topics.rs"]
mod topics;

#[path = "memory/session.rs"]
mod session;

#[path = "memory/recall.rs"]
mod recall;

#[path = "memory/facts.rs"]
mod facts;
