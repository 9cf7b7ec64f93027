//! Constructs the Telegram channel from `channels.telegram`.

use crate::config::TelegramConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

pub fn build(_config: &TelegramConfig, _env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    Err(super::not_built("telegram"))
}
