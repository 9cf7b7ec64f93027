//! The Telegram adapter against a fake Bot API on 127.0.0.1: the real
//! `TelegramChannel` polling, routing, formatting, uploading and retrying,
//! with only the network peer faked.
#![cfg(feature = "telegram")]

use mnemo_testkit::html_check;
use mnemo_testkit::telegram as fake_api;

use fake_api::{FakeBotApi, TOKEN};
use mnemo_channels::telegram::{TEXT_ONLY_REPLY, TelegramChannel, TelegramMode, TelegramSettings, WebhookIntake};
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound, OutboundBody};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

const ADA: i64 = 42;
const GROUP: i64 = -1_001_234;
/// How long a test waits for the bot before failing.
const DEADLINE: Duration = Duration::from_secs(60);

fn settings(api: &FakeBotApi) -> TelegramSettings {
    TelegramSettings {
        api_url: Some(api.url.clone()),
        poll_timeout: Duration::from_secs(5),
        ..TelegramSettings::polling(TOKEN)
    }
}

/// A channel receiving in the background, and the ends a broker would hold.
struct Running {
    channel: Arc<TelegramChannel>,
    inbox: mpsc::Receiver<Inbound>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    fn start(settings: TelegramSettings) -> Self {
        let channel = Arc::new(TelegramChannel::new(settings).unwrap());
        let (tx, inbox) = mpsc::channel(16);
        let (stop, shutdown) = watch::channel(false);
        let receiver = channel.clone();
        let task = tokio::spawn(async move { receiver.receive(tx, shutdown).await });
        Running {
            channel,
            inbox,
            stop,
            task,
        }
    }

    async fn next(&mut self) -> Inbound {
        tokio::time::timeout(DEADLINE, self.inbox.recv())
            .await
            .expect("no message reached the broker")
            .unwrap()
    }

    async fn stop(self) -> Result<(), ChannelError> {
        self.stop.send(true).unwrap();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("receive did not stop")
            .unwrap()
    }
}

fn text(to: &Inbound, body: &str) -> Outbound {
    Outbound::reply(to, body)
}

#[tokio::test]
async fn polling_delivers_private_messages_in_order_and_confirms_them_at_shutdown() {
    let api = FakeBotApi::start().await;
    let first = api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), "one"));
    api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), "two"));
    let mut bot = Running::start(settings(&api));

    let one = bot.next().await;
    let two = bot.next().await;
    assert_eq!((one.text.as_str(), two.text.as_str()), ("one", "two"));
    assert_eq!(one.channel, "telegram");
    assert_eq!(one.user_id, ADA.to_string());
    assert_eq!(one.user_name.as_deref(), Some("Ada"));
    assert_eq!(one.chat_id, ADA.to_string());
    assert_eq!(one.chat_kind, ChatKind::Direct);
    assert!(one.addressed);
    assert_ne!(one.msg_id, two.msg_id);
    assert_eq!(bot.channel.bot_name().as_deref(), Some(fake_api::BOT_USERNAME));

    let commands = api.wait_for_calls("setMyCommands", 1).await;
    assert_eq!(commands[0].params["commands"][0]["command"], "session");

    bot.channel.taken(&one.msg_id);
    bot.channel.taken(&two.msg_id);
    bot.stop().await.unwrap();
    assert_eq!(
        api.confirmed_offset(),
        first + 2,
        "both updates confirmed, so a restart does not repeat them"
    );
}

/// The offset of the latest `getUpdates` call: every update below it is
/// confirmed to Telegram.
fn latest_offset(api: &FakeBotApi) -> Option<i64> {
    api.calls("getUpdates").last()?.params["offset"].as_i64()
}

/// Waits for `n` more `getUpdates` calls than `seen`: the latest one was
/// asked with the books as they are now.
async fn polls_after(api: &FakeBotApi, seen: usize, n: usize) {
    api.wait_for_calls("getUpdates", seen + n).await;
}

fn ada_says(api: &FakeBotApi, text: &str) -> i64 {
    api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), text))
}

