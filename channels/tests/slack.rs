//! The Slack channel against a fake Slack on 127.0.0.1: Socket Mode
//! envelopes in, Web API calls out, the Events API's signed requests. A
//! message's delivery is acknowledged only once the broker has taken it;
//! the tests take each message as the broker does, on intake.
#![cfg(feature = "slack")]

use mnemo_testkit::slack as fake;

use fake::*;
use mnemo_channels::slack::{EVENTS_PATH, SlackChannel, SlackMode, SlackSettings, THINKING, signature};
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

struct Running {
    channel: Arc<SlackChannel>,
    inbox: mpsc::Receiver<Inbound>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    async fn next(&mut self) -> Inbound {
        tokio::time::timeout(Duration::from_secs(30), self.inbox.recv())
            .await
            .expect("a message reaches the inbox")
            .expect("the inbox is open")
    }

    /// The next message, taken as the broker takes it once stored.
    async fn take(&mut self) -> Inbound {
        let m = self.next().await;
        self.channel.taken(&m.msg_id);
        m
    }

    async fn stop(self) -> Result<(), ChannelError> {
        self.stop.send(true).expect("the channel listens for shutdown");
        self.task.await.expect("receive does not panic")
    }
}

fn settings(fake: &FakeSlack, bot_token: &str, mode: SlackMode) -> SlackSettings {
    SlackSettings {
        bot_token: bot_token.into(),
        mode,
        api_url: Some(fake.api_url.clone()),
    }
}

fn start(settings: SlackSettings) -> Running {
    let channel = Arc::new(SlackChannel::new(settings).expect("channel builds"));
    let (tx, inbox) = mpsc::channel(16);
    let (stop, shutdown) = watch::channel(false);
    let receiving = channel.clone();
    let task = tokio::spawn(async move { receiving.receive(tx, shutdown).await });
    Running {
        channel,
        inbox,
        stop,
        task,
    }
}

async fn socket_mode(fake: &FakeSlack) -> Running {
    let running = start(settings(
        fake,
        BOT_TOKEN,
        SlackMode::Socket {
            app_token: APP_TOKEN.into(),
        },
    ));
    fake.wait_until("a Socket Mode connection", |f| f.connections() == 1)
        .await;
    running
}

#[tokio::test]
async fn a_direct_message_over_socket_mode_reaches_the_inbox_and_is_acked() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope(
        "env-1",
        "Ev1",
        dm_event("U1", "1700000000.000100", "hello there"),
    ));
    let m = slack.take().await;
    assert_eq!(
        (m.channel.as_str(), m.user_id.as_str(), m.chat_id.as_str()),
        ("slack", "U1", "DU1")
    );
    assert_eq!(m.chat_kind, ChatKind::Direct);
    assert_eq!(m.text, "hello there");
    assert!(m.addressed);
    fake.wait_until("the envelope's ack", |f| f.acked("env-1")).await;
    assert_eq!(slack.channel.bot_name().as_deref(), Some("mnemo"));
    slack.stop().await.expect("stops cleanly");
}

/// Long enough for an ack that was going to be sent at once to have
/// arrived: how long a test watches for one that must not come.
const NO_ACK_YET: Duration = Duration::from_millis(300);

/// How long the adapter waits for the broker to take a message (2.5 s)
/// and a little more.
const PAST_THE_WAIT: Duration = Duration::from_millis(2_800);

#[tokio::test]
async fn a_socket_mode_envelope_is_acked_only_after_its_message_is_taken() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope("env-1", "Ev1", dm_event("U1", "1.000001", "keep this")));
    let m = slack.next().await;
    tokio::time::sleep(NO_ACK_YET).await;
    assert!(!fake.acked("env-1"), "acked while only in the broker's inbox");
    slack.channel.taken(&m.msg_id);
    fake.wait_until("the ack once taken", |f| f.acked("env-1")).await;
}

