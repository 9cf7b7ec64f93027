//! Constructs the Slack channel from `channels.slack`.

use crate::config::SlackConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

pub fn build(_config: &SlackConfig, _env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    Err(super::not_built("slack"))
}