#[tokio::test]
async fn polling_confirms_an_update_only_once_the_broker_took_it_and_never_past_one_it_has_not() {
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "one");
    ada_says(&api, "two");
    let mut bot = Running::start(settings(&api));
    let one = bot.next().await;
    let two = bot.next().await;

    polls_after(&api, api.calls("getUpdates").len(), 2).await;
    assert_eq!(latest_offset(&api), Some(first), "handed over is not yet safe");
    assert_eq!(api.pending_updates(), 2, "a crash now loses nothing");

    bot.channel.taken(&two.msg_id);
    polls_after(&api, api.calls("getUpdates").len(), 2).await;
    assert_eq!(
        latest_offset(&api),
        Some(first),
        "the second was taken, but the first still holds the offset"
    );

    bot.channel.taken(&one.msg_id);
    api.wait_until("both updates confirmed", || {
        (latest_offset(&api) == Some(first + 2)).then_some(())
    })
    .await;
    assert_eq!(api.pending_updates(), 0);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn an_update_telegram_sends_again_while_the_broker_has_not_taken_it_is_not_handed_over_twice() {
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "one");
    let mut bot = Running::start(settings(&api));
    let one = bot.next().await;

    let seen = api.calls("getUpdates").len();
    polls_after(&api, seen, 3).await;
    let again = &api.calls("getUpdates")[seen..];
    assert!(
        again.iter().all(|call| call.params["offset"].as_i64() == Some(first)),
        "Telegram was asked for the untaken update again"
    );
    ada_says(&api, "two");
    assert_eq!(bot.next().await.text, "two", "not `one` a second time");
    bot.channel.taken(&one.msg_id);
    api.wait_until("the first update confirmed", || {
        (latest_offset(&api) > Some(first)).then_some(())
    })
    .await;
    assert!(bot.inbox.try_recv().is_err(), "nothing handed over twice");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn an_update_the_broker_gives_back_is_handed_over_again_later_and_confirmed_only_once_taken() {
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "one");
    let mut bot = Running::start(settings(&api));
    let one = bot.next().await;

    let given_back = std::time::Instant::now();
    assert!(
        bot.channel.not_taken(&one.msg_id),
        "Telegram will deliver it again: the user need not resend it"
    );
    let again = bot.next().await;
    assert_eq!(
        (again.msg_id.as_str(), again.text.as_str()),
        (one.msg_id.as_str(), "one")
    );
    assert!(
        given_back.elapsed() >= Duration::from_secs(2),
        "handed over again after a pause, so a failing store does not spin"
    );
    assert_eq!(latest_offset(&api), Some(first), "still unconfirmed");

    bot.channel.taken(&again.msg_id);
    api.wait_until("the update confirmed", || {
        (latest_offset(&api) == Some(first + 1)).then_some(())
    })
    .await;
    assert!(bot.inbox.try_recv().is_err(), "handed over once more, not twice more");
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn at_shutdown_the_final_confirmation_stops_at_the_first_update_not_taken() {
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "one");
    ada_says(&api, "two");
    ada_says(&api, "three");
    let mut bot = Running::start(settings(&api));
    let (one, _two, three) = (bot.next().await, bot.next().await, bot.next().await);
    bot.channel.taken(&one.msg_id);
    bot.channel.taken(&three.msg_id);

    bot.stop().await.unwrap();

    assert_eq!(api.confirmed_offset(), first + 1, "`two` was never taken");
    assert_eq!(
        api.pending_updates(),
        2,
        "the next process gets `two` (and `three` again: a duplicate, not a loss)"
    );
}

#[tokio::test]
async fn at_shutdown_what_the_broker_takes_in_the_last_moment_is_still_confirmed() {
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "one");
    let mut bot = Running::start(settings(&api));
    let one = bot.next().await;
    let channel = bot.channel.clone();

    let stopping = tokio::spawn(bot.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    channel.taken(&one.msg_id);
    stopping.await.unwrap().unwrap();

    assert_eq!(api.confirmed_offset(), first + 1);
    assert_eq!(api.pending_updates(), 0);
}

