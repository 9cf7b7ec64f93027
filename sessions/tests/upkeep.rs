//! Specifications of upkeep: scheduled maintenance (daily and weekly
//! summaries, catch-up, caps, STM expiry), the storage report, the
//! `/session` commands and the export bundle. One test target; each area is
//! a submodule under `upkeep/`.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

#[path = "upkeep/commands.rs"]
mod commands;
#[path = "upkeep/digests.rs"]
mod digests;
#[path = "upkeep/expiry.rs"]
mod expiry;
#[path = "upkeep/support.rs"]
mod support;
