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
use std::collections::BTreeMap;
use std::time::Duration;

/// `channels.<platform>.streamHoldMs` by default: long enough for a fast
/// model's whole short answer (one message, no edit), short enough that a
/// long answer's first words still come at once to the eye.
pub const STREAM_HOLD_MS: u64 = 400;
/// The longest hold accepted: beyond it streaming would hardly stream.
pub const MAX_STREAM_HOLD_MS: u64 = 10_000;

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
        self.discord.validate()?;
        for (name, hold) in [
            ("telegram", self.telegram.stream_hold_ms),
            ("slack", self.slack.stream_hold_ms),
            ("discord", self.discord.stream_hold_ms),
        ] {
            if hold > MAX_STREAM_HOLD_MS {
                return Err(FieldError::new(
                    format!("{name}.streamHoldMs"),
                    format!("is {hold}; at most {MAX_STREAM_HOLD_MS} (ms), or 0 to post the first words at once"),
                ));
            }
        }
        Ok(())
    }

    /// The channels (enabled or not) whose answers stream, each with how
    /// long its first words are held (`streamHoldMs`; the console prints
    /// at once: it costs no platform call).
    pub fn streaming(&self) -> BTreeMap<String, Duration> {
        let ms = Duration::from_millis;
        [
            ("console", self.console.streaming, Duration::ZERO),
            ("telegram", self.telegram.streaming, ms(self.telegram.stream_hold_ms)),
            ("slack", self.slack.streaming, ms(self.slack.stream_hold_ms)),
            ("discord", self.discord.streaming, ms(self.discord.stream_hold_ms)),
        ]
        .into_iter()
        .filter(|(_, on, _)| *on)
        .map(|(name, _, hold)| (name.to_string(), hold))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_platforms_stream_hold_is_400_ms_by_default_and_bounded() {
        let mut config = ChannelsConfig::default();
        let streaming = config.streaming();
        assert_eq!(streaming["telegram"], Duration::from_millis(STREAM_HOLD_MS));
        assert_eq!(streaming["console"], Duration::ZERO, "the console prints at once");
        config.slack.stream_hold_ms = 0;
        config.discord.streaming = false;
        let streaming = config.streaming();
        assert_eq!(streaming["slack"], Duration::ZERO);
        assert!(!streaming.contains_key("discord"));
        assert!(config.validate().is_ok());
        config.telegram.stream_hold_ms = MAX_STREAM_HOLD_MS + 1;
        let refused = config.validate().unwrap_err().to_string();
        assert!(refused.contains("telegram.streamHoldMs"), "{refused}");
        let parsed: TelegramConfig = serde_json::from_str(r#"{"streamHoldMs": 250}"#).unwrap();
        assert_eq!(parsed.stream_hold_ms, 250);
    }
}