#[tokio::test]
async fn past_a_hundred_untaken_updates_polling_waits_without_spinning_and_goes_on_as_they_are_taken() {
    const LIMIT: usize = 100;
    let api = FakeBotApi::start().await;
    let first = ada_says(&api, "m0");
    for i in 1..LIMIT + 30 {
        ada_says(&api, &format!("m{i}"));
    }
    let mut bot = Running::start(settings(&api));
    let mut handed = Vec::new();
    for _ in 0..LIMIT {
        handed.push(bot.next().await);
    }

    let before = api.calls("getUpdates").len();
    let next = tokio::time::timeout(Duration::from_secs(2), bot.inbox.recv()).await;
    assert!(
        next.is_err(),
        "the 101st is beyond the answer's window until one is taken"
    );
    let polls = api.calls("getUpdates").len() - before;
    assert!(polls <= 5, "{polls} getUpdates calls in 2 s while waiting: a hot loop");

    bot.channel.taken(&handed[0].msg_id);
    let after_one = bot.next().await;
    assert_eq!(after_one.text, format!("m{LIMIT}"), "one taken, one more handed over");
    handed.push(after_one);
    for message in &handed {
        bot.channel.taken(&message.msg_id);
    }
    for i in LIMIT + 1..LIMIT + 30 {
        let message = bot.next().await;
        assert_eq!(message.text, format!("m{i}"));
        bot.channel.taken(&message.msg_id);
    }
    let end = first + i64::try_from(LIMIT).unwrap() + 30;
    api.wait_until("every update confirmed", || {
        (latest_offset(&api) == Some(end)).then_some(())
    })
    .await;
    assert_eq!(api.pending_updates(), 0);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn in_groups_chatter_arrives_unaddressed_and_mentions_replies_and_commands_addressed() {
    let api = FakeBotApi::start().await;
    let ada = || fake_api::user(ADA, "Ada");
    api.push_message(fake_api::topic_message(GROUP, 7, ada(), "just chatting"));
    api.push_message(fake_api::topic_message(GROUP, 7, ada(), "/session@other_bot status"));
    api.push_message(fake_api::text_message(
        GROUP,
        fake_api::bot_user(),
        "@mnemo_test_bot from myself",
    ));
    let mut reply = fake_api::text_message(GROUP, ada(), "and why?");
    reply["reply_to_message"] = json!({
        "message_id": 3, "date": 0, "chat": fake_api::chat(GROUP), "from": fake_api::bot_user(), "text": "because",
    });
    api.push_message(fake_api::topic_message(
        GROUP,
        7,
        ada(),
        "@mnemo_test_bot what is rust?",
    ));
    api.push_message(reply);
    api.push_message(fake_api::text_message(GROUP, ada(), "/session@mnemo_test_bot status"));
    let mut bot = Running::start(settings(&api));

    let chatter = bot.next().await;
    assert_eq!(
        (chatter.text.as_str(), chatter.addressed),
        ("just chatting", false),
        "the broker's requireMention decides"
    );
    assert_eq!(chatter.chat_kind, ChatKind::Group);
    assert_eq!(chatter.thread_id.as_deref(), Some("7"));
    let mention = bot.next().await;
    assert_eq!(
        mention.text, "what is rust?",
        "a command for another bot and our own message never arrive"
    );
    assert!(mention.addressed);
    assert_eq!(mention.chat_kind, ChatKind::Group);
    assert_eq!(mention.thread_id.as_deref(), Some("7"));
    let reply = bot.next().await;
    assert_eq!((reply.text.as_str(), reply.addressed), ("and why?", true));
    let command = bot.next().await;
    assert_eq!(
        (command.text.as_str(), command.addressed),
        ("/session@mnemo_test_bot status", true)
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_long_reply_is_split_into_valid_html_messages_in_the_topic_quoting_the_question() {
    let api = FakeBotApi::start().await;
    api.push_message(fake_api::topic_message(
        GROUP,
        7,
        fake_api::user(ADA, "Ada"),
        "@mnemo_test_bot explain",
    ));
    let mut bot = Running::start(settings(&api));
    let question = bot.next().await;

    let paragraph = "**Rust** keeps memory safe <without> a GC & runs fast; `unsafe` is the escape hatch.";
    let long = vec![paragraph; 120].join("\n\n");
    assert!(long.chars().count() > 10_000);
    bot.channel.send(text(&question, &long)).await.unwrap();

    let sent = api.calls("sendMessage");
    assert!(sent.len() >= 3, "{} messages", sent.len());
    let mut shown = String::new();
    for (i, call) in sent.iter().enumerate() {
        let html = call.params["text"].as_str().unwrap();
        assert!(html.chars().count() <= 4096);
        assert_eq!(call.params["parse_mode"], "HTML");
        assert_eq!(call.params["message_thread_id"], 7);
        shown.push_str(&html_check::visible_text(html).unwrap());
        let quoted = &call.params["reply_parameters"]["message_id"];
        let question_id: i64 = question.msg_id.rsplit(':').next().unwrap().parse().unwrap();
        assert_eq!(
            quoted.as_i64(),
            (i == 0).then_some(question_id),
            "only the first message quotes"
        );
    }
    assert_eq!(
        shown
            .matches("Rust keeps memory safe <without> a GC & runs fast")
            .count(),
        120
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_private_reply_does_not_quote_and_shows_typing_first() {
    let api = FakeBotApi::start().await;
    api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), "hi"));
    let mut bot = Running::start(settings(&api));
    let hi = bot.next().await;

    bot.channel.typing(&hi).await;
    bot.channel.send(text(&hi, "hello _there_")).await.unwrap();

    let typing = api.calls("sendChatAction");
    assert_eq!(
        (
            typing[0].params["chat_id"].as_i64(),
            typing[0].params["action"].as_str()
        ),
        (Some(ADA), Some("typing"))
    );
    let sent = api.calls("sendMessage");
    assert_eq!(sent[0].params["text"], "hello <i>there</i>");
    assert!(sent[0].params.get("reply_parameters").is_none());
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn flood_control_is_waited_out_for_retry_after_seconds() {
    let api = FakeBotApi::start().await;
    api.fail_next("sendMessage", 429, &fake_api::too_many_requests(1));
    let channel = TelegramChannel::new(settings(&api)).unwrap();

    channel.send(outbound(ADA, "patience")).await.unwrap();

    let calls = api.calls("sendMessage");
    assert_eq!(calls.iter().map(|c| c.status).collect::<Vec<_>>(), [429, 200]);
    assert!(
        calls[1].at.duration_since(calls[0].at) >= Duration::from_secs(1),
        "retried before retry_after"
    );
    assert_eq!(calls[1].params["text"], "patience");
}

#[tokio::test]
async fn a_user_who_blocked_the_bot_is_reported_once_and_not_retried() {
    let api = FakeBotApi::start().await;
    api.fail_next("sendMessage", 403, &fake_api::blocked_by_user());
    let channel = TelegramChannel::new(settings(&api)).unwrap();

    let error = channel.send(outbound(ADA, "hello?")).await.unwrap_err();

    assert!(matches!(&error, ChannelError::Send { target, .. } if target == &ADA.to_string()));
    assert!(error.to_string().contains("blocked"), "{error}");
    assert_eq!(api.calls("sendMessage").len(), 1);
}

#[tokio::test]
async fn html_telegram_cannot_parse_is_resent_as_plain_text() {
    let api = FakeBotApi::start().await;
    let refused = json!({"ok": false, "error_code": 400, "description": "Bad Request: can't parse entities: x"});
    api.fail_next("sendMessage", 400, &refused.to_string());
    let channel = TelegramChannel::new(settings(&api)).unwrap();

    channel.send(outbound(ADA, "**a** & b")).await.unwrap();

    let calls = api.calls("sendMessage");
    assert_eq!(calls[0].params["text"], "<b>a</b> &amp; b");
    assert_eq!(calls[1].params["text"], "a & b");
    assert!(calls[1].params.get("parse_mode").is_none());
}

#[tokio::test]
async fn an_export_is_uploaded_as_a_document_with_its_caption() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mnemo-export.tar.gz");
    std::fs::write(&path, b"archive bytes").unwrap();
    let channel = TelegramChannel::new(settings(&api)).unwrap();

    let out = Outbound {
        body: OutboundBody::File {
            path,
            caption: "Your data".into(),
        },
        ..outbound(GROUP, "")
    };
    channel
        .send(Outbound {
            thread_id: Some("7".into()),
            reply_to: Some(format!("{GROUP}:55")),
            ..out
        })
        .await
        .unwrap();

    let upload = &api.calls("sendDocument")[0];
    assert_eq!(
        upload.file.as_ref().unwrap(),
        &("mnemo-export.tar.gz".to_string(), b"archive bytes".to_vec())
    );
    assert_eq!(upload.params["caption"], "Your data");
    assert_eq!(upload.params["chat_id"], GROUP.to_string());
    assert_eq!(upload.params["message_thread_id"], "7");
    assert!(upload.params["reply_parameters"].as_str().unwrap().contains("55"));
}

#[tokio::test]
async fn a_sticker_gets_the_text_only_note_and_never_reaches_the_broker() {
    let api = FakeBotApi::start().await;
    api.push_message(fake_api::sticker_message(ADA, fake_api::user(ADA, "Ada")));
    api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), "words"));
    let mut bot = Running::start(settings(&api));

    assert_eq!(bot.next().await.text, "words");
    let note = api.wait_for_calls("sendMessage", 1).await;
    assert_eq!(note[0].params["text"], TEXT_ONLY_REPLY);
    assert_eq!(note[0].params["chat_id"], ADA);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn polling_resumes_after_a_broken_answer() {
    let api = FakeBotApi::start().await;
    api.fail_next("getUpdates", 200, "<html>bad gateway</html>");
    api.push_message(fake_api::text_message(ADA, fake_api::user(ADA, "Ada"), "still there?"));
    let mut bot = Running::start(settings(&api));

    assert_eq!(bot.next().await.text, "still there?");
    assert_eq!(api.calls("getUpdates")[0].status, 200);
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_token_stops_receiving_with_an_error_that_does_not_show_it() {
    let api = FakeBotApi::start().await;
    let wrong = "9999:WRONG-token-value";
    let bot = Running::start(TelegramSettings {
        token: wrong.into(),
        ..settings(&api)
    });

    let error = tokio::time::timeout(DEADLINE, bot.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();

    assert!(error.to_string().contains("token"), "{error}");
    assert!(
        !error.to_string().contains(wrong) && !error.to_string().contains("WRONG"),
        "{error}"
    );
}

#[tokio::test]
async fn network_errors_do_not_show_the_token() {
    // A peer that accepts and hangs up: reqwest's error names the URL.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let channel = TelegramChannel::new(TelegramSettings {
        api_url: Some(url),
        ..TelegramSettings::polling(TOKEN)
    })
    .unwrap();

    let error = channel.send(outbound(ADA, "hi")).await.unwrap_err().to_string();

    assert!(error.contains("network"), "{error}");
    assert!(!error.contains("AAtest") && !error.contains(TOKEN), "{error}");
}

