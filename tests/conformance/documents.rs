//! Documents on the seam: a document the user sent is kept once (the same
//! file again changes nothing), listed, counted by `/session status`,
//! found by recall and search by its content with its name and page,
//! exported as the files hold it, forgotten by id, deleted by `clear
//! all`, and never reaches another user; so does a file kept as it was
//! sent (`attachments.keep`), its bytes exported unchanged.

use super::specs;
use super::subject::{Subject, at};
use mnemo_sessions::documents::{DocKind, Document, DocumentMeta, id_of, page_mark};
use mnemo_sessions::kept::{KeptFile, KeptMeta};

specs![
    a_document_is_recalled_and_searched_by_its_content_with_its_page,
    the_same_file_is_kept_once_and_shown_by_status_and_documents,
    forget_by_id_removes_the_document_and_what_recall_found_in_it,
    export_holds_the_document_and_clear_all_deletes_it,
    another_user_never_finds_the_document,
    a_kept_file_is_listed_exported_forgotten_and_never_anothers,
];

/// A two-page lease whose second page holds the deposit.
fn lease() -> Document {
    let text = format!(
        "{}\nThe tenant pays the rent on the first day of each month.\n\n{}\nThe security deposit is 1800 euros, \
         returned within thirty days of the end of the tenancy.\n",
        page_mark(1),
        page_mark(2)
    );
    Document {
        meta: DocumentMeta {
            id: id_of(b"the lease's bytes"),
            name: "lease.pdf".into(),
            kind: DocKind::Pdf,
            pages: Some(2),
            added: at(5),
            bytes: 48_213,
            chars: text.chars().count(),
        },
        text,
    }
}

async fn a_document_is_recalled_and_searched_by_its_content_with_its_page(s: Subject) {
    s.chat("ada", 0, 4, "we talked about lunch").await;
    let mut ada = s.user("ada").await;
    assert!(ada.add_document(&lease()).await.unwrap());
    let recalled = ada
        .recall("how much was the security deposit?", &[], 500)
        .await
        .unwrap();
    let shown: Vec<String> = recalled.items.iter().map(|i| i.line()).collect();
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("[document lease.pdf, p. 2, sent ") && l.contains("1800 euros")),
        "{shown:?}"
    );
    let found = ada.search("deposit", 10).await.unwrap();
    assert!(found.iter().any(|i| i.line().contains("1800 euros")), "{found:?}");
}

async fn the_same_file_is_kept_once_and_shown_by_status_and_documents(s: Subject) {
    let mut ada = s.user("ada").await;
    assert!(ada.add_document(&lease()).await.unwrap());
    let mut again = lease();
    again.meta.added = at(50);
    assert!(
        !ada.add_document(&again).await.unwrap(),
        "the same file twice is one document"
    );
    let listed = ada.documents().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].added, at(5), "the first stays as it was");
    drop(ada);
    let status = s.say("ada", "status").await.text;
    assert!(status.contains("1 document (see /session documents)"), "{status}");
    let list = s.say("ada", "documents").await.text;
    let id = &lease().meta.id;
    assert!(list.contains("lease.pdf (pdf, 2 pages, sent 2026-11-30"), "{list}");
    assert!(list.contains(&format!("id {id}")), "{list}");
}

async fn forget_by_id_removes_the_document_and_what_recall_found_in_it(s: Subject) {
    let mut ada = s.user("ada").await;
    ada.add_document(&lease()).await.unwrap();
    drop(ada);
    for hostile in ["../../etc", "000000000000", "lease.pdf"] {
        let reply = s.say("ada", &format!("forget {hostile}")).await.text;
        assert!(!reply.contains("Forgot the document"), "{hostile}: {reply}");
    }
    assert_eq!(s.user("ada").await.documents().await.unwrap().len(), 1);
    let reply = s.say("ada", &format!("forget {}", lease().meta.id)).await.text;
    assert_eq!(reply, "Forgot the document lease.pdf and everything I took from it.");
    let mut ada = s.user("ada").await;
    assert!(ada.documents().await.unwrap().is_empty());
    let recalled = ada.recall("security deposit", &[], 500).await.unwrap();
    assert!(
        recalled.items.iter().all(|i| !i.text.contains("1800")),
        "{:?}",
        recalled.items
    );
    assert!(ada.search("deposit", 10).await.unwrap().is_empty());
}

