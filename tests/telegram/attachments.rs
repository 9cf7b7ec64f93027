//! Attachments over Telegram, end to end: the real binary, the fake Bot
//! API serving files as Telegram does (`getFile`, then
//! `/file/bot<token>/<file_path>`), the fake model and a fake
//! OpenAI-compatible transcription endpoint. A voice note is transcribed,
//! answered, stored with its marker and recalled ten turns later; a photo
//! reaches the model (OpenAI and Anthropic shapes) as an image part with
//! its caption, in that turn only and only for its sender; without
//! `transcription` or `model.vision` the sender is told; each bad file
//! (too large, not an image, a stalled or failed download, a failed or
//! slow transcription) gets a short reply while the caption is answered.

use super::{ADA, Mnemo, stm_records, text_message, texts, user};
use mnemo_sessions::Role;
use mnemo_testkit::model::{last_user_message, request_images};
use mnemo_testkit::telegram::FakeBotApi;
use mnemo_testkit::transcription::FakeTranscriber;
use serde_json::{Value, json};
use support::FakeModel;

use super::support;

const BOB: i64 = 43;
const WHISPER_KEY: &str = "sk-whisper-test";
/// A JPEG as far as its bytes go (what Telegram serves for photos).
const JPEG: &[u8] = &[
    0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0, 1, 2, 3, 4, 5,
];

/// A message from `from` in their private chat carrying `field` (`voice`,
/// `photo`, …) and, if given, a caption.
fn media(from: i64, field: &str, value: Value, caption: Option<&str>) -> Value {
    let mut m = text_message(from, user(from, "Someone"), "");
    m.as_object_mut().unwrap().remove("text");
    m[field] = value;
    if let Some(caption) = caption {
        m["caption"] = json!(caption);
    }
    m
}

fn voice(file_id: &str, secs: u32) -> Value {
    json!({ "file_id": file_id, "file_unique_id": format!("u-{file_id}"), "duration": secs, "mime_type": "audio/ogg" })
}

/// A photo in three sizes, the largest `file_id`.
fn photo(file_id: &str, declared: Option<u64>) -> Value {
    let mut large = json!({ "file_id": file_id, "file_unique_id": "u-large", "width": 1280, "height": 960 });
    if let Some(size) = declared {
        large["file_size"] = json!(size);
    }
    json!([
        { "file_id": "thumb-s", "file_unique_id": "u-s", "width": 90, "height": 67 },
        large,
        { "file_id": "thumb-m", "file_unique_id": "u-m", "width": 320, "height": 240 },
    ])
}

fn transcription(url: &str, timeout_secs: u64) -> Value {
    json!({ "provider": "openai", "baseUrl": url, "apiKeyEnv": "WHISPER_KEY", "model": "whisper-1", "timeoutSecs": timeout_secs })
}

fn start(api: &FakeBotApi, model_url: &str, extra: Value) -> Mnemo {
    Mnemo::launch(
        api,
        model_url,
        json!({}),
        extra,
        json!({}),
        &[("WHISPER_KEY", WHISPER_KEY.to_string())],
    )
}

