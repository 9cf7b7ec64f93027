//! Constructs the Telegram channel from `channels.telegram`: the token and
//! the webhook secret from the environment variables the config names, the
//! API base, the mode. In webhook mode it also owns the HTTP side (an axum
//! server on `webhookListen`) and hands every POST to the adapter's
//! [`WebhookIntake`], which checks the secret header; the adapter crate
//! stays free of a web server. A POST is answered 200 only once the broker
//! has taken its message (stored, or refused and answered): Telegram
//! delivers again whatever was not answered 200, so a broker that dies
//! mid-turn loses nothing it acknowledged. Never logs the token or the
//! secret.

use crate::config::TelegramConfig;
use anyhow::Result;
use mnemo_channels::Channel;
use std::sync::Arc;

#[cfg(feature = "telegram")]
pub use adapter::build;

/// Without the `telegram` feature there is no adapter to build.
#[cfg(not(feature = "telegram"))]
pub fn build(_config: &TelegramConfig, _env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
    Err(super::not_built("telegram"))
}

#[cfg(feature = "telegram")]
mod adapter {
    use super::*;
    use anyhow::{Context, anyhow};
    use async_trait::async_trait;
    use axum::Router;
    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use mnemo_channels::telegram::{TelegramChannel, TelegramMode, TelegramSettings, WebhookIntake};
    use mnemo_channels::{ChannelError, Inbound, Outbound, Shutdown};
    use std::net::SocketAddr;
    use std::time::Duration;
    use tokio::sync::mpsc;

    pub fn build(config: &TelegramConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Channel>> {
        let token = secret(env, &config.token_env, "tokenEnv", "the bot token from @BotFather")?;
        let mode = if config.mode == "webhook" {
            let public_url = config
                .webhook_url
                .clone()
                .ok_or_else(|| anyhow!("channels.telegram.webhookUrl is required when mode is `webhook`"))?;
            let secret = secret(
                env,
                &config.webhook_secret_env,
                "webhookSecretEnv",
                "a random webhook secret",
            )?;
            TelegramMode::Webhook { public_url, secret }
        } else {
            TelegramMode::Polling
        };
        let settings = TelegramSettings {
            token,
            api_url: config.api_url.clone(),
            mode,
            poll_timeout: Duration::from_secs(config.poll_timeout_secs),
        };
        let channel = TelegramChannel::new(settings)?;
        let Some(intake) = channel.webhook_intake() else {
            return Ok(Arc::new(channel));
        };
        let listen = config.webhook_listen_addr().ok_or_else(|| {
            anyhow!(
                "channels.telegram.webhookListen `{}` is not an address like 127.0.0.1:8443",
                config.webhook_listen
            )
        })?;
        Ok(Arc::new(WebhookServed {
            channel,
            intake,
            listen,
        }))
    }

    /// The value of the environment variable `name`, or an error naming the
    /// config field and what belongs there.
    fn secret(env: &dyn Fn(&str) -> Option<String>, name: &str, field: &str, what: &str) -> Result<String> {
        env(name).filter(|v| !v.trim().is_empty()).with_context(|| {
            format!(
                "channels.telegram: the environment variable {name} (named by {field}) is not set; put {what} there"
            )
        })
    }

    /// The Telegram channel in webhook mode: the adapter plus the HTTP server
    /// Telegram posts to. Both run for as long as `receive` does.
    struct WebhookServed {
        channel: TelegramChannel,
        intake: WebhookIntake,
        listen: SocketAddr,
    }

    #[async_trait]
    impl Channel for WebhookServed {
        fn name(&self) -> &str {
            self.channel.name()
        }

        fn max_message_chars(&self) -> usize {
            self.channel.max_message_chars()
        }

        async fn receive(&self, inbox: mpsc::Sender<Inbound>, shutdown: Shutdown) -> Result<(), ChannelError> {
            let failed = |reason: String| ChannelError::Receive {
                channel: self.name().into(),
                reason,
            };
            let listener = tokio::net::TcpListener::bind(self.listen).await.map_err(|e| {
                failed(format!(
                    "cannot listen on {} for the webhook: {e}; change channels.telegram.webhookListen",
                    self.listen
                ))
            })?;
            tracing::info!(listen = %self.listen, "telegram: webhook server listening");
            // Any path: the secret header, not the URL, is what proves a post
            // came from Telegram, and proxies often rewrite paths.
            let app = Router::new().fallback(post(deliver)).with_state(self.intake.clone());
            let server = mnemo_channels::http1::serve(listener, app, std::future::pending());
            tokio::select! {
                received = self.channel.receive(inbox, shutdown) => received,
                () = server => Err(failed("the webhook server stopped".into())),
            }
        }

        async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
            self.channel.send(out).await
        }

        async fn typing(&self, to: &Inbound) {
            self.channel.typing(to).await
        }

        fn bot_name(&self) -> Option<String> {
            self.channel.bot_name()
        }

        fn taken(&self, msg_id: &str) {
            self.channel.taken(msg_id)
        }

        fn not_taken(&self, msg_id: &str) -> bool {
            self.channel.not_taken(msg_id)
        }
    }

