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

/// Every enabled platform channel; when some cannot start (a missing token,
/// a bad setting), every one of their problems at once, so a first run is
/// fixed in one go rather than one variable per attempt.
pub fn enabled(setup: &Setup, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Arc<dyn Channel>>> {
    let (channels, problems): (Vec<_>, Vec<_>) = each_enabled(setup, env)
        .into_iter()
        .map(|(_, built)| built)
        .partition(Result::is_ok);
    let problems: Vec<String> = problems
        .into_iter()
        .filter_map(Result::err)
        .map(|e| crate::cli::error_text(&e))
        .collect();
    match problems.as_slice() {
        [] => Ok(channels.into_iter().filter_map(Result::ok).collect()),
        [one] => anyhow::bail!("{one}"),
        many => anyhow::bail!("{} channels cannot start:\n  - {}", many.len(), many.join("\n  - ")),
    }
}

/// Every enabled platform by name, each built or with the reason it cannot
/// start (what `mnemo config check` reports one by one).
pub fn each_enabled(
    setup: &Setup,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(&'static str, Result<Arc<dyn Channel>>)> {
    let c = &setup.config.channels;
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
