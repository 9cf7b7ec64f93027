//! The mnemo broker as a library, so the binary stays thin glue and the
//! end-to-end tests drive the real [`app::App`].
//!
//! Code map: `cli` (verbs) → `app` (wiring) → `dispatch` (per-user queues)
//! → `pipeline` (one message's path) → `model` (backends) and
//! `mnemo-sessions` (memory); `scheduler` runs maintenance in the
//! background; `config` is the app config; `shutdown` and `logging` are
//! process concerns.

pub mod access;
pub mod app;
pub mod bench;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod instance;
pub mod logging;
pub mod model;
pub mod pipeline;
pub mod platforms;
pub mod scheduler;
pub mod shutdown;