#[tokio::test]
async fn an_envelope_whose_message_is_not_taken_is_not_acked_and_its_redelivery_is_handed_over_again() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    let event = dm_event("U1", "1.000001", "the store is down");
    fake.send_until_acked(events_envelope("env-1", "Ev1", event), Duration::from_millis(500));
    let m = slack.next().await;
    assert!(slack.channel.not_taken(&m.msg_id), "Slack delivers it again");

    let again = slack.take().await;
    assert_eq!(
        (again.msg_id.as_str(), again.text.as_str()),
        (m.msg_id.as_str(), "the store is down")
    );
    let retry = retry_envelope_id("env-1", 1);
    fake.wait_until("the redelivery's ack", |f| f.acked(&retry)).await;
    assert!(
        !fake.acked("env-1"),
        "the delivery whose message was not taken was acked"
    );
    assert!(slack.inbox.try_recv().is_err(), "handed over once per delivery");
}

#[tokio::test]
async fn an_envelope_not_taken_in_time_is_not_acked_and_its_redelivery_waits_for_the_first_copy() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    // Slack sends an unacked envelope again 3 s after the first.
    let event = dm_event("U1", "1.000001", "slow broker");
    fake.send_until_acked(events_envelope("env-1", "Ev1", event), Duration::from_secs(3));
    let m = slack.next().await;
    tokio::time::sleep(PAST_THE_WAIT + Duration::from_millis(500)).await;
    let retry = retry_envelope_id("env-1", 1);
    assert!(!fake.acked("env-1"), "acked though never taken");
    assert!(
        !fake.acked(&retry),
        "the redelivery was acked before the message was taken"
    );
    assert!(
        slack.inbox.try_recv().is_err(),
        "the redelivery was handed over while its first copy was with the broker"
    );

    slack.channel.taken(&m.msg_id);
    fake.wait_until("the redelivery's ack", |f| f.acked(&retry)).await;
    assert!(slack.inbox.try_recv().is_err(), "handed over twice");
    assert!(!fake.acked("env-1"));
}

#[tokio::test]
async fn a_redelivered_envelope_of_a_taken_message_is_acked_without_a_second_handover() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    let event = dm_event("U1", "1700000000.000100", "only once please");
    fake.send(events_envelope("env-1", "Ev1", event.clone()));
    let m = slack.next().await;
    tokio::time::sleep(NO_ACK_YET).await;
    assert!(!fake.acked("env-1"), "acked before the message was taken");
    slack.channel.taken(&m.msg_id);
    fake.wait_until("the first envelope's ack", |f| f.acked("env-1")).await;

    // The ack was lost, say: Slack delivers the envelope again.
    fake.send(events_envelope("env-2", "Ev1", event));
    fake.wait_until("the redelivery's ack", |f| f.acked("env-2")).await;
    // Acks are sent after any handover, so a second copy would be there by now.
    assert!(slack.inbox.try_recv().is_err(), "the redelivery was handed over again");
}

