//! `channels.discord`: the Discord bot (serenity). The token appears only as
//! the name of an environment variable.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscordConfig {
    pub enabled: bool,
    pub token_env: String,
    /// Base URL of a Discord REST proxy (requests go to
    /// `{apiUrl}/api/v10/…`, the gateway URL is asked there too); `null` for
    /// discord.com. With a proxy, the proxy owns rate limiting.
    pub api_url: Option<String>,
    /// A server id (as a string, the way Discord copies it): register
    /// `/session` there only, which takes effect at once — for trying the bot
    /// out. `null` registers it globally.
    pub guild_id: Option<String>,
    /// Show answers while the model writes them (edited in place);
    /// `false` sends each answer whole, once it is complete.
    pub streaming: bool,
    /// With `streaming`: how long (ms) the first words wait before they are
    /// posted. An answer the model finishes within it is sent once, with no
    /// edit; a longer one streams as before, its first words this much later.
    /// 0 posts the first words at once. At most 10,000.
    pub stream_hold_ms: u64,
    /// This broker's gateway shard when several brokers share the bot:
    /// `{"id": 1, "total": 2}`. Absent: shard 0 of 1 (one broker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardConfig>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShardConfig {
    pub id: u32,
    pub total: u32,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            enabled: false,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: None,
            guild_id: None,
            streaming: true,
            stream_hold_ms: super::STREAM_HOLD_MS,
            shard: None,
        }
    }
}

impl DiscordConfig {
    /// A [`FieldError`] (its field path within the app config) for settings that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.token_env.trim().is_empty() {
            return Err(FieldError::new(
                "discord.tokenEnv",
                "is empty; name the environment variable holding the bot token".into(),
            ));
        }
        if let Some(url) = &self.api_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(FieldError::new(
                "discord.apiUrl",
                format!("`{url}` is not an http:// or https:// base URL (e.g. http://127.0.0.1:8080, no /api path)"),
            ));
        }
        if let Some(ShardConfig { id, total }) = self.shard
            && (total == 0 || id >= total)
        {
            return Err(FieldError::new(
                "discord.shard",
                format!(
                    "shard {id} of {total} does not exist: ids run from 0 to total - 1 (e.g. {{\"id\": 1, \"total\": 2}})"
                ),
            ));
        }
        if let Some(id) = &self.guild_id {
            self.guild_number().ok_or(FieldError::new(
                "discord.guildId",
                format!("`{id}` is not a Discord server id (Developer Mode → right-click the server → Copy Server ID)"),
            ))?;
        }
        Ok(())
    }

    /// `guildId` as a number; `None` when unset or invalid.
    pub fn guild_number(&self) -> Option<u64> {
        self.guild_id.as_deref()?.trim().parse::<u64>().ok().filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_must_exist() {
        let with = |id, total| DiscordConfig {
            shard: Some(ShardConfig { id, total }),
            ..DiscordConfig::default()
        };
        assert_eq!(with(1, 2).validate(), Ok(()));
        for (id, total) in [(2, 2), (0, 0)] {
            let err = with(id, total).validate().unwrap_err();
            assert!(err.to_string().contains("discord.shard"), "{err}");
        }
        let parsed: DiscordConfig = serde_json::from_str(r#"{"shard": {"id": 1, "total": 2}}"#).unwrap();
        assert_eq!(parsed.shard, Some(ShardConfig { id: 1, total: 2 }));
    }

    #[test]
    fn defaults_are_valid_and_off() {
        let c = DiscordConfig::default();
        assert!(!c.enabled);
        assert_eq!(c.token_env, "DISCORD_BOT_TOKEN");
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn a_guild_id_must_be_a_server_id() {
        let with = |id: &str| DiscordConfig {
            guild_id: Some(id.into()),
            ..DiscordConfig::default()
        };
        assert_eq!(with("1500000000000000001").validate(), Ok(()));
        assert_eq!(
            with("1500000000000000001").guild_number(),
            Some(1_500_000_000_000_000_001)
        );
        assert_eq!(with("my-server").validate().unwrap_err().field, "discord.guildId");
        assert_eq!(with("0").validate().unwrap_err().field, "discord.guildId");
    }

    #[test]
    fn the_api_url_must_be_http() {
        let c = DiscordConfig {
            api_url: Some("discord-proxy:8080".into()),
            ..DiscordConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "discord.apiUrl");
        let c = DiscordConfig {
            api_url: Some("http://127.0.0.1:8080".into()),
            ..DiscordConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }
}
