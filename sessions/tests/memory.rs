//! Specifications of mnemo's compaction and long-term memory, driven through
//! the public API of `mnemo-sessions` against real files in a temp folder
//! and an in-process fake summarizer.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

mod support;

mod fake;

mod fixture;

mod compaction;

mod failures;

mod profile;

mod topics;

mod session;

mod recall;

mod facts;
