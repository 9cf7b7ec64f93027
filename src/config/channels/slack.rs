//! `channels.slack`: the Slack app (slack-morphism). Tokens and the signing
//! secret appear only as names of environment variables.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SlackConfig {
    pub enabled: bool,
    pub bot_token_env: String,
    pub app_token_env: String,
    pub signing_secret_env: String,
    /// `socket` or `events`.
    pub mode: String,
    pub api_url: Option<String>,
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
        }
    }
}

impl SlackConfig {
    /// `Err((field, reason))` for settings that cannot work.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !["socket", "events"].contains(&self.mode.as_str()) {
            return Err(("slack.mode", format!("`{}` is not `socket` or `events`", self.mode)));
        }
        Ok(())
    }
}
