//! `channels.discord`: the Discord bot (serenity). The token appears only as
//! the name of an environment variable.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscordConfig {
    pub enabled: bool,
    pub token_env: String,
    pub api_url: Option<String>,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            enabled: false,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: None,
        }
    }
}

impl DiscordConfig {
    /// `Err((field, reason))` for settings that cannot work.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        Ok(())
    }
}
