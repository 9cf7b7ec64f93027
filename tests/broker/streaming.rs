//! Streaming on the console, end to end: `mnemo chat` on pipes against the
//! fake model streaming SSE. The answer's first words are printed before
//! the model has finished, the rest as it comes, and what is printed is
//! what is stored; a stream cut mid-reply is kept marked as cut and the
//! user is told; `channels.console.streaming: false` asks the model whole.

use super::{chat, stm_records};
use mnemo_sessions::Role;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{FakeModel, eventually, mnemo, write_config};

use super::support;

fn with_console(config: &Path, console: Value) {
    let mut json: Value = serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    json["channels"] = json!({ "console": console });
    std::fs::write(config, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
}

fn stored_answer(state: &Path) -> Option<String> {
    stm_records(state, "console", "ada")
        .into_iter()
        .rev()
        .find(|r| r.role == Role::Assistant)
        .map(|r| r.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_prints_the_answer_as_the_model_writes_it_and_prints_what_is_stored() {
    let (fake, url) = FakeModel::start().await;
    let answer = "Green tea is **grassy**; black tea is malty. Both keep well in a tin.";
    fake.answer_with(Some(answer));
    fake.stream_slowly(12, Duration::from_millis(20));
    fake.hold_streams_after(2);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let mut child = mnemo(&config, dir.path())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"which tea?\n").unwrap();
    let printed = Arc::new(Mutex::new(String::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = printed.clone();
    let reader = std::thread::spawn(move || {
        let mut byte = [0u8; 256];
        while let Ok(n) = stdout.read(&mut byte) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&byte[..n]));
        }
    });

    eventually("the first words printed", async || {
        printed.lock().unwrap().starts_with("Green tea is")
    })
    .await;
    assert_eq!(
        fake.streams_done.load(Ordering::SeqCst),
        0,
        "printed before the model finished"
    );
    assert!(!printed.lock().unwrap().contains("tin."), "not the whole answer yet");
    fake.release_streams();
    eventually("the whole answer printed", async || {
        printed.lock().unwrap().ends_with("tin.\n")
    })
    .await;
    drop(stdin);
    assert!(
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap()
            .success()
    );
    reader.join().unwrap();

    let stored = stored_answer(&dir.path().join("state")).unwrap();
    assert_eq!(stored, answer);
    assert_eq!(
        *printed.lock().unwrap(),
        format!("{stored}\n"),
        "printed once, as stored"
    );
    assert_eq!(fake.chat_requests()[0]["stream"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_answer_cut_mid_stream_is_printed_and_stored_marked_as_cut() {
    let (fake, url) = FakeModel::start().await;
    fake.answer_with(Some("The first half arrives and then the line goes dead."));
    fake.stream_slowly(10, Duration::from_millis(10));
    fake.break_stream_after(Some(2));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    let (c, h) = (config.clone(), dir.path().to_path_buf());

    let out = tokio::task::spawn_blocking(move || chat(&c, &h, "go\n")).await.unwrap();

    let stored = stored_answer(&dir.path().join("state")).unwrap();
    assert_eq!(
        stored,
        format!("The first half arriv{}", mnemo::streaming::CUT_BY_MODEL)
    );
    assert!(out.starts_with(&format!("{stored}\n")), "{out}");
    assert!(out.contains("The model's reply was cut off or unreadable"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_set_not_to_stream_asks_the_model_for_the_whole_answer() {
    let (fake, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({}));
    with_console(&config, json!({ "streaming": false }));
    let (c, h) = (config.clone(), dir.path().to_path_buf());

    let out = tokio::task::spawn_blocking(move || chat(&c, &h, "hello\n"))
        .await
        .unwrap();

    assert_eq!(out, "echo: hello\n");
    assert!(fake.chat_requests()[0].get("stream").is_none(), "asked whole");
}
