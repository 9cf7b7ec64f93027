//! The model backends against fake servers on 127.0.0.1 (and real
//! subprocesses for the command backend): the real reqwest client and the
//! real backend code on our side, fakes only at the network boundary.
//! Each submodule specifies one concern; `fake` holds the fake server. (The
//! `#[path]`s are needed because a test crate's root resolves modules next
//! to itself, not in `tests/model_backends/`.)

#[path = "model_backends/fake.rs"]
mod fake;

#[path = "model_backends/anthropic.rs"]
mod anthropic;
#[path = "model_backends/command.rs"]
mod command;
#[path = "model_backends/config.rs"]
mod config;
#[path = "model_backends/openai.rs"]
mod openai;
#[path = "model_backends/reliability.rs"]
mod reliability;
#[path = "model_backends/secrets.rs"]
mod secrets;
#[path = "model_backends/summarizer.rs"]
mod summarizer;

use mnemo_sessions::context::{Context, Turn};

/// A context with these parts. Built field by field: `Context` may gain
/// fields, so it is never written as a complete literal.
pub(crate) fn context_of(system: &str, turns: Vec<Turn>) -> Context {
    let mut context = Context {
        system: system.to_string(),
        ..Default::default()
    };
    context.turns = turns;
    context
}
