//! The Discord channel (serenity 0.12): a gateway connection for direct
//! messages, guild messages (marked addressed when they mention or reply to
//! the bot; the broker's access gate decides on the rest), and the
//! `/session` application command; REST for replies, typing and attachments.
//! It owns the connection and the platform rules (who is addressed, how
//! replies are formatted and split); it decides nothing about answers and
//! never logs message text or the token.
//!
//! Layout: [`inbound`] (what becomes an `Inbound`), [`handler`] (serenity's
//! event handler), [`sequencer`] (keeps events in Discord's order),
//! [`outbound`] (sending; reply text is rendered by [`crate::format`]),
//! [`live`] (an answer grown in place by message edits while the model
//! writes it), [`commands`] (the `/session` definition).

mod admins;
pub mod commands;
mod handler;
pub mod inbound;
pub mod live;
mod outbound;
pub mod sequencer;

pub use handler::DiscordHandler;

use crate::{Channel, ChannelError, Inbound, Outbound, Shutdown};
use async_trait::async_trait;
use inbound::{CHANNEL, Me};
use serenity::all::{ChannelId, ClientBuilder, GatewayIntents, GuildId, Http, HttpBuilder};
use std::sync::{Arc, RwLock};
use tokio::sync::mpsc;

/// Discord's limit on one message's text, in characters.
pub const MAX_MESSAGE_CHARS: usize = crate::format::DISCORD_MAX_CHARS;

/// What the gateway must send us: DMs, guild messages, and their text
/// (`MESSAGE_CONTENT` is privileged: enable it in the developer portal;
/// without it a guild message that does not mention the bot arrives empty,
/// so `requireMention: false` would see nothing).
pub fn intents() -> GatewayIntents {
    GatewayIntents::DIRECT_MESSAGES | GatewayIntents::GUILD_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

/// How to reach Discord.
#[derive(Clone, Default)]
pub struct DiscordSettings {
    /// The bot token (from the environment; never logged).
    pub token: String,
    /// Base URL of a REST proxy (or a test server), e.g.
    /// `http://127.0.0.1:8080`: requests go to `{api_url}/api/v10/...`, and
    /// so does the gateway-URL lookup. `None` talks to discord.com.
    pub api_url: Option<String>,
    /// Register `/session` in this guild only (instant, for development)
    /// instead of globally (which Discord may take a while to show).
    pub guild_id: Option<u64>,
    /// This broker's gateway shard (`id` of `total`), when several brokers
    /// split the bot's guilds between them; `None` is the one shard 0 of 1.
    /// Discord sends every direct message to shard 0.
    pub shard: Option<Shard>,
}

/// One gateway shard of `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub id: u32,
    pub total: u32,
}

impl std::fmt::Debug for DiscordSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordSettings")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("guild_id", &self.guild_id)
            .finish()
    }
}

/// Why the Discord channel could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    #[error("discord: the bot token is empty; set the environment variable named by channels.discord.tokenEnv")]
    MissingToken,
    #[error(
        "discord: apiUrl `{0}` is not an http:// or https:// base URL; use e.g. http://127.0.0.1:8080 (no /api path)"
    )]
    BadApiUrl(String),
    #[error("discord: guildId 0 is not a Discord id; copy the server id (Developer Mode → Copy Server ID)")]
    BadGuildId,
    #[error("discord: shard {id} of {total} does not exist; ids run from 0 to total - 1")]
    BadShard { id: u32, total: u32 },
}

/// State shared by the channel, its event handler and its sending code.
pub(crate) struct Shared {
    pub(crate) settings: DiscordSettings,
    /// The REST client for everything we send. With `api_url` set, serenity
    /// only uses the proxy while its own ratelimiter is off (its ratelimiter
    /// builds requests for discord.com), so then the proxy owns rate limits
    /// and [`outbound`] retries a 429 that still comes back.
    pub(crate) http: Arc<Http>,
    pub(crate) guild_id: Option<GuildId>,
    /// Who the bot is, from READY; `None` until then.
    me: RwLock<Option<Me>>,
    /// Up on READY / RESUMED and a connected shard, down when the shard
    /// drops: the broker's readiness reads it.
    pub(crate) link: crate::Link,
    /// Downloads of message attachments from the CDN (no token needed),
    /// and the few REST reads serenity has no call for (`admins.rs`).
    files: reqwest::Client,
}

