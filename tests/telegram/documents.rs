//! Documents over Telegram, end to end: the real binary, the fake Bot API
//! serving the files as Telegram does (`getFile`, then
//! `/file/bot<token>/<file_path>`), and the fake model. A Markdown file's
//! and a PDF's text are kept as the sender's documents and recalled by
//! questions asked ten turns later — never by another user's — and each
//! document that cannot be read (a scan, a kind not read, a file that is
//! not what it says) gets a short reply while its caption is answered.

use super::{ADA, Mnemo, text_message, texts, user};
use mnemo_testkit::model::last_user_message;
use mnemo_testkit::telegram::FakeBotApi;
use serde_json::{Value, json};
use support::FakeModel;

use super::support;

const BOB: i64 = 43;

/// A message from `from` in their private chat carrying the file
/// `file_id` as a document named `name`.
fn document(from: i64, file_id: &str, name: &str, mime: &str, size: usize, caption: Option<&str>) -> Value {
    let mut m = text_message(from, user(from, "Someone"), "");
    m.as_object_mut().unwrap().remove("text");
    m["document"] = json!({ "file_id": file_id, "file_unique_id": format!("u-{file_id}"), "file_name": name,
                            "mime_type": mime, "file_size": size });
    if let Some(caption) = caption {
        m["caption"] = json!(caption);
    }
    m
}

fn start(api: &FakeBotApi, model_url: &str) -> Mnemo {
    Mnemo::launch(
        api,
        model_url,
        json!({}),
        json!({ "limits": { "userMessagesPerMinute": 0 } }),
        json!({}),
        &[],
    )
}

