//! Constructs the Discord channel from `channels.discord`.

use crate::config::DiscordConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

pub fn build(_config: &DiscordConfig, _env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    Err(super::not_built("discord"))
}