impl Shared {
    fn new_http(settings: &DiscordSettings) -> Http {
        match &settings.api_url {
            Some(url) => HttpBuilder::new(&settings.token)
                .proxy(url.trim_end_matches('/'))
                .ratelimiter_disabled(true),
            None => HttpBuilder::new(&settings.token),
        }
        .build()
    }

    pub(crate) fn me(&self) -> Option<Me> {
        // A poisoned lock only means a panic elsewhere mid-write of a plain
        // value; the value is still usable.
        self.me.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_me(&self, me: Me) {
        *self.me.write().unwrap_or_else(|e| e.into_inner()) = Some(me);
    }

    /// `text` with every secret we know of replaced, for errors and logs.
    pub(crate) fn redact(&self, text: &str, extra: Option<&str>) -> String {
        let bare = self.settings.token.trim().trim_start_matches("Bot ");
        let mut out = text.to_string();
        for secret in [Some(bare), extra].into_iter().flatten().filter(|s| s.len() >= 8) {
            out = out.replace(secret, "<redacted>");
        }
        out
    }

    pub(crate) fn send_error(&self, target: &str, reason: &str, extra: Option<&str>) -> ChannelError {
        ChannelError::Send {
            channel: CHANNEL.into(),
            target: target.into(),
            reason: self.redact(reason, extra),
        }
    }
}

/// Where Discord serves message attachments.
const CDN_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

/// The Discord adapter. Cheap to share: the broker holds it in an `Arc`.
pub struct DiscordChannel {
    shared: Arc<Shared>,
}

impl DiscordChannel {
    pub fn new(settings: DiscordSettings) -> Result<Self, DiscordError> {
        if settings.token.trim().is_empty() {
            return Err(DiscordError::MissingToken);
        }
        if let Some(url) = &settings.api_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(DiscordError::BadApiUrl(url.clone()));
        }
        if let Some(Shard { id, total }) = settings.shard
            && id >= total
        {
            return Err(DiscordError::BadShard { id, total });
        }
        let guild_id = match settings.guild_id {
            Some(0) => return Err(DiscordError::BadGuildId),
            Some(id) => Some(GuildId::new(id)),
            None => None,
        };
        let http = Arc::new(Shared::new_http(&settings));
        Ok(DiscordChannel {
            shared: Arc::new(Shared {
                settings,
                http,
                guild_id,
                me: RwLock::new(None),
                link: crate::Link::default(),
                files: reqwest::Client::builder()
                    .connect_timeout(std::time::Duration::from_secs(10))
                    .build()
                    .unwrap_or_default(),
            }),
        })
    }

