//! Specifications of upkeep: scheduled maintenance (daily and weekly
//! summaries, catch-up, caps, STM expiry), the storage report, the
//! `/session` commands and the export bundle. One test target; each area is
//! a submodule under `upkeep/`.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

mod commands;
mod digests;
mod expiry;
mod support;