    /// How long a POST waits for the broker to take its message before it
    /// is answered 503 (Telegram then delivers it again; a copy that was
    /// stored meanwhile is not stored twice). A message is stored as it
    /// arrives, in milliseconds; a `/session` command is taken once it is
    /// answered, after the user's earlier questions, so this outlasts a
    /// typical model call.
    const TAKE_WAIT: Duration = Duration::from_secs(30);

    /// One webhook POST: 200 once the update's message was taken, 503 when
    /// it could not be (Telegram delivers it again), else the rejection's
    /// status (Telegram retries 5xx; 401/400 are logged without the body).
    async fn deliver(State(intake): State<WebhookIntake>, headers: HeaderMap, body: Bytes) -> StatusCode {
        let secret = headers.get(WebhookIntake::SECRET_HEADER).map(|v| v.as_bytes());
        match intake.accept(secret, &body) {
            Ok(receipt) => {
                if receipt.kept(TAKE_WAIT).await {
                    StatusCode::OK
                } else {
                    tracing::warn!("telegram: webhook update not taken; Telegram will deliver it again");
                    StatusCode::SERVICE_UNAVAILABLE
                }
            }
            Err(rejection) => {
                tracing::warn!(reason = %rejection, "telegram: webhook post refused");
                StatusCode::from_u16(rejection.status()).unwrap_or(StatusCode::BAD_REQUEST)
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::collections::HashMap;

        fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
            let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            move |name| vars.get(name).cloned()
        }

        #[test]
        fn a_missing_token_names_the_variable_and_the_field() {
            let error = build(&TelegramConfig::default(), &env(&[])).err().unwrap().to_string();
            assert!(
                error.contains("TELEGRAM_BOT_TOKEN") && error.contains("tokenEnv"),
                "{error}"
            );
        }

        #[test]
        fn webhook_mode_needs_its_secret_and_never_echoes_it() {
            let config = TelegramConfig {
                mode: "webhook".into(),
                webhook_url: Some("https://bot.example/tg".into()),
                ..TelegramConfig::default()
            };
            let missing = build(&config, &env(&[("TELEGRAM_BOT_TOKEN", "1:T")]))
                .err()
                .unwrap()
                .to_string();
            assert!(missing.contains("TELEGRAM_WEBHOOK_SECRET"), "{missing}");
            let bad = build(
                &config,
                &env(&[("TELEGRAM_BOT_TOKEN", "1:T"), ("TELEGRAM_WEBHOOK_SECRET", "no spaces!")]),
            );
            let bad = bad.err().unwrap().to_string();
            assert!(bad.contains("webhook secret") && !bad.contains("no spaces!"), "{bad}");
            let good = build(
                &config,
                &env(&[("TELEGRAM_BOT_TOKEN", "1:T"), ("TELEGRAM_WEBHOOK_SECRET", "ok_secret")]),
            );
            assert_eq!(good.unwrap().name(), "telegram");
        }
    }
}