/// What the model was asked last, whole.
async fn ask(api: &FakeBotApi, model: &FakeModel, from: i64, text: &str, replies: usize) -> String {
    api.push_message(text_message(from, user(from, "Someone"), text));
    api.wait_for_calls("sendMessage", replies).await;
    let asked = model.chat_requests().pop().unwrap();
    assert_eq!(last_user_message(&asked), text);
    asked.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_markdown_file_and_a_pdf_are_recalled_by_later_questions_and_by_their_sender_only() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let list =
        b"# Trip to the Dolomites\n\n- Pack the blue raincoat and the hiking boots.\n- Book the hut at Tuckett.\n";
    api.add_file("DOC-MD", "documents/file_1.md", list.to_vec(), "text/markdown");
    let lease = mnemo_testkit::pdf::pdf(&[
        &[
            "Residential lease",
            "The tenant pays the rent on the first day of each month.",
        ],
        &["The security deposit is 1800 euros, returned within thirty days."],
    ]);
    api.add_file("DOC-PDF", "documents/file_2.pdf", lease.clone(), "application/pdf");
    let mnemo = start(&api, &model_url);

    api.push_message(document(
        ADA,
        "DOC-MD",
        "packing.md",
        "text/markdown",
        list.len(),
        Some("my list"),
    ));
    api.wait_for_calls("sendMessage", 1).await;
    api.push_message(document(
        ADA,
        "DOC-PDF",
        "lease.pdf",
        "application/pdf",
        lease.len(),
        None,
    ));
    api.wait_for_calls("sendMessage", 2).await;
    assert_eq!(
        texts(&api.calls("sendMessage")),
        [
            "echo: [document packing.md] my list",
            "echo: [document lease.pdf, 2 pages]"
        ]
    );
    for i in 0..10 {
        let filler = format!("filler {i}: the weather was mild today");
        api.push_message(text_message(ADA, user(ADA, "Ada"), &filler));
        api.wait_for_calls("sendMessage", i + 3).await;
    }
    let asked = ask(&api, &model, ADA, "how much is the security deposit?", 13).await;
    assert!(
        asked.contains("[document lease.pdf, p. 2, sent ") && asked.contains("1800 euros"),
        "the PDF's second page is recalled: {asked}"
    );
    let asked = ask(&api, &model, ADA, "what should I pack for the trip?", 14).await;
    assert!(
        asked.contains("blue raincoat"),
        "the Markdown file is recalled: {asked}"
    );

    let asked = ask(&api, &model, BOB, "how much is the security deposit?", 15).await;
    assert!(
        !asked.contains("1800") && !asked.contains("lease"),
        "never another user's: {asked}"
    );

    api.push_message(text_message(ADA, user(ADA, "Ada"), "/session documents"));
    api.wait_for_calls("sendMessage", 16).await;
    let listed = texts(&api.calls("sendMessage")).pop().unwrap();
    assert!(
        listed.contains("packing.md (markdown, sent ") && listed.contains("lease.pdf (pdf, 2 pages, sent "),
        "{listed}"
    );
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_that_cannot_be_read_gets_a_short_reply_and_its_caption_is_answered() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let scan = mnemo_testkit::pdf::pdf(&[&[], &[]]);
    api.add_file("SCAN", "documents/file_3.pdf", scan.clone(), "application/pdf");
    api.add_file(
        "DOCX",
        "documents/file_4.docx",
        b"PK\x03\x04word".to_vec(),
        "application/zip",
    );
    let png = b"\x89PNG\r\n\x1a\nnot a pdf".to_vec();
    api.add_file("FAKE", "documents/file_5.pdf", png.clone(), "application/pdf");
    let mnemo = start(&api, &model_url);
    let cases = [
        (
            "SCAN",
            "scan.pdf",
            "application/pdf",
            scan.len(),
            "it looks like a scan",
        ),
        (
            "DOCX",
            "letter.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            9,
            "I can't read .docx files.",
        ),
        (
            "FAKE",
            "invoice.pdf",
            "application/pdf",
            png.len(),
            "That file says it is a PDF but its contents are not",
        ),
    ];
    let mut sent = 0;
    for (i, (id, name, mime, size, reply)) in cases.iter().enumerate() {
        let caption = format!("caption {i}");
        api.push_message(document(ADA, id, name, mime, *size, Some(&caption)));
        sent += 2;
        api.wait_for_calls("sendMessage", sent).await;
        let said = texts(&api.calls("sendMessage"));
        let turn = &said[sent - 2..];
        assert!(turn.iter().any(|t| t.contains(reply)), "{name}: {turn:?}");
        assert!(turn.contains(&format!("echo: {caption}")), "{name}: {turn:?}");
    }
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_attachments_keep_the_files_themselves_are_kept_privately_and_forgotten_by_id() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let list = b"- Pack the blue raincoat.\n".to_vec();
    api.add_file("DOC-MD", "documents/file_1.md", list.clone(), "text/markdown");
    let mnemo = Mnemo::launch(
        &api,
        &model_url,
        json!({}),
        json!({ "attachments": { "keep": true }, "limits": { "userMessagesPerMinute": 0 } }),
        json!({}),
        &[],
    );
    api.push_message(document(ADA, "DOC-MD", "packing.md", "text/markdown", list.len(), None));
    api.wait_for_calls("sendMessage", 1).await;

    let id = mnemo_sessions::documents::id_of(&list);
    let layout = mnemo_sessions::Layout::new(mnemo.state(), "telegram");
    let ada = mnemo_sessions::SafeName::of(&ADA.to_string());
    let kept = layout.kept_path(&ada, &format!("{id}.bin"));
    assert_eq!(std::fs::read(&kept).unwrap(), list, "the file as it was sent");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&kept).unwrap().permissions());
    assert_eq!(mode & 0o077, 0, "private to the bot's account");

    api.push_message(text_message(ADA, user(ADA, "Ada"), &format!("/session forget {id}")));
    api.wait_for_calls("sendMessage", 2).await;
    assert_eq!(
        texts(&api.calls("sendMessage")).pop().unwrap(),
        "Forgot the document packing.md and everything I took from it, and the file itself."
    );
    assert!(!kept.exists());
    assert!(!layout.document_path(&ada, &id).exists());
    mnemo.stop(&api).await;
}
