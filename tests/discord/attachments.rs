//! A voice message over Discord, end to end: the real binary on the fake
//! gateway, the fake CDN serving the attachment at its signed URL (no
//! token; an unsigned URL is refused, as the CDN does), and a fake
//! transcription server on this machine (so no key is needed). The
//! transcript, behind its marker, is answered and stored.

use super::{ALICE, DM_CHANNEL, TOKEN, config, fixture, mnemo_run, stm, stop};
use mnemo_sessions::Role;
use mnemo_testkit::discord::FakeDiscord;
use mnemo_testkit::transcription::FakeTranscriber;
use serde_json::{Value, json};
use support::FakeModel;

use super::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_message_is_fetched_from_the_cdn_transcribed_answered_and_stored() {
    let (model, model_url) = FakeModel::start().await;
    let discord = FakeDiscord::start().await;
    let whisper = FakeTranscriber::start(None).await;
    let audio = b"OggS\0discord-voice".to_vec();
    whisper.speak(&audio, "Pick up milk on the way home.");
    let url = discord.add_attachment(
        DM_CHANNEL,
        "1400000000000000001",
        "voice-message.ogg",
        audio.clone(),
        "audio/ogg",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &model_url, &discord);
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["transcription"] =
        json!({ "provider": "openai", "baseUrl": whisper.url, "apiKeyEnv": "WHISPER_KEY", "model": "whisper-1" });
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let child = mnemo_run(&path, dir.path(), Some(TOKEN));
    discord.identify().await;

    let mut voice = fixture("dm.json");
    voice["id"] = json!("1300000000000000077");
    voice["content"] = json!("");
    voice["flags"] = json!(8192);
    voice["attachments"] = json!([{
        "id": "1400000000000000001", "filename": "voice-message.ogg", "size": audio.len(),
        "content_type": "audio/ogg", "url": url, "proxy_url": url,
        "duration_secs": 7.2, "waveform": "AAAAAA=="
    }]);
    discord.dispatch("MESSAGE_CREATE", voice);
    let replies = discord.channel_messages(DM_CHANNEL, 1).await;
    assert_eq!(replies[0].content(), "echo: [voice 0:07] Pick up milk on the way home.");
    assert_eq!(discord.cdn_downloads().len(), 1);
    let heard = whisper.heard();
    assert_eq!(
        (heard[0].file_name.as_str(), heard[0].bytes.clone()),
        ("voice-message.ogg", audio)
    );
    assert_eq!(last_user(&model), "[voice 0:07] Pick up milk on the way home.");

    let records = stm(dir.path(), ALICE);
    assert_eq!(records[0].role, Role::User);
    assert_eq!(records[0].text, "[voice 0:07] Pick up milk on the way home.");
    let logs = stop(child, dir.path());
    assert!(!logs.contains("Pick up milk"), "a transcript reached the logs");
}

fn last_user(model: &FakeModel) -> String {
    support::last_user_message(&model.chat_requests().pop().unwrap())
}

#[tokio::test]
async fn the_fake_cdn_refuses_an_unsigned_url() {
    let discord = FakeDiscord::start().await;
    let url = discord.add_attachment("1", "2", "a.png", b"x".to_vec(), "image/png");
    let unsigned = url.split('?').next().unwrap().to_string();
    let client = reqwest::Client::new();
    assert_eq!(client.get(&unsigned).send().await.unwrap().status(), 404);
    let signed = client.get(&url).send().await.unwrap();
    assert_eq!(signed.headers()["content-type"], "image/png");
}