fn openai_model(url: &str, vision: bool) -> Value {
    json!({ "provider": "openai", "baseUrl": url, "apiKeyEnv": "MNEMO_TEST_KEY", "model": "fake-1",
            "timeoutSecs": 10, "maxRetries": 0, "vision": vision })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_is_transcribed_answered_stored_and_recalled_ten_turns_later() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let whisper = FakeTranscriber::start(Some(WHISPER_KEY)).await;
    let audio = b"OggS\0\x02fake-opus-locker-code".to_vec();
    whisper.speak(&audio, "My locker code is 4471.");
    api.add_file("VOICE-1", "voice/file_7.oga", audio.clone(), "audio/ogg");
    let mnemo = start(
        &api,
        &model_url,
        json!({ "transcription": transcription(&whisper.url, 5), "limits": { "userMessagesPerMinute": 0 } }),
    );

    api.push_message(media(ADA, "voice", voice("VOICE-1", 4), None));
    api.wait_for_calls("sendMessage", 1).await;
    assert_eq!(
        texts(&api.calls("sendMessage")),
        ["echo: [voice 0:04] My locker code is 4471."]
    );
    let heard = whisper.heard();
    assert_eq!(heard.len(), 1);
    assert_eq!(
        (
            heard[0].model.as_str(),
            heard[0].file_name.as_str(),
            heard[0].content_type.as_deref()
        ),
        ("whisper-1", "voice.ogg", Some("audio/ogg"))
    );
    assert_eq!(heard[0].bytes, audio);
    assert_eq!(api.calls("getFile")[0].params["file_id"], "VOICE-1");

    for i in 0..10 {
        api.push_message(text_message(
            ADA,
            user(ADA, "Ada"),
            &format!("filler {i}: the weather was mild today"),
        ));
        api.wait_for_calls("sendMessage", i + 2).await;
    }
    api.push_message(text_message(ADA, user(ADA, "Ada"), "what is my locker code?"));
    api.wait_for_calls("sendMessage", 12).await;
    let asked = model.chat_requests().pop().unwrap();
    assert_eq!(last_user_message(&asked), "what is my locker code?");
    let context = asked.to_string();
    assert!(
        context.contains("[voice 0:04] My locker code is 4471."),
        "the transcript is recalled ten turns later: {context}"
    );

    let records = stm_records(&mnemo.state(), ADA);
    assert_eq!(records[0].role, Role::User);
    assert_eq!(records[0].text, "[voice 0:04] My locker code is 4471.");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_reaches_the_model_as_an_image_part_with_its_caption_in_that_turn_only_and_for_its_sender_only() {
    for provider in ["openai", "anthropic"] {
        let (model, model_url) = FakeModel::start().await;
        let api = FakeBotApi::start().await;
        api.add_file("PHOTO-L", "photos/file_3.jpg", JPEG.to_vec(), "image/jpeg");
        let chat = match provider {
            "openai" => openai_model(&model_url, true),
            _ => json!({ "provider": "anthropic", "baseUrl": model_url.trim_end_matches("/v1"),
                          "apiKeyEnv": "MNEMO_TEST_KEY", "model": "fake-1", "timeoutSecs": 10,
                          "maxRetries": 0, "vision": true }),
        };
        let mnemo = start(&api, &model_url, json!({ "model": chat }));

        api.push_message(media(
            ADA,
            "photo",
            photo("PHOTO-L", Some(JPEG.len() as u64)),
            Some("what is this?"),
        ));
        api.push_message(text_message(BOB, user(BOB, "Bob"), "hello from bob"));
        api.wait_for_calls("sendMessage", 2).await;
        let replies = texts(&api.calls("sendMessage"));
        assert!(
            replies.contains(&"echo: [photo] what is this?".to_string()),
            "{provider}: {replies:?}"
        );
        assert!(
            replies.contains(&"echo: hello from bob".to_string()),
            "{provider}: {replies:?}"
        );
        assert_eq!(api.calls("getFile").len(), 1, "only the largest size is fetched");
        assert_eq!(api.calls("getFile")[0].params["file_id"], "PHOTO-L");

        let requests = model.chat_requests();
        let ada = requests
            .iter()
            .find(|r| last_user_message(r) == "[photo] what is this?")
            .unwrap_or_else(|| panic!("{provider}: Ada's request: {requests:?}"));
        assert_eq!(
            request_images(ada).unwrap(),
            [("image/jpeg".to_string(), JPEG.to_vec())]
        );
        let last = ada["messages"].as_array().unwrap().last().unwrap();
        let shape: Vec<&str> = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        match provider {
            "openai" => assert_eq!(shape, ["text", "image_url"]),
            _ => assert_eq!(shape, ["image", "text"]),
        }
        let bob = requests
            .iter()
            .find(|r| last_user_message(r) == "hello from bob")
            .unwrap();
        assert!(
            request_images(bob).unwrap().is_empty(),
            "{provider}: Ada's photo reached Bob's call"
        );
        assert!(!bob.to_string().contains("[photo]"));

        api.push_message(text_message(ADA, user(ADA, "Ada"), "and what colour was it?"));
        api.wait_for_calls("sendMessage", 3).await;
        let next = model.chat_requests().pop().unwrap();
        assert!(
            request_images(&next).unwrap().is_empty(),
            "{provider}: the photo went to a later turn"
        );
        assert!(
            next.to_string().contains("[photo] what is this?"),
            "the caption and marker are memory"
        );

        let stored: Vec<String> = stm_records(&mnemo.state(), ADA).into_iter().map(|r| r.text).collect();
        assert_eq!(stored[0], "[photo] what is this?");
        let folder = std::fs::read_to_string(support_messages(&mnemo, ADA)).unwrap();
        assert!(!folder.contains("/9j/"), "{provider}: the image itself is not stored");
        mnemo.stop(&api).await;
    }
}

fn support_messages(mnemo: &Mnemo, user: i64) -> std::path::PathBuf {
    mnemo_sessions::Layout::new(mnemo.state(), "telegram")
        .messages_path(&mnemo_sessions::SafeName::of(&user.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_transcription_or_vision_the_sender_is_told_and_the_bot_goes_on() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    api.add_file("VOICE-2", "voice/file_8.oga", b"OggS-anything".to_vec(), "audio/ogg");
    api.add_file("PHOTO-2", "photos/file_9.jpg", JPEG.to_vec(), "image/jpeg");
    let mnemo = start(&api, &model_url, json!({}));

    api.push_message(media(ADA, "voice", voice("VOICE-2", 9), None));
    api.wait_for_calls("sendMessage", 1).await;
    api.push_message(media(ADA, "photo", photo("PHOTO-2", None), Some("what is this?")));
    api.wait_for_calls("sendMessage", 3).await;
    api.push_message(text_message(ADA, user(ADA, "Ada"), "still there?"));
    api.wait_for_calls("sendMessage", 4).await;
    assert_eq!(
        texts(&api.calls("sendMessage")),
        [
            mnemo::pipeline::VOICE_NOT_SET_UP,
            mnemo::pipeline::NO_VISION,
            "echo: what is this?",
            "echo: still there?"
        ]
    );
    assert!(
        api.calls("getFile").is_empty(),
        "nothing is downloaded that cannot be used"
    );
    assert!(
        model
            .chat_requests()
            .iter()
            .all(|r| request_images(r).unwrap().is_empty())
    );
    let stored: Vec<String> = stm_records(&mnemo.state(), ADA)
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text)
        .collect();
    assert_eq!(
        stored,
        ["what is this?", "still there?"],
        "a voice note with no words is not stored"
    );
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_file_gets_a_short_reply_and_its_caption_is_still_answered() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let whisper = FakeTranscriber::start(Some(WHISPER_KEY)).await;
    api.add_file("BIG", "photos/big.jpg", JPEG.repeat(100), "image/jpeg");
    api.add_file(
        "PDF",
        "photos/not.jpg",
        b"%PDF-1.7 not a picture".to_vec(),
        "image/jpeg",
    );
    api.add_stalling_file("SLOW", "photos/slow.jpg");
    api.add_file("V-FAIL", "voice/fail.oga", b"OggS-fails".to_vec(), "audio/ogg");
    api.add_file("V-SLOW", "voice/slow.oga", b"OggS-slow".to_vec(), "audio/ogg");
    let mnemo = start(
        &api,
        &model_url,
        json!({
            "model": openai_model(&model_url, true),
            "transcription": transcription(&whisper.url, 1),
            "limits": { "maxAttachmentBytes": 1000, "attachmentStallSecs": 1 },
        }),
    );
    let too_large = "Your photo is too large for me (the limit is 1000 bytes), so I didn't take it.";
    let cases: Vec<(Value, &str)> = vec![
        (media(ADA, "photo", photo("BIG", Some(1600)), Some("one")), too_large),
        (media(ADA, "photo", photo("BIG", None), Some("two")), too_large),
        (
            media(ADA, "photo", photo("PDF", None), Some("three")),
            mnemo::pipeline::NOT_AN_IMAGE,
        ),
        (
            media(ADA, "photo", photo("SLOW", None), Some("four")),
            "Downloading your photo stalled, so I didn't take it. Please send it again.",
        ),
        (
            media(ADA, "photo", photo("GONE", None), Some("five")),
            "I couldn't download your photo, so I didn't take it. Please send it again.",
        ),
        (
            media(ADA, "voice", voice("V-FAIL", 3), Some("six")),
            "I couldn't transcribe your voice message just now (the transcription service refused it). Please try again, or type it.",
        ),
        (
            media(ADA, "voice", voice("V-SLOW", 3), Some("seven")),
            "I couldn't transcribe your voice message just now (the transcription service took too long). Please try again, or type it.",
        ),
    ];
    for (i, (message, note)) in cases.into_iter().enumerate() {
        match i {
            5 => whisper.fail_with(Some(500)),
            6 => {
                whisper.fail_with(None);
                whisper.set_delay(std::time::Duration::from_secs(3));
            }
            _ => {}
        }
        let caption = message["caption"].as_str().unwrap().to_string();
        api.push_message(message);
        api.wait_for_calls("sendMessage", 2 * (i + 1)).await;
        let sent = texts(&api.calls("sendMessage"));
        assert_eq!(
            sent[2 * i..],
            [note.to_string(), format!("echo: {caption}")],
            "case {i}"
        );
    }
    let stored: Vec<String> = stm_records(&mnemo.state(), ADA)
        .into_iter()
        .filter(|r| r.role == Role::User)
        .map(|r| r.text)
        .collect();
    assert_eq!(stored, ["one", "two", "three", "four", "five", "six", "seven"]);
    mnemo.stop(&api).await;
}