#[tokio::test]
async fn a_dropped_socket_or_disconnect_envelope_reconnects_without_losing_or_repeating_messages() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope("env-1", "Ev1", dm_event("U1", "1.000001", "first")));
    assert_eq!(slack.take().await.text, "first");

    fake.drop_socket();
    fake.wait_until("a second connection", |f| f.connections() == 2).await;
    // Slack redelivers what it had not seen acked, and carries on.
    fake.send(events_envelope("env-2", "Ev1", dm_event("U1", "1.000001", "first")));
    fake.send(events_envelope("env-3", "Ev2", dm_event("U1", "1.000002", "second")));
    assert_eq!(slack.take().await.text, "second");
    fake.wait_until("both acked", |f| f.acked("env-2") && f.acked("env-3"))
        .await;

    fake.send(json!({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake"}}));
    fake.wait_until("a third connection", |f| f.connections() == 3).await;
    fake.send(events_envelope("env-4", "Ev3", dm_event("U1", "1.000003", "third")));
    assert_eq!(slack.take().await.text, "third");
    fake.wait_until("every envelope acked", |f| {
        ["env-2", "env-3", "env-4"].iter().all(|e| f.acked(e))
    })
    .await;
    assert!(slack.inbox.try_recv().is_err(), "nothing arrived twice");
}

#[tokio::test]
async fn a_group_admin_is_a_workspace_admin_as_users_info_says() {
    let fake = FakeSlack::start().await;
    fake.set_admin("U_ADMIN");
    let channel = SlackChannel::new(settings(
        &fake,
        BOT_TOKEN,
        SlackMode::Socket {
            app_token: APP_TOKEN.into(),
        },
    ))
    .expect("channel builds");
    assert!(channel.is_group_admin("C1", "U_ADMIN").await.unwrap());
    assert!(!channel.is_group_admin("C1", "U_MEMBER").await.unwrap());
    let asked = fake.calls_to("users.info");
    assert_eq!(asked.len(), 2);
    // Refused by Slack (a missing `users:read` scope): an error, never a yes.
    fake.fail("users.info", 10);
    assert!(channel.is_group_admin("C1", "U_ADMIN").await.is_err());
}

#[tokio::test]
async fn a_slash_command_is_acked_at_once_and_answered_only_to_the_asker() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    let url = fake.response_url("cmd1");
    fake.send(command_envelope(
        "env-1",
        command_payload("U1", "C1", "status", &url, "tr1"),
    ));
    let m = slack.next().await;
    assert_eq!(m.text, "/session status");
    assert_eq!(m.interaction.as_deref(), Some(url.as_str()));
    // Not held until taken: Slack wants it within 3 s, and the broker
    // answers a command only after the asker's turn in progress.
    fake.wait_until("the command's ack, before it is taken", |f| f.acked("env-1"))
        .await;

    slack.channel.typing(&m).await;
    slack
        .channel
        .send(Outbound::reply(&m, "You have **3** messages & <no> summary."))
        .await
        .expect("answered");
    let responses = fake.responses();
    assert_eq!(responses.len(), 1);
    assert_eq!(responses[0]["response_type"], "ephemeral");
    assert_eq!(responses[0]["text"], "You have *3* messages &amp; &lt;no&gt; summary.");
    assert!(
        fake.calls_to("chat.postMessage").is_empty(),
        "nothing was posted where everyone sees it"
    );
}

#[tokio::test]
async fn the_answer_replaces_the_thinking_placeholder_in_place() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope("env-1", "Ev1", dm_event("U1", "1.000001", "hi")));
    let m = slack.take().await;
    slack.channel.typing(&m).await;
    slack.channel.typing(&m).await;
    slack
        .channel
        .send(Outbound::reply(&m, "Hello **you**, see [docs](https://x.io)."))
        .await
        .expect("sent");

    let posts = fake.calls_to("chat.postMessage");
    assert_eq!(posts.len(), 1, "one placeholder however often typing is refreshed");
    assert_eq!(posts[0].body["text"], THINKING);
    let updates = fake.calls_to("chat.update");
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].body["ts"], "1800000000.000001");
    assert_eq!(updates[0].body["text"], "Hello *you*, see <https://x.io|docs>.");
}

#[tokio::test]
async fn a_long_answer_is_split_and_the_placeholder_deleted() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    let mention =
        json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> essay please", "ts": "5.000005"});
    fake.send(events_envelope("env-1", "Ev1", mention));
    let m = slack.take().await;
    assert_eq!(
        m.thread_id.as_deref(),
        Some("5.000005"),
        "a channel mention is answered in its thread"
    );
    slack.channel.typing(&m).await;
    let paragraph = "word ".repeat(300);
    let essay = [paragraph.trim(); 6].join("\n\n");
    slack.channel.send(Outbound::reply(&m, essay)).await.expect("sent");

    let deletes = fake.calls_to("chat.delete");
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].body["ts"], "1800000000.000001");
    let parts: Vec<_> = fake.calls_to("chat.postMessage").into_iter().skip(1).collect();
    assert!(parts.len() >= 2);
    for part in &parts {
        assert!(part.body["text"].as_str().expect("text").chars().count() <= 4_000);
        assert_eq!(part.body["thread_ts"], "5.000005");
        assert_eq!(part.body["channel"], "C1");
    }
}