    /// The event handler that feeds `inbox`: what [`Channel::receive`] plugs
    /// into serenity's client, public so its behaviour can be driven with
    /// recorded gateway events. Needs a Tokio runtime (it starts the
    /// sequencer task).
    pub fn handler(&self, inbox: mpsc::Sender<Inbound>) -> DiscordHandler {
        DiscordHandler::new(self.shared.clone(), inbox)
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn max_message_chars(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    async fn receive(&self, inbox: mpsc::Sender<Inbound>, mut shutdown: Shutdown) -> Result<(), ChannelError> {
        let fail = |what: &str, e: serenity::Error| ChannelError::Receive {
            channel: CHANNEL.into(),
            reason: self.shared.redact(&format!("{what}: {e}"), None),
        };
        if *shutdown.borrow() {
            return Ok(());
        }
        let mut client = ClientBuilder::new_with_http(Shared::new_http(&self.shared.settings), intents())
            .event_handler(self.handler(inbox))
            .await
            .map_err(|e| fail("could not set up the gateway client", e))?;
        let shards = client.shard_manager.clone();
        let Shard { id, total } = self.shared.settings.shard.unwrap_or(Shard { id: 0, total: 1 });
        tracing::info!(
            channel = CHANNEL,
            shard = id,
            shards = total,
            "connecting to the gateway"
        );
        let served = tokio::select! {
            ended = client.start_shard(id, total) => ended.map_err(|e| fail("the gateway connection ended (check the token and the MESSAGE_CONTENT intent)", e)),
            _ = shutdown.changed() => {
                shards.shutdown_all().await;
                tracing::info!(channel = CHANNEL, "gateway closed for shutdown");
                Ok(())
            }
        };
        self.shared.link.down();
        served
    }

    fn link(&self) -> crate::LinkStatus {
        self.shared.link.status()
    }

    async fn probe(&self) -> Result<String, ChannelError> {
        let gateway = self
            .shared
            .http
            .get_bot_gateway()
            .await
            .map_err(|e| ChannelError::Receive {
                channel: CHANNEL.into(),
                reason: self.shared.redact(&format!("gateway/bot: {e}"), None),
            })?;
        Ok(format!("gateway/bot: {} ({} shard(s))", gateway.url, gateway.shards))
    }

    /// A failure comes back with its reason (status, Discord's message, a
    /// hint; secrets redacted) for the broker to log.
    /// The attachment's CDN URL (Discord's or the configured `apiUrl`'s host).
    async fn download(
        &self,
        attachment: &crate::Attachment,
        limits: crate::DownloadLimits,
    ) -> Result<Vec<u8>, crate::DownloadError> {
        use crate::DownloadError;
        if attachment.size.is_some_and(|size| size > limits.max_bytes) {
            return Err(DownloadError::TooLarge {
                limit: limits.max_bytes,
            });
        }
        let url = reqwest::Url::parse(&attachment.source)
            .map_err(|_| DownloadError::Failed("the attachment's address is not a URL".into()))?;
        let host = url.host_str().unwrap_or("");
        let cdn = url.scheme() == "https" && CDN_HOSTS.contains(&host);
        let configured = self
            .shared
            .settings
            .api_url
            .as_deref()
            .and_then(|u| reqwest::Url::parse(u).ok())
            .is_some_and(|api| api.host_str() == Some(host));
        if !(cdn || configured) {
            return Err(DownloadError::Failed("the attachment is not on Discord's CDN".into()));
        }
        crate::download::fetch(self.shared.files.get(url), limits).await
    }

    /// The server's owner, or a member allowed to manage it (`admins.rs`).
    async fn is_group_admin(&self, chat_id: &str, user_id: &str) -> Result<bool, ChannelError> {
        admins::is_admin(&self.shared, chat_id, user_id)
            .await
            .map_err(|reason| ChannelError::Receive {
                channel: CHANNEL.into(),
                reason,
            })
    }

    async fn send(&self, out: Outbound) -> Result<(), ChannelError> {
        outbound::send(&self.shared, out).await
    }

    /// The answer is posted and grown by message edits (`discord/live.rs`).
    fn live(&self, out: Outbound) -> Box<dyn crate::LiveReply + '_> {
        live::reply(self, out)
    }

    async fn typing(&self, to: &Inbound) {
        // An interaction already shows "thinking…" until it is answered.
        if to.interaction.is_some() {
            return;
        }
        let target = to.thread_id.as_deref().unwrap_or(&to.chat_id);
        let Some(id) = outbound::snowflake::<ChannelId>(target) else {
            return;
        };
        if let Err(e) = self.shared.http.broadcast_typing(id).await {
            // Cosmetic: the reply still goes out.
            tracing::debug!(channel = CHANNEL, target, reason = %self.shared.redact(&e.to_string(), None), "typing indicator failed");
        }
    }

    fn bot_name(&self) -> Option<String> {
        self.shared.me().map(|me| me.name)
    }
}
