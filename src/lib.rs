//! The mnemo broker as a library, so the binary stays thin glue and the
//! end-to-end tests drive the real [`app::App`].
//!
//! Code map: `cli` (verbs) → `app` (wiring) → `dispatch` (per-user queues)
//! → `pipeline` (one message's path) → `model` (backends) and
//! `mnemo-sessions` (memory); `scheduler` runs maintenance in the
//! background; `ops` is the health/metrics endpoint and turn log; `config` is the app config; `shutdown` and `logging` are
//! process concerns.

#![forbid(unsafe_code)]

pub mod access;
pub mod app;
pub mod bench;
pub mod channel_memory;
pub mod cli;
pub mod config;
pub mod dispatch;
pub mod documents;
pub mod instance;
pub mod logging;
pub mod memory_tools;
pub mod model;
pub mod ops;
pub mod parts;
pub mod people;
pub mod pipeline;
pub mod platforms;
pub mod reminders;
pub mod reply_limit;
pub mod scheduler;
pub mod shutdown;
pub mod streaming;
