//! Building the platform channels that `mnemo run` serves from the app
//! config: one file per platform, each turning its config section and the
//! environment into an `Arc<dyn Channel>`. The adapters themselves live in
//! `mnemo-channels`; this is only construction (tokens read from the env
//! vars the config names, API base URLs, modes).

mod discord;
mod slack;
mod telegram;

use crate::cli::Setup;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

/// Every enabled platform channel, or the first one that cannot start.
pub fn enabled(setup: &Setup, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Arc<dyn Channel>>> {
    each_enabled(setup, env).into_iter().map(|(_, built)| built).collect()
}

/// Every enabled platform by name, each built or with the reason it cannot
/// start (what `mnemo config check` reports one by one).
pub fn each_enabled(
    setup: &Setup,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Result<Arc<dyn Channel>>)> {
    let c = &setup.config.channels;
    let mut channels = Vec::new();
    if c.telegram.enabled {
        channels.push(("telegram", telegram::build(&c.telegram, env)));
    }
    if c.slack.enabled {
        channels.push(("slack", slack::build(&c.slack, env)));
    }
    if c.discord.enabled {
        channels.push(("discord", discord::build(&c.discord, env)));
    }
    channels
}

/// The error for a platform this build was compiled without.
#[cfg(not(all(feature = "telegram", feature = "slack", feature = "discord")))]
fn not_built(name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "channel `{name}` is enabled in the config, but this build of mnemo has no {name} adapter; \
         disable `channels.{name}.enabled`, or build with the `{name}` feature"
    )
}
