//! A whole gateway session against the fake: Hello, Identify, READY,
//! dispatches, a dropped connection resumed, shutdown.

use super::fake::{APP_ID, FakeDiscord};
use super::*;

#[tokio::test]
async fn receive_identifies_registers_in_the_guild_delivers_resumes_after_a_drop_and_stops_on_shutdown() {
    let fake = FakeDiscord::start().await;
    let channel = std::sync::Arc::new(channel(&fake, Some(1500000000000000001)));
    let (tx, mut rx) = mpsc::channel(16);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn({
        let channel = channel.clone();
        async move { channel.receive(tx, shutdown).await }
    });

    let identify = fake.identify().await;
    assert_eq!(identify["token"], format!("Bot {TOKEN}"));
    assert_eq!(identify["shard"], serde_json::json!([0, 1]), "one broker: shard 0 of 1");
    let intents = identify["intents"].as_u64().expect("intents");
    for (bit, name) in [
        (1 << 12, "DIRECT_MESSAGES"),
        (1 << 9, "GUILD_MESSAGES"),
        (1 << 15, "MESSAGE_CONTENT"),
    ] {
        assert_ne!(intents & bit, 0, "{name} requested");
    }
    let put = fake.wait_for(1, |r| r.path.ends_with("/commands")).await;
    assert_eq!(
        put[0].path,
        format!("/api/v10/applications/{APP_ID}/guilds/1500000000000000001/commands")
    );

    fake.dispatch("MESSAGE_CREATE", fixture("guild_without_mention.json"));
    fake.dispatch("MESSAGE_CREATE", fixture("dm.json"));
    fake.dispatch("MESSAGE_CREATE", fixture("guild_mention.json"));
    assert_eq!(next(&mut rx).await.text, "what did I say yesterday?");
    assert_eq!(next(&mut rx).await.text, "can you summarise @Bob's point?");
    // Released in id order: the unaddressed one (a later id) comes last,
    // marked so the access gate can drop it unless the channel opted in.
    let chatter = next(&mut rx).await;
    assert_eq!(chatter.text, "just chatting with @Bob");
    assert!(!chatter.addressed);

    // A network failure: serenity reconnects and resumes the session, and
    // traffic flows again.
    fake.drop_connection();
    let resume = fake.resumed().await;
    assert_eq!(resume["session_id"], "fake-session");
    assert_eq!(resume["token"], format!("Bot {TOKEN}"));
    let mut after = fixture("dm.json");
    after["id"] = json!("1300000000000000050");
    after["content"] = json!("still there?");
    fake.dispatch("MESSAGE_CREATE", after);
    assert_eq!(next(&mut rx).await.text, "still there?");

    stop.send(true).expect("receiver alive");
    let ended = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("receive returns on shutdown");
    ended.expect("task").expect("clean shutdown");
}

/// Several brokers split the bot between them: each identifies as its own
/// shard, and a shard that cannot exist is refused before connecting.
#[tokio::test]
async fn a_broker_identifies_as_its_configured_shard() {
    let fake = FakeDiscord::start().await;
    let channel = std::sync::Arc::new(
        DiscordChannel::new(DiscordSettings {
            token: TOKEN.into(),
            api_url: Some(fake.url()),
            guild_id: None,
            shard: Some(mnemo_channels::discord::Shard { id: 1, total: 2 }),
        })
        .expect("valid settings"),
    );
    let (tx, _rx) = mpsc::channel(16);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn({
        let channel = channel.clone();
        async move { channel.receive(tx, shutdown).await }
    });
    assert_eq!(fake.identify().await["shard"], serde_json::json!([1, 2]));
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();

    let bad = DiscordChannel::new(DiscordSettings {
        token: TOKEN.into(),
        api_url: None,
        guild_id: None,
        shard: Some(mnemo_channels::discord::Shard { id: 2, total: 2 }),
    });
    assert!(matches!(bad, Err(DiscordError::BadShard { id: 2, total: 2 })));
}
