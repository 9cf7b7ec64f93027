//! Constructs the Slack channel from `channels.slack`: the bot token, and the
//! app-level token (Socket Mode) or signing secret (Events API), read from
//! the environment variables the config names. Errors name the variable,
//! never its value.

use crate::config::SlackConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

pub fn build(config: &SlackConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    #[cfg(feature = "slack")]
    {
        with_adapter::build(config, env)
    }
    #[cfg(not(feature = "slack"))]
    {
        let _ = (config, env);
        Err(super::not_built("slack"))
    }
}

#[cfg(feature = "slack")]
mod with_adapter {
    use super::*;
    use anyhow::{Context, anyhow};
    use mnemo_channels::slack::{SlackChannel, SlackMode, SlackSettings};

    pub fn build(config: &SlackConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
        // Both secrets are looked up before either is reported, so a first
        // run names every missing variable at once.
        let bot_token = secret(env, "botTokenEnv", &config.bot_token_env, "xoxb-", "the bot token");
        let mode = match config.mode.as_str() {
            "events" => secret(
                env,
                "signingSecretEnv",
                &config.signing_secret_env,
                "",
                "the signing secret",
            )
            .and_then(|signing_secret| {
                Ok(SlackMode::Events {
                    signing_secret,
                    listen: config
                        .listen
                        .parse()
                        .with_context(|| format!("channels.slack.listen: `{}` is not an address", config.listen))?,
                })
            }),
            _ => secret(
                env,
                "appTokenEnv",
                &config.app_token_env,
                "xapp-",
                "the app-level token",
            )
            .map(|app_token| SlackMode::Socket { app_token }),
        };
        let (bot_token, mode) = match (bot_token, mode) {
            (Ok(bot_token), Ok(mode)) => (bot_token, mode),
            (Err(a), Err(b)) => return Err(anyhow!("{a}; and {b}")),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let channel = SlackChannel::new(SlackSettings {
            bot_token,
            mode,
            api_url: config.api_url.clone(),
        })?;
        Ok(Arc::new(channel))
    }

    /// The value of the env var `var` (named by `field`), which must be set
    /// and, for tokens, have Slack's prefix for that kind of token.
    fn secret(
        env: &dyn Fn(&str) -> Option<String>,
        field: &str,
        var: &str,
        prefix: &str,
        what: &str,
    ) -> Result<String> {
        let value = env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                anyhow!(
                    "channels.slack: {what} is missing: set the environment variable {var} \
                 (named by channels.slack.{field}); see docs/platforms.md § Slack"
                )
            })?;
        if !value.starts_with(prefix) {
            return Err(anyhow!(
                "channels.slack: {var} does not hold {what} (it should start with `{prefix}`); \
                 see docs/platforms.md § Slack for which token goes where"
            ));
        }
        Ok(value)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn env_with(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
            move |k| pairs.iter().find(|(name, _)| *name == k).map(|(_, v)| v.to_string())
        }

        #[test]
        fn socket_mode_needs_both_tokens_and_names_the_missing_variable() {
            let config = SlackConfig {
                enabled: true,
                ..SlackConfig::default()
            };
            let err = build(&config, &env_with(&[("SLACK_BOT_TOKEN", "xoxb-1")]))
                .err()
                .expect("app token missing");
            assert!(err.to_string().contains("SLACK_APP_TOKEN"), "{err}");
            let ok = build(
                &config,
                &env_with(&[("SLACK_BOT_TOKEN", "xoxb-1"), ("SLACK_APP_TOKEN", "xapp-1")]),
            );
            assert_eq!(ok.expect("builds").name(), "slack");
        }

        #[test]
        fn a_token_in_the_wrong_variable_is_named_without_its_value() {
            let config = SlackConfig {
                enabled: true,
                ..SlackConfig::default()
            };
            let swapped = env_with(&[
                ("SLACK_BOT_TOKEN", "xapp-secret-value"),
                ("SLACK_APP_TOKEN", "xoxb-other"),
            ]);
            let err = build(&config, &swapped).err().expect("wrong kind of token").to_string();
            assert!(err.contains("SLACK_BOT_TOKEN") && err.contains("xoxb-"), "{err}");
            assert!(!err.contains("secret-value"));
        }

        #[test]
        fn events_mode_needs_the_signing_secret() {
            let config = SlackConfig {
                enabled: true,
                mode: "events".into(),
                ..SlackConfig::default()
            };
            let err = build(&config, &env_with(&[("SLACK_BOT_TOKEN", "xoxb-1")]))
                .err()
                .expect("secret missing");
            assert!(err.to_string().contains("SLACK_SIGNING_SECRET"), "{err}");
        }
    }
}