#[tokio::test]
async fn an_export_requested_by_slash_command_is_uploaded_to_the_askers_dm() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    let url = fake.response_url("cmd2");
    fake.send(command_envelope(
        "env-1",
        command_payload("U1", "C1", "export", &url, "tr2"),
    ));
    let m = slack.next().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("U1-export.tar.gz");
    std::fs::write(&path, b"archive bytes").expect("write export");
    slack
        .channel
        .send(Outbound::file(&m, path, "Your data export"))
        .await
        .expect("uploaded");

    let open = fake.calls_to("conversations.open");
    assert_eq!(open.len(), 1);
    let ticket = &fake.calls_to("files.getUploadURLExternal")[0];
    assert_eq!(ticket.body["filename"], "U1-export.tar.gz");
    assert_eq!(ticket.body["length"], "13");
    assert_eq!(fake.uploads()[0].1, b"archive bytes");
    let done = &fake.calls_to("files.completeUploadExternal")[0];
    assert_eq!(
        done.body["channel_id"], "DU1",
        "exports go to the asker's DM, never the channel"
    );
    assert_eq!(done.body["files"][0]["id"], fake.uploads()[0].0);
    assert_eq!(done.body["initial_comment"], "Your data export");
    assert_eq!(
        fake.responses()[0]["text"],
        "I've sent the file to our direct messages."
    );
}

#[tokio::test]
async fn a_rate_limited_call_waits_as_retry_after_asks_then_succeeds() {
    let fake = FakeSlack::start().await;
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope("env-1", "Ev1", dm_event("U1", "1.000001", "hi")));
    let m = slack.take().await;
    fake.rate_limit("chat.postMessage", 1);
    slack
        .channel
        .send(Outbound::reply(&m, "answer"))
        .await
        .expect("sent after the wait");

    let limited = fake.rate_limited_at("chat.postMessage");
    let posted = fake.calls_to("chat.postMessage");
    assert_eq!((limited.len(), posted.len()), (1, 1));
    assert!(
        posted[0].at.duration_since(limited[0]) >= Duration::from_secs(1),
        "retried before Retry-After"
    );
}

#[tokio::test]
async fn a_slack_outage_at_start_is_waited_out() {
    let fake = FakeSlack::start().await;
    fake.fail("auth.test", 2);
    fake.fail("apps.connections.open", 1);
    let mut slack = socket_mode(&fake).await;
    fake.send(events_envelope(
        "env-1",
        "Ev1",
        dm_event("U1", "1.000001", "are you there?"),
    ));
    assert_eq!(slack.take().await.text, "are you there?");
}

#[tokio::test]
async fn a_rejected_bot_token_stops_receive_with_a_clear_error_that_hides_the_token() {
    let fake = FakeSlack::start().await;
    let slack = start(settings(
        &fake,
        "xoxb-wrong-secret",
        SlackMode::Socket {
            app_token: APP_TOKEN.into(),
        },
    ));
    let err = slack
        .task
        .await
        .expect("no panic")
        .expect_err("a bad token cannot receive");
    let text = err.to_string();
    assert!(
        text.contains("auth.test") && text.contains("invalid_auth") && text.contains("botTokenEnv"),
        "{text}"
    );
    assert!(!text.contains("xoxb-wrong-secret"));
}

#[tokio::test]
async fn a_rejected_app_token_stops_receive_before_any_connection() {
    let fake = FakeSlack::start().await;
    let slack = start(settings(
        &fake,
        BOT_TOKEN,
        SlackMode::Socket {
            app_token: "xapp-wrong".into(),
        },
    ));
    let err = slack
        .task
        .await
        .expect("no panic")
        .expect_err("a bad app token cannot connect");
    assert!(err.to_string().contains("apps.connections.open"), "{err}");
    assert_eq!(fake.connections(), 0);
}