async fn export_holds_the_document_and_clear_all_deletes_it(s: Subject) {
    let mut ada = s.user("ada").await;
    ada.add_document(&lease()).await.unwrap();
    drop(ada);
    let bundle = s.say("ada", "export").await.export.unwrap();
    let files = super::lifecycle::unpack(&bundle);
    let id = lease().meta.id;
    let (_, text) = files
        .iter()
        .find(|(name, _)| name.ends_with(&format!("ltm/documents/ada/{id}.md")))
        .unwrap_or_else(|| panic!("{:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>()));
    assert!(
        text.contains("name: lease.pdf") && text.contains("1800 euros"),
        "{text}"
    );
    let preview = s.say("ada", "clear all").await.text;
    assert!(!preview.contains(" 0 "), "{preview}");
    s.say("ada", "clear all confirm").await;
    let mut ada = s.user("ada").await;
    assert!(ada.documents().await.unwrap().is_empty());
    assert!(ada.search("deposit", 10).await.unwrap().is_empty());
}

async fn another_user_never_finds_the_document(s: Subject) {
    s.user("ada").await.add_document(&lease()).await.unwrap();
    s.chat("bob", 0, 2, "bob talks about deposits at the bank").await;
    let mut bob = s.user("bob").await;
    assert!(bob.documents().await.unwrap().is_empty());
    let recalled = bob.recall("what was the security deposit?", &[], 500).await.unwrap();
    assert!(
        recalled.items.iter().all(|i| !i.line().contains("lease")),
        "{:?}",
        recalled.items
    );
    let found = bob.search("deposit euros", 10).await.unwrap();
    assert!(found.iter().all(|i| !i.line().contains("1800")), "{found:?}");
    drop(bob);
    assert!(
        s.say("bob", "documents")
            .await
            .text
            .starts_with("You have sent me no documents")
    );
    let reply = s.say("bob", &format!("forget {}", lease().meta.id)).await.text;
    assert!(!reply.contains("Forgot the document"), "{reply}");
    assert_eq!(s.user("ada").await.documents().await.unwrap().len(), 1);
}

fn photo() -> KeptFile {
    let data = b"\xff\xd8\xff\xe0 a photo of the lease's signature page \x00\x01\xfe".to_vec();
    KeptFile {
        meta: KeptMeta {
            id: id_of(&data),
            name: "photo".into(),
            kind: "photo".into(),
            mime: Some("image/jpeg".into()),
            bytes: data.len() as u64,
            added: at(7),
        },
        data,
    }
}

async fn a_kept_file_is_listed_exported_forgotten_and_never_anothers(s: Subject) {
    let file = photo();
    let mut ada = s.user("ada").await;
    assert!(ada.keep_file(&file).await.unwrap());
    assert!(!ada.keep_file(&file).await.unwrap(), "the same file twice is kept once");
    assert_eq!(ada.kept_files().await.unwrap(), vec![file.meta.clone()]);
    drop(ada);
    let status = s.say("ada", "status").await.text;
    assert!(status.contains("1 file you sent, kept as it was"), "{status}");
    let list = s.say("ada", "documents").await.text;
    assert!(
        list.contains("photo (photo, ") && list.contains(&format!("id {}", file.meta.id)),
        "{list}"
    );
    assert!(s.user("bob").await.kept_files().await.unwrap().is_empty());
    let reply = s.say("bob", &format!("forget {}", file.meta.id)).await.text;
    assert!(!reply.starts_with("Deleted"), "{reply}");

    let bundle = s.say("ada", "export").await.export.unwrap();
    let raw = super::lifecycle::unpack_bytes(&bundle);
    let (_, data) = raw
        .iter()
        .find(|(name, _)| name.ends_with(&format!("ltm/attachments/ada/{}.bin", file.meta.id)))
        .unwrap_or_else(|| panic!("{:?}", raw.iter().map(|f| &f.0).collect::<Vec<_>>()));
    assert_eq!(data, &file.data, "the bytes as they were sent");

    let reply = s.say("ada", &format!("forget {}", file.meta.id)).await.text;
    assert_eq!(reply, "Deleted the photo you sent (photo).");
    assert!(s.user("ada").await.kept_files().await.unwrap().is_empty());
    s.user("ada").await.keep_file(&file).await.unwrap();
    s.say("ada", "clear all confirm").await;
    assert!(s.user("ada").await.kept_files().await.unwrap().is_empty());
}
