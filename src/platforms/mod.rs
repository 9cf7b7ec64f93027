//! Building the platform channels that `mnemo run` serves from the app
//! config: one file per platform, each turning its config section and the
//! environment into an `Arc<dyn Channel>`. The adapters themselves live in
//! `mnemo-channels`; this is only construction (tokens read from the env
//! vars the config names, API base URLs, modes).
//!
//! It takes the `channels` section, not the command line's setup, and says
//! each platform's problem on its own: how they are reported together is
//! the command's (`cli/serve.rs`, `cli/check.rs`).

mod discord;
mod slack;
mod telegram;

use crate::config::ChannelsConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

/// Every enabled platform by name, each built or with the reason it cannot
/// start (what `mnemo config check` reports one by one).
pub fn each_enabled(
    c: &ChannelsConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Result<Arc<dyn Channel>>)> {
    let mut built = Vec::new();
    if c.telegram.enabled {
        built.push(("telegram", telegram::build(&c.telegram, env)));
    }
    if c.slack.enabled {
        built.push(("slack", slack::build(&c.slack, env)));
    }
    if c.discord.enabled {
        built.push(("discord", discord::build(&c.discord, env)));
    }
    built
}

/// The error for a platform this build was compiled without.
#[cfg(not(all(feature = "telegram", feature = "slack", feature = "discord")))]
fn not_built(name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "channel `{name}` is enabled in the config, but this build of mnemo has no {name} adapter; \
         disable `channels.{name}.enabled`, or build with the `{name}` feature"
    )
}
