//! PDFs made for tests and benches (with `lopdf`, through `pdf-extract`'s
//! re-export, the very parser the broker reads them with): pages of text
//! in a standard font, compressed as writers do, and the same locked with
//! a password.
#![allow(clippy::unwrap_used, reason = "test fixtures: a failure should stop the test loudly")]

use pdf_extract::{
    Document, EncryptionState, EncryptionVersion, Object, Permissions, Stream, StringFormat, dictionary,
};

/// A PDF with one page per entry of `pages`, each showing its lines in
/// Helvetica (no text at all for an empty entry: a scan has none).
pub fn pdf(pages: &[&[&str]]) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
    });
    let resources = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font } });
    let mut kids = Vec::new();
    for lines in pages {
        let mut ops = String::new();
        for (i, line) in lines.iter().enumerate() {
            let escaped = line.replace('\\', "\\\\").replace('(', "\\(").replace(')', "\\)");
            ops.push_str(&format!("BT /F1 12 Tf 72 {} Td ({escaped}) Tj ET\n", 760 - 16 * i));
        }
        let content = doc.add_object(Stream::new(dictionary! {}, ops.into_bytes()));
        kids.push(Object::Reference(doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content,
        })));
    }
    let count = i64::try_from(kids.len()).unwrap();
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog);
    doc.compress();
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

/// `bytes` (a PDF) locked with RC4: opening needs `user_password`.
pub fn locked(bytes: &[u8], user_password: &str) -> Vec<u8> {
    let mut doc = Document::load_mem(bytes).unwrap();
    let id = Object::String(b"0123456789abcdef".to_vec(), StringFormat::Hexadecimal);
    doc.trailer.set("ID", Object::Array(vec![id.clone(), id]));
    let version = EncryptionVersion::V2 {
        document: &doc,
        owner_password: "the owner's",
        user_password,
        key_length: 128,
        permissions: Permissions::default(),
    };
    let state = EncryptionState::try_from(version).unwrap();
    doc.encrypt(&state).unwrap();
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}
