//! The `channels` section of the app config: which platforms run, and how
//! to reach them. Tokens appear only as the names of environment variables.

mod discord;
mod slack;
mod telegram;

pub use discord::DiscordConfig;
pub use slack::SlackConfig;
pub use telegram::TelegramConfig;

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ChannelsConfig {
    pub console: ConsoleConfig,
    pub telegram: TelegramConfig,
    pub slack: SlackConfig,
    pub discord: DiscordConfig,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ConsoleConfig {
    pub enabled: bool,
    /// Print answers as the model writes them; `false` prints each whole.
    pub streaming: bool,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            streaming: true,
        }
    }
}

impl ChannelsConfig {
    /// A [`FieldError`] (its field path within the app config) for settings that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.telegram.validate()?;
        self.slack.validate()?;
        self.discord.validate()
    }

    /// Names of the channels (enabled or not) whose answers stream.
    pub fn streaming(&self) -> std::collections::BTreeSet<String> {
        [
            ("console", self.console.streaming),
            ("telegram", self.telegram.streaming),
            ("slack", self.slack.streaming),
            ("discord", self.discord.streaming),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| name.to_string())
        .collect()
    }

    /// Names of the platform channels that are enabled.
    pub fn enabled_platforms(&self) -> Vec<&'static str> {
        [
            ("telegram", self.telegram.enabled),
            ("slack", self.slack.enabled),
            ("discord", self.discord.enabled),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}
