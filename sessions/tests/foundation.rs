//! Specifications of the foundation every other module builds on: the STM
//! log and its crash rules, the per-user lock registry, the archive, the
//! operator config and the context builder. One test target; each area is a
//! submodule under `foundation/`.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

#[path = "foundation/archive.rs"]
mod archive;
#[path = "foundation/config.rs"]
mod config;
#[path = "foundation/context.rs"]
mod context;
#[path = "foundation/locks.rs"]
mod locks;
#[path = "foundation/stm.rs"]
mod stm;
#[path = "foundation/stm_crash.rs"]
mod stm_crash;
#[path = "foundation/stm_swap.rs"]
mod stm_swap;
#[path = "foundation/support.rs"]
mod support;
