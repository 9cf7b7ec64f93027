//! A photo over Slack, end to end: the real binary in Socket Mode, the
//! fake Slack serving the shared file at its `url_private_download` only
//! to a request with the bot token (without it, the HTML sign-in page, as
//! Slack does), and the fake model with `model.vision` on. The photo
//! reaches the model as an image part with its caption; what is stored is
//! the marker and the caption.

use super::{Bot, answered, connected, socket_config};
use mnemo_testkit::model::{last_user_message, request_images};
use mnemo_testkit::slack::{FakeSlack, dm_event, events_envelope};
use serde_json::json;
use support::FakeModel;

use super::support;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-a-tiny-picture";

#[tokio::test]
async fn a_shared_photo_is_fetched_with_the_bot_token_and_reaches_the_model_with_its_caption() {
    let (model, model_url) = FakeModel::start().await;
    let fake = FakeSlack::start().await;
    let url = fake.add_file("F1", "cat.png", PNG.to_vec(), "image/png");
    let bot = Bot::start_with_model(&model_url, socket_config(&fake), json!({}), json!({ "vision": true }));
    connected(&fake, 1).await;

    let mut event = dm_event("U1", "1700000001.000100", "what breed is this?");
    event["subtype"] = json!("file_share");
    event["files"] = json!([{
        "id": "F1", "name": "cat.png", "mimetype": "image/png", "filetype": "png",
        "url_private": url, "url_private_download": url,
    }]);
    fake.send(events_envelope("env-1", "Ev1", event));
    fake.wait_until("the answer", |f| {
        answered(f, "DU1", "echo: [photo] what breed is this?")
    })
    .await;

    assert_eq!(fake.file_downloads(), [("T1-F1/download/cat.png".to_string(), true)]);
    let asked = model.chat_requests().pop().unwrap();
    assert_eq!(last_user_message(&asked), "[photo] what breed is this?");
    assert_eq!(
        request_images(&asked).unwrap(),
        [("image/png".to_string(), PNG.to_vec())]
    );

    let log = mnemo_sessions::Layout::new(bot.state().join("state"), "slack")
        .messages_path(&mnemo_sessions::SafeName::of("U1"));
    let stored = std::fs::read_to_string(log).unwrap();
    assert!(stored.contains("[photo] what breed is this?"));
    assert!(!stored.contains("iVBOR"), "the image itself is not stored");
    let (clean, logs) = bot.stop().await;
    assert!(clean, "{logs}");
    assert!(!logs.contains("what breed is this?"), "no message text in the logs");
}

#[tokio::test]
async fn the_fake_serves_the_sign_in_page_not_the_file_without_the_bot_token() {
    let fake = FakeSlack::start().await;
    let url = fake.add_file("F2", "x.png", PNG.to_vec(), "image/png");
    let client = reqwest::Client::new();
    let page = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(page, mnemo_testkit::slack::SIGN_IN_PAGE);
    let file = client
        .get(&url)
        .bearer_auth(mnemo_testkit::slack::BOT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(file.headers()["content-type"], "image/png");
    assert_eq!(file.bytes().await.unwrap().as_ref(), PNG);
}
