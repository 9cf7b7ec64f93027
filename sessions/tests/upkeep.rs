//! Specifications of upkeep: scheduled maintenance (daily and weekly
//! summaries, catch-up, caps, STM expiry), the storage report, the
//! `/session` commands and the export bundle. One test target; each area is
//! a submodule under `upkeep/`.

#[path = "upkeep/commands.rs"]
mod commands;
#[path = "upkeep/digests.rs"]
mod digests;
#[path = "upkeep/expiry.rs"]
mod expiry;
#[path = "upkeep/support.rs"]
mod support;
