//! The Discord adapter against a fake Discord on 127.0.0.1: recorded gateway
//! events through the real handler, replies through the real REST code
//! (serenity pointed at the fake with `HttpBuilder::proxy`), and a whole
//! gateway session (Hello → Identify → READY → MESSAGE_CREATE).
#![cfg(feature = "discord")]

use mnemo_testkit::discord as fake;
mod gateway;
mod inbound;
mod live;
mod outbound;

use fake::FakeDiscord;
use mnemo_channels::discord::{DiscordChannel, DiscordError, DiscordSettings, MAX_MESSAGE_CHARS};
use mnemo_channels::{Channel, ChatKind, Inbound, Outbound};
use serde_json::{Value, json};
use serenity::all::{Interaction, Message, Ready};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

const TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.fake.bot-token-for-tests";
const DM_CHANNEL: &str = "1200000000000000001";
const GUILD_CHANNEL: &str = "1200000000000000002";
const THREAD: &str = "1200000000000000003";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/discord/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture json")
}

fn message(name: &str) -> Message {
    serde_json::from_value(fixture(name)).expect("a gateway MESSAGE_CREATE payload")
}

fn channel(fake: &FakeDiscord, guild_id: Option<u64>) -> DiscordChannel {
    DiscordChannel::new(DiscordSettings {
        token: TOKEN.into(),
        api_url: Some(fake.url()),
        guild_id,
        shard: None,
    })
    .expect("valid settings")
}

/// A handler that has seen READY, and the inbox it feeds.
async fn ready_handler(
    fake: &FakeDiscord,
) -> (
    DiscordChannel,
    mnemo_channels::discord::DiscordHandler,
    mpsc::Receiver<Inbound>,
) {
    let channel = channel(fake, None);
    let (tx, rx) = mpsc::channel(16);
    let handler = channel.handler(tx);
    let ready: Ready = serde_json::from_value(fake::ready("ws://unused")).expect("READY payload");
    handler.on_ready(&ready).await;
    (channel, handler, rx)
}

async fn next(rx: &mut mpsc::Receiver<Inbound>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("an inbound in time")
        .expect("inbox open")
}
