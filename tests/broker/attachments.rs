//! The console's `/attach PATH [words]`, end to end through `mnemo chat` on
//! a pipe: a picture goes to a vision model with the words, a document
//! is kept and stands in the message as its marker, a missing file is told plainly, and
//! every line is answered.

use super::chat;
use crate::support;
use serde_json::json;
use support::{FakeModel, write_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_sends_a_picture_with_its_words_and_says_what_it_could_not_take() {
    let (model, url) = FakeModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &url, json!({ "vision": true }));
    let picture = dir.path().join("my cat.png");
    std::fs::write(&picture, b"\x89PNG\r\n\x1a\n-console-picture").unwrap();
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "# shopping\n- milk\n").unwrap();
    let input = format!(
        "/attach \"{}\" what is this?\n/attach {} keep these\n/attach {}/missing.jpg and this?\n",
        picture.display(),
        notes.display(),
        dir.path().display()
    );
    let (c, h) = (config.clone(), dir.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || chat(&c, &h, &input)).await.unwrap();
    assert!(out.contains("echo: [photo] what is this?"), "{out}");
    assert!(out.contains("echo: [document notes.md] keep these"), "{out}");
    assert!(out.contains("I couldn't download your photo"), "{out}");
    assert!(out.contains("echo: and this?"), "{out}");
    let first = model
        .chat_requests()
        .into_iter()
        .find(|r| support::last_user_message(r) == "[photo] what is this?")
        .expect("the picture's request");
    let images = mnemo_testkit::model::request_images(&first).unwrap();
    assert_eq!(
        images,
        [("image/png".to_string(), b"\x89PNG\r\n\x1a\n-console-picture".to_vec())]
    );
}