#[tokio::test]
async fn webhook_mode_registers_the_secret_and_delivers_what_the_intake_accepts() {
    let api = FakeBotApi::start().await;
    let mode = TelegramMode::Webhook {
        public_url: "https://bot.example/telegram".into(),
        secret: "hook_secret-1".into(),
    };
    let mut bot = Running::start(TelegramSettings { mode, ..settings(&api) });
    let intake: WebhookIntake = bot.channel.webhook_intake().unwrap();

    let registered = api.wait_for_calls("setWebhook", 1).await;
    assert_eq!(registered[0].params["url"], "https://bot.example/telegram");
    assert_eq!(registered[0].params["secret_token"], "hook_secret-1");
    assert_eq!(
        registered[0].params["max_connections"], "1",
        "multipart: every field is text"
    );
    let update = json!({ "update_id": 9, "message": {
        "message_id": 1, "date": 0, "chat": fake_api::chat(ADA), "from": fake_api::user(ADA, "Ada"), "text": "via hook" } });
    let body = update.to_string();

    assert!(intake.accept(Some(b"wrong"), body.as_bytes()).is_err());
    let first = intake.accept(Some(b"hook_secret-1"), body.as_bytes()).unwrap();
    let repeat = intake.accept(Some(b"hook_secret-1"), body.as_bytes()).unwrap();
    let other = body
        .replace("\"update_id\":9", "\"update_id\":10")
        .replace("\"message_id\":1", "\"message_id\":2")
        .replace("via hook", "second");
    let second = intake.accept(Some(b"hook_secret-1"), other.as_bytes()).unwrap();

    let message = bot.next().await;
    assert_eq!(message.text, "via hook");
    assert_eq!(
        bot.next().await.text,
        "second",
        "the repeated delivery of update 9 was skipped"
    );
    // Telegram hears 200 only once the broker took the message; the repeat
    // with it. The broker never took the second: it is refused, to come again.
    let waiting = tokio::spawn(async move { (first.kept(DEADLINE).await, repeat.kept(DEADLINE).await) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "acknowledged before the broker took it");
    bot.channel.taken(&message.msg_id);
    assert_eq!(waiting.await.unwrap(), (true, true));
    assert!(!second.kept(Duration::from_millis(50)).await);
    assert!(api.calls("getUpdates").is_empty());
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_ends_a_long_poll_that_is_waiting() {
    let api = FakeBotApi::start().await;
    let bot = Running::start(TelegramSettings {
        poll_timeout: Duration::from_secs(300),
        ..settings(&api)
    });
    api.wait_for_calls("getUpdates", 1).await;

    bot.stop().await.unwrap();
}

/// A reply to chat `chat` that answers no particular message.
fn outbound(chat: i64, body: &str) -> Outbound {
    Outbound {
        channel: "telegram".into(),
        chat_id: chat.to_string(),
        thread_id: None,
        reply_to: None,
        ephemeral: false,
        private_to: None,
        interaction: None,
        body: OutboundBody::Text(body.into()),
    }
}

mod files {
    use super::*;
    use mnemo_channels::{Attachment, AttachmentKind, DownloadError, DownloadLimits};

    fn attachment(file_id: &str, size: Option<u64>) -> Attachment {
        Attachment {
            kind: AttachmentKind::Voice,
            name: None,
            mime: Some("audio/ogg".into()),
            size,
            duration_secs: Some(3),
            source: file_id.into(),
        }
    }

    fn limits(max_bytes: u64) -> DownloadLimits {
        DownloadLimits {
            max_bytes,
            stall: Duration::from_millis(500),
        }
    }

    #[tokio::test]
    async fn a_file_is_fetched_through_get_file_and_the_file_url_within_the_limits() {
        let api = FakeBotApi::start().await;
        api.add_file("V1", "voice/file_1.oga", b"OggS-voice".to_vec(), "audio/ogg");
        api.add_stalling_file("SLOW", "voice/slow.oga");
        let channel = TelegramChannel::new(settings(&api)).unwrap();
        let got = channel.download(&attachment("V1", None), limits(100)).await;
        assert_eq!(got.as_deref(), Ok(&b"OggS-voice"[..]));
        assert_eq!(api.calls("getFile")[0].params["file_id"], "V1");
        assert_eq!(
            channel.download(&attachment("V1", None), limits(5)).await,
            Err(DownloadError::TooLarge { limit: 5 })
        );
        assert_eq!(
            channel
                .download(&attachment("V1", Some(50 * 1024 * 1024)), limits(u64::MAX))
                .await,
            Err(DownloadError::TooLarge {
                limit: mnemo_channels::telegram::BOT_API_DOWNLOAD_LIMIT
            }),
            "the Bot API's 20 MB bound holds whatever the broker allows"
        );
        assert_eq!(
            channel.download(&attachment("SLOW", None), limits(5000)).await,
            Err(DownloadError::Stalled(Duration::from_millis(500)))
        );
        let gone = channel
            .download(&attachment("NOPE", None), limits(100))
            .await
            .unwrap_err();
        assert_eq!(
            gone,
            DownloadError::Failed("getFile: Bad Request: invalid file_id".into())
        );
        assert!(!gone.to_string().contains(TOKEN));
    }
}
