//! `channels.telegram`: the Telegram bot (teloxide). The token appears only
//! as the name of an environment variable.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TelegramConfig {
    pub enabled: bool,
    pub token_env: String,
    pub api_url: Option<String>,
    /// `polling` or `webhook`.
    pub mode: String,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            enabled: false,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: None,
            mode: "polling".into(),
        }
    }
}

impl TelegramConfig {
    /// `Err((field, reason))` for settings that cannot work.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !["polling", "webhook"].contains(&self.mode.as_str()) {
            return Err((
                "telegram.mode",
                format!("`{}` is not `polling` or `webhook`", self.mode),
            ));
        }
        Ok(())
    }
}
