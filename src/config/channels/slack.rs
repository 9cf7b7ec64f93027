//! `channels.slack`: the Slack app (slack-morphism). Tokens and the signing
//! secret appear only as names of environment variables.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SlackConfig {
    pub enabled: bool,
    /// Env var holding the bot token (`xoxb-…`); needed in both modes.
    pub bot_token_env: String,
    /// Env var holding the app-level token (`xapp-…`); Socket Mode only.
    pub app_token_env: String,
    /// Env var holding the app's signing secret; Events API mode only.
    pub signing_secret_env: String,
    /// `socket` or `events`.
    pub mode: String,
    /// The Web API base including `/api` (GovSlack: `https://slack-gov.com/api`);
    /// `null` is `https://slack.com/api`.
    pub api_url: Option<String>,
    /// Events API mode: where to listen for Slack's POSTs to
    /// `/slack/events` and `/slack/commands`.
    pub listen: String,
    /// Show answers while the model writes them (edited in place);
    /// `false` sends each answer whole, once it is complete.
    pub streaming: bool,
    /// With `streaming`: how long (ms) the first words wait before they are
    /// posted. An answer the model finishes within it is sent once, with no
    /// edit; a longer one streams as before, its first words this much later.
    /// 0 posts the first words at once. At most 10,000.
    pub stream_hold_ms: u64,
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            enabled: false,
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            signing_secret_env: "SLACK_SIGNING_SECRET".into(),
            mode: "socket".into(),
            api_url: None,
            listen: "0.0.0.0:3000".into(),
            streaming: true,
            stream_hold_ms: super::STREAM_HOLD_MS,
        }
    }
}

impl SlackConfig {
    /// A [`FieldError`] (its field path within the app config) for settings that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !["socket", "events"].contains(&self.mode.as_str()) {
            return Err(FieldError::new(
                "slack.mode",
                format!("`{}` is not `socket` or `events`", self.mode),
            ));
        }
        if let Some(url) = &self.api_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(FieldError::new(
                "slack.apiUrl",
                format!("`{url}` must start with https:// (or http:// for a local server)"),
            ));
        }
        if self.listen.parse::<SocketAddr>().is_err() {
            return Err(FieldError::new(
                "slack.listen",
                format!("`{}` is not an address like 0.0.0.0:3000", self.listen),
            ));
        }
        let named = [
            ("slack.botTokenEnv", &self.bot_token_env),
            ("slack.appTokenEnv", &self.app_token_env),
            ("slack.signingSecretEnv", &self.signing_secret_env),
        ];
        for (field, name) in named {
            if name.trim().is_empty() {
                return Err(FieldError::new(field, "must name an environment variable".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_socket_mode() {
        let c = SlackConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.mode, "socket");
    }

    #[test]
    fn unusable_settings_name_their_field() {
        let bad_url = SlackConfig {
            api_url: Some("slack.com/api".into()),
            ..SlackConfig::default()
        };
        assert_eq!(bad_url.validate().unwrap_err().field, "slack.apiUrl");
        let bad_listen = SlackConfig {
            listen: "port 3000".into(),
            ..SlackConfig::default()
        };
        assert_eq!(bad_listen.validate().unwrap_err().field, "slack.listen");
        let no_env = SlackConfig {
            app_token_env: " ".into(),
            ..SlackConfig::default()
        };
        assert_eq!(no_env.validate().unwrap_err().field, "slack.appTokenEnv");
    }
}
