//! The model backends against fake servers on 127.0.0.1 (and real
//! subprocesses for the command backend): the real reqwest client and the
//! real backend code on our side, fakes only at the network boundary.
//! Each submodule specifies one concern; `fake` holds the fake server.

pub(crate) mod fake;

mod anthropic;
mod command;
mod config;
mod deadline;
mod openai;
mod reliability;
mod secrets;
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
