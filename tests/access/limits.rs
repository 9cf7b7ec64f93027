//! Abuse limits through the real pipeline: a flood and an oversized message
//! are answered once, stored nowhere and never sent to the model; one user
//! never has more than one model call in flight.

use crate::harness::{Broker, CH, dm, stm, write_access};
use crate::support::app_parts;
use crate::support::{FakeChannel, FakeModel, last_user_message};
use mnemo::app::App;
use mnemo::config::LimitsConfig;
use mnemo_channels::Channel;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn open_broker(limits: LimitsConfig) -> Broker {
    let b = Broker::start(limits).await;
    b.write_access(json!({ "dmPolicy": "open" }));
    b
}

#[tokio::test]
async fn a_flood_is_answered_once_and_nothing_of_it_is_stored() {
    // One message a minute, a burst of two: the test runs in well under the
    // 60 s a new token takes.
    let b = open_broker(LimitsConfig {
        user_messages_per_minute: 1,
        user_burst: Some(2),
        ..LimitsConfig::default()
    })
    .await;
    assert_eq!(b.say(dm("fay", "1", "one")).await, ["echo: one"]);
    assert_eq!(b.say(dm("fay", "2", "two")).await, ["echo: two"]);
    let slow_down = b.say(dm("fay", "3", "flood three")).await;
    assert_eq!(slow_down.len(), 1);
    assert!(slow_down[0].contains("faster than I can take them"), "{slow_down:?}");
    for i in 4..10 {
        assert!(
            b.say(dm("fay", &i.to_string(), &format!("flood {i}"))).await.is_empty(),
            "answered once"
        );
    }
    let asked: Vec<String> = b.model.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(asked, ["one", "two"]);
    let stored: Vec<String> = b.stm("fay").into_iter().map(|r| r.text).collect();
    assert_eq!(stored, ["one", "echo: one", "two", "echo: two"]);
    // Others are not slowed down by fay.
    assert_eq!(b.say(dm("gus", "1", "hi")).await, ["echo: hi"]);
}

#[tokio::test]
async fn an_oversized_message_is_refused_once_and_not_stored() {
    let b = open_broker(LimitsConfig {
        max_message_chars: 20,
        ..LimitsConfig::default()
    })
    .await;
    let long = "x".repeat(21);
    let refused = b.say(dm("hal", "1", &long)).await;
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("too long") && refused[0].contains("21") && refused[0].contains("20"),
        "{refused:?}"
    );
    assert!(
        b.say(dm("hal", "2", &format!("{long}!"))).await.is_empty(),
        "answered once"
    );
    assert!(b.say(dm("hal", "3", &long)).await.is_empty());
    assert!(b.model.chat_requests().is_empty());
    assert!(b.stm("hal").is_empty(), "refused, not truncated and stored");
    assert_eq!(b.say(dm("hal", "4", "short one")).await, ["echo: short one"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_user_never_has_two_model_calls_in_flight() {
    let (fake, url) = FakeModel::start().await;
    fake.set_delay(Duration::from_millis(20));
    let dir = tempfile::tempdir().unwrap();
    write_access(dir.path(), json!({ "dmPolicy": "open" }));
    // A global cap far above one, so only the per-user rule can hold it to one.
    let limits = LimitsConfig {
        max_concurrent_model_calls: 8,
        ..LimitsConfig::default()
    };
    let (channel, inbox) = FakeChannel::new(CH);
    let app = App::new(
        app_parts(dir.path(), &url, limits),
        vec![channel.clone() as Arc<dyn Channel>],
    )
    .unwrap();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let (app, channel) = (app.clone(), channel.clone() as Arc<dyn Channel>);
        async move { app.serve(vec![channel], stop).await }
    });
    for i in 0..6 {
        inbox
            .send(dm("ivy", &i.to_string(), &format!("question {i}")))
            .await
            .unwrap();
    }
    drop(inbox);
    assert!(serving.await.unwrap());
    assert_eq!(fake.max_in_flight.load(Ordering::SeqCst), 1);
    let asked: Vec<String> = fake.chat_requests().iter().map(last_user_message).collect();
    assert_eq!(
        asked,
        (0..6).map(|i| format!("question {i}")).collect::<Vec<_>>(),
        "in order, each once"
    );
    assert_eq!(stm(dir.path(), "ivy").len(), 12);
}
