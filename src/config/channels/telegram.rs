//! `channels.telegram`: the Telegram bot (teloxide). The token and the
//! webhook secret appear only as the names of environment variables.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TelegramConfig {
    pub enabled: bool,
    pub token_env: String,
    /// The Bot API base (a self-hosted Bot API server); `null` for
    /// `https://api.telegram.org`.
    pub api_url: Option<String>,
    /// `polling` or `webhook`.
    pub mode: String,
    /// How long one `getUpdates` long poll waits for news (1–50 s; Telegram
    /// caps it at 50).
    pub poll_timeout_secs: u64,
    /// Webhook mode: the public https address Telegram posts updates to
    /// (usually a reverse proxy in front of `webhookListen`).
    pub webhook_url: Option<String>,
    /// Webhook mode: where mnemo listens for those posts (plain HTTP; TLS
    /// is the proxy's job, so loopback by default).
    pub webhook_listen: String,
    /// Webhook mode: the env var holding the secret Telegram sends in the
    /// `X-Telegram-Bot-Api-Secret-Token` header (1–256 of `A-Za-z0-9_-`).
    pub webhook_secret_env: String,
    /// Show answers while the model writes them (edited in place);
    /// `false` sends each answer whole, once it is complete.
    pub streaming: bool,
    /// With `streaming`: how long (ms) the first words wait before they are
    /// posted. An answer the model finishes within it is sent once, with no
    /// edit; a longer one streams as before, its first words this much later.
    /// 0 posts the first words at once. At most 10,000.
    pub stream_hold_ms: u64,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            enabled: false,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: None,
            mode: "polling".into(),
            poll_timeout_secs: 30,
            webhook_url: None,
            webhook_listen: "127.0.0.1:8443".into(),
            webhook_secret_env: "TELEGRAM_WEBHOOK_SECRET".into(),
            streaming: true,
            stream_hold_ms: super::STREAM_HOLD_MS,
        }
    }
}

impl TelegramConfig {
    /// A [`FieldError`] (its field path within the app config) for settings that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !["polling", "webhook"].contains(&self.mode.as_str()) {
            return Err(FieldError::new(
                "telegram.mode",
                format!("`{}` is not `polling` or `webhook`", self.mode),
            ));
        }
        if !(1..=50).contains(&self.poll_timeout_secs) {
            return Err(FieldError::new(
                "telegram.pollTimeoutSecs",
                format!("{} is not between 1 and 50", self.poll_timeout_secs),
            ));
        }
        if let Some(url) = &self.api_url
            && !is_http_url(url)
        {
            return Err(FieldError::new(
                "telegram.apiUrl",
                format!("`{url}` is not an http(s) URL"),
            ));
        }
        if self.webhook_listen.parse::<SocketAddr>().is_err() {
            return Err(FieldError::new(
                "telegram.webhookListen",
                format!(
                    "`{}` is not an address and port like 127.0.0.1:8443",
                    self.webhook_listen
                ),
            ));
        }
        if self.mode == "webhook" {
            match &self.webhook_url {
                None => {
                    return Err(FieldError::new(
                        "telegram.webhookUrl",
                        "is required when mode is `webhook`".into(),
                    ));
                }
                Some(url) if !is_http_url(url) => {
                    return Err(FieldError::new(
                        "telegram.webhookUrl",
                        format!("`{url}` is not an http(s) URL"),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Where the webhook server listens (checked by [`Self::validate`]).
    pub fn webhook_listen_addr(&self) -> Option<SocketAddr> {
        self.webhook_listen.parse().ok()
    }
}

fn is_http_url(url: &str) -> bool {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|host| !host.is_empty() && !host.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_poll() {
        let config = TelegramConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.mode, "polling");
        assert_eq!(config.poll_timeout_secs, 30);
    }

    #[test]
    fn webhook_mode_needs_a_public_url() {
        let webhook = TelegramConfig {
            mode: "webhook".into(),
            ..TelegramConfig::default()
        };
        assert_eq!(webhook.validate().unwrap_err().field, "telegram.webhookUrl");
        let ok = TelegramConfig {
            webhook_url: Some("https://bot.example/tg".into()),
            ..webhook
        };
        assert_eq!(ok.validate(), Ok(()));
    }

    #[test]
    fn unworkable_values_name_their_field() {
        let cases = [
            (
                TelegramConfig {
                    poll_timeout_secs: 0,
                    ..Default::default()
                },
                "telegram.pollTimeoutSecs",
            ),
            (
                TelegramConfig {
                    poll_timeout_secs: 90,
                    ..Default::default()
                },
                "telegram.pollTimeoutSecs",
            ),
            (
                TelegramConfig {
                    api_url: Some("api.telegram.org".into()),
                    ..Default::default()
                },
                "telegram.apiUrl",
            ),
            (
                TelegramConfig {
                    webhook_listen: "8443".into(),
                    ..Default::default()
                },
                "telegram.webhookListen",
            ),
            (
                TelegramConfig {
                    mode: "push".into(),
                    ..Default::default()
                },
                "telegram.mode",
            ),
        ];
        for (config, field) in cases {
            assert_eq!(config.validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn the_json_names_are_camel_case() {
        let config: TelegramConfig = serde_json::from_str(
            r#"{"enabled": true, "pollTimeoutSecs": 10, "webhookUrl": "https://x.example/h",
                "webhookListen": "0.0.0.0:9000", "webhookSecretEnv": "HOOK"}"#,
        )
        .unwrap();
        assert_eq!(config.webhook_listen_addr(), Some("0.0.0.0:9000".parse().unwrap()));
        assert_eq!(config.webhook_secret_env, "HOOK");
        assert!(
            serde_json::from_str::<TelegramConfig>(r#"{"token": "x"}"#).is_err(),
            "tokens never in the file"
        );
    }
}