mod events_api {
    use super::*;

    const SECRET: &str = "test-signing-secret";

    async fn events_mode(fake: &FakeSlack) -> (Running, String) {
        let listen = "127.0.0.1:0".parse().expect("address");
        let slack = start(settings(
            fake,
            BOT_TOKEN,
            SlackMode::Events {
                signing_secret: SECRET.into(),
                listen,
            },
        ));
        let addr = slack.channel.listening_on().await.expect("the listener binds");
        (slack, format!("http://{addr}"))
    }

    async fn post(url: &str, body: &str, timestamp: i64, secret: &str, content_type: &str) -> reqwest::Response {
        let ts = timestamp.to_string();
        reqwest::Client::new()
            .post(url)
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", &ts)
            .header("x-slack-signature", signature::sign(secret, &ts, body.as_bytes()))
            .body(body.to_string())
            .send()
            .await
            .expect("the listener answers")
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    /// POSTs a signed event in the background, as Slack does (`retry`: the
    /// `X-Slack-Retry-Num` of a retry); resolves to the status once answered.
    fn post_event(url: &str, body: &str, retry: Option<u32>) -> JoinHandle<u16> {
        let (url, body) = (url.to_string(), body.to_string());
        tokio::spawn(async move {
            let ts = now().to_string();
            let mut request = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("x-slack-request-timestamp", &ts)
                .header("x-slack-signature", signature::sign(SECRET, &ts, body.as_bytes()));
            if let Some(n) = retry {
                request = request
                    .header("x-slack-retry-num", n.to_string())
                    .header("x-slack-retry-reason", "http_error");
            }
            request
                .body(body)
                .send()
                .await
                .expect("the listener answers")
                .status()
                .as_u16()
        })
    }

    #[tokio::test]
    async fn an_event_is_answered_200_only_after_its_message_is_taken() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "keep this")).to_string();
        let answer = post_event(&format!("{base}{EVENTS_PATH}"), &event, None);
        let m = slack.next().await;
        tokio::time::sleep(NO_ACK_YET).await;
        assert!(!answer.is_finished(), "answered while only in the broker's inbox");
        slack.channel.taken(&m.msg_id);
        assert_eq!(answer.await.expect("no panic"), 200);
    }

    #[tokio::test]
    async fn an_event_not_taken_is_answered_503_and_its_retry_handed_over_again() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let url = format!("{base}{EVENTS_PATH}");
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "the store is down")).to_string();
        let answer = post_event(&url, &event, None);
        let m = slack.next().await;
        assert!(slack.channel.not_taken(&m.msg_id), "Slack retries it");
        assert_eq!(answer.await.expect("no panic"), 503);

        let retry = post_event(&url, &event, Some(1));
        let again = slack.take().await;
        assert_eq!(again.msg_id, m.msg_id);
        assert_eq!(retry.await.expect("no panic"), 200);

        // A retry of the taken message: 200 without a second handover.
        assert_eq!(post_event(&url, &event, Some(2)).await.expect("no panic"), 200);
        assert!(slack.inbox.try_recv().is_err());
    }

    #[tokio::test]
    async fn an_event_never_taken_in_time_is_answered_503() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "slow broker")).to_string();
        let answer = post_event(&format!("{base}{EVENTS_PATH}"), &event, None);
        slack.next().await;
        let status = tokio::time::timeout(PAST_THE_WAIT, answer)
            .await
            .expect("answered within Slack's 3 s")
            .expect("no panic");
        assert_eq!(status, 503);
    }

    #[tokio::test]
    async fn an_event_not_taken_on_slacks_last_retry_is_not_expected_again() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "last chance")).to_string();
        let answer = post_event(&format!("{base}{EVENTS_PATH}"), &event, Some(3));
        let m = slack.next().await;
        assert!(
            !slack.channel.not_taken(&m.msg_id),
            "Slack retries three times: the broker must ask the user instead"
        );
        assert_eq!(answer.await.expect("no panic"), 503);
    }

    #[tokio::test]
    async fn a_signed_event_is_delivered_and_the_url_challenge_answered() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let url = format!("{base}{EVENTS_PATH}");
        let challenge = json!({"type": "url_verification", "token": "x", "challenge": "abc123"}).to_string();
        let res = post(&url, &challenge, now(), SECRET, "application/json").await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.text().await.expect("body"), "abc123");

        let event = event_callback("Ev1", dm_event("U1", "1.000001", "over http")).to_string();
        let answer = post_event(&url, &event, None);
        assert_eq!(slack.take().await.text, "over http");
        assert_eq!(answer.await.expect("no panic"), 200);
        // Slack retries when our 200 is late; the retry is answered but not handed over.
        assert_eq!(post_event(&url, &event, Some(1)).await.expect("no panic"), 200);
        assert!(slack.inbox.try_recv().is_err());
        slack.stop().await.expect("stops cleanly");
    }

    #[tokio::test]
    async fn a_wrong_signature_or_stale_timestamp_is_refused_and_nothing_delivered() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let url = format!("{base}{EVENTS_PATH}");
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "forged")).to_string();
        assert_eq!(
            post(&url, &event, now(), "not-the-secret", "application/json")
                .await
                .status(),
            401
        );
        assert_eq!(
            post(&url, &event, now() - 6 * 60, SECRET, "application/json")
                .await
                .status(),
            401
        );
        let unsigned = reqwest::Client::new()
            .post(&url)
            .body(event.clone())
            .send()
            .await
            .expect("answers");
        assert_eq!(unsigned.status(), 401);
        // A genuine event afterwards is the first and only thing delivered.
        let genuine = event_callback("Ev2", dm_event("U1", "1.000002", "genuine")).to_string();
        let answer = post_event(&url, &genuine, None);
        assert_eq!(slack.take().await.text, "genuine");
        assert_eq!(answer.await.expect("no panic"), 200);
        assert!(slack.inbox.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_signed_slash_command_is_delivered_with_its_response_url() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let form = "team_id=T1&channel_id=DU1&user_id=U1&command=%2Fsession&text=forget+my-topic\
                    &response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1&trigger_id=tr9";
        let url = format!("{base}{}", mnemo_channels::slack::COMMANDS_PATH);
        // Answered 200 once in the inbox, before the broker takes it.
        let res = post(&url, form, now(), SECRET, "application/x-www-form-urlencoded").await;
        assert_eq!(res.status(), 200);
        let m = slack.next().await;
        assert_eq!(m.text, "/session forget my-topic");
        assert_eq!(m.interaction.as_deref(), Some("https://hooks.slack.com/commands/1"));
        assert_eq!(m.chat_kind, ChatKind::Direct);
    }

    #[tokio::test]
    async fn other_paths_methods_and_oversized_bodies_are_refused_before_any_parsing() {
        let fake = FakeSlack::start().await;
        let (mut slack, base) = events_mode(&fake).await;
        let event = event_callback("Ev1", dm_event("U1", "1.000001", "misrouted")).to_string();
        let elsewhere = post(
            &format!("{base}/slack/other"),
            &event,
            now(),
            SECRET,
            "application/json",
        )
        .await;
        assert_eq!(elsewhere.status(), 404);
        let get = reqwest::get(format!("{base}{EVENTS_PATH}")).await.expect("answers");
        assert_eq!(get.status(), 405);
        let huge = "x".repeat(1024 * 1024 + 1);
        let oversized = post(
            &format!("{base}{EVENTS_PATH}"),
            &huge,
            now(),
            SECRET,
            "application/json",
        )
        .await;
        assert_eq!(oversized.status(), 413);
        assert!(slack.inbox.try_recv().is_err(), "nothing delivered");
        slack.stop().await.expect("stops cleanly");
    }
}
