//! Live replies through the real Discord editor to the fake: what is
//! posted where, the plain-text fallback, and which replies do not grow.

use super::fake::{APP_ID, FakeDiscord};
use super::*;

async fn dm_inbound(fake: &FakeDiscord) -> (DiscordChannel, Inbound) {
    let (channel, handler, mut rx) = ready_handler(fake).await;
    handler.on_message(message("dm.json")).await;
    (channel, next(&mut rx).await)
}

#[tokio::test]
async fn a_live_reply_is_posted_as_a_reply_to_the_question_without_pinging_anyone_else() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let mut live = channel.live(Outbound::reply(&to, ""));
    live.update("Hello **there**").await;
    live.finish("Hello **there**").await.expect("finished");
    let calls = fake.message_calls(DM_CHANNEL);
    assert_eq!(calls.len(), 1, "the final text was already shown: no edit");
    assert_eq!(calls[0].content(), "Hello **there**");
    assert_eq!(calls[0].json["message_reference"]["message_id"], to.msg_id);
    assert_eq!(calls[0].json["allowed_mentions"]["parse"], json!([]));
    assert_eq!(fake.messages_in(DM_CHANNEL), ["Hello **there**"]);
}

#[tokio::test]
async fn content_discord_refuses_is_posted_again_as_plain_text() {
    let fake = FakeDiscord::start().await;
    let (channel, to) = dm_inbound(&fake).await;
    let invalid = json!({ "code": 50035, "message": "Invalid Form Body" });
    fake.fail(&format!("/channels/{DM_CHANNEL}/messages"), 400, invalid, 1);
    let live = channel.live(Outbound::reply(&to, ""));
    live.finish("Tea is **grassy**").await.expect("delivered as plain text");
    let calls = fake.message_calls(DM_CHANNEL);
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [400, 200]);
    assert_eq!(fake.messages_in(DM_CHANNEL), ["Tea is grassy"]);
}

#[tokio::test]
async fn an_interaction_answer_does_not_grow_and_is_sent_once_at_the_end() {
    let fake = FakeDiscord::start().await;
    let (channel, handler, mut rx) = ready_handler(&fake).await;
    handler
        .on_interaction(serde_json::from_value(fixture("interaction_forget.json")).expect("interaction"))
        .await;
    let command = next(&mut rx).await;
    let mut live = channel.live(Outbound::reply(&command, ""));
    live.update("partial").await;
    assert!(
        fake.requests().iter().all(|r| r.method != "PATCH"),
        "nothing shown early"
    );
    live.finish("Forgot it.").await.expect("answered");
    let answers = fake.wait_for(1, |r| r.method == "PATCH").await;
    assert!(answers[0].path.starts_with(&format!("/api/v10/webhooks/{APP_ID}/")));
    assert_eq!(answers[0].content(), "Forgot it.");
}
