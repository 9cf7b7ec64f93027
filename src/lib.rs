//! The mnemo broker as a library (being wired; see ARCHITECTURE.md).

pub mod access;
pub mod config;
pub mod dispatch;
pub mod model;
