//! Specifications of the foundation every other module builds on: the STM
//! log and its crash rules, the per-user lock registry, the archive, the
//! operator config and the context builder. One test target; each area is a
//! submodule under `foundation/`.

#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures build their own paths in a temp folder"
)]

mod archive;
mod config;
mod context;
mod locks;
mod stm;
mod stm_crash;
mod stm_swap;
mod support;
