//! Constructs the Discord channel from `channels.discord`: the token from
//! the environment variable the config names (never from the file, never
//! logged), the REST proxy base and the guild for `/session` registration.

use crate::config::DiscordConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

#[cfg(feature = "discord")]
pub fn build(config: &DiscordConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    use anyhow::Context;
    use mnemo_channels::discord::{DiscordChannel, DiscordSettings};

    let token = env(&config.token_env)
        .filter(|t| !t.trim().is_empty())
        .with_context(|| {
            format!(
                "channels.discord: the environment variable `{}` (tokenEnv) is not set; put the bot token there \
             (developer portal → your application → Bot → Reset Token)",
                config.token_env
            )
        })?;
    let settings = DiscordSettings {
        token,
        api_url: config.api_url.clone(),
        guild_id: config.guild_number(),
        shard: config.shard.map(|s| mnemo_channels::discord::Shard {
            id: s.id,
            total: s.total,
        }),
    };
    Ok(Arc::new(DiscordChannel::new(settings)?))
}

#[cfg(not(feature = "discord"))]
pub fn build(_config: &DiscordConfig, _env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    Err(super::not_built("discord"))
}
