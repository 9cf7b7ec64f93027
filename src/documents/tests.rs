use super::*;
use mnemo_testkit::pdf::{locked, pdf};
use std::io::Write as _;

const BOUNDS: Bounds = Bounds {
    max_pages: 100,
    max_inflated: Bounds::MAX_INFLATED,
};

#[test]
fn a_pdfs_text_comes_out_page_by_page() {
    let bytes = pdf(&[
        &["Residential lease", "The tenant pays the rent monthly."],
        &["The security deposit is 1800 euros."],
    ]);
    let out = extract("lease.pdf", Some("application/pdf"), &bytes, BOUNDS).unwrap();
    assert_eq!(out.kind, DocKind::Pdf);
    assert_eq!(out.pages, Some(2));
    let pieces = mnemo_sessions::documents::pieces(&out.text);
    let deposit = pieces.iter().find(|(_, p)| p.contains("1800 euros")).unwrap();
    assert_eq!(deposit.0, Some(2), "{:?}", out.text);
    assert!(out.text.contains("tenant pays the rent"), "{:?}", out.text);
}

#[test]
fn a_scan_without_text_is_refused_as_one() {
    let bytes = pdf(&[&[], &[]]);
    assert_eq!(
        extract("scan.pdf", None, &bytes, BOUNDS),
        Err(Refusal::NoText { pdf: true })
    );
}

#[test]
fn more_pages_than_allowed_are_refused_before_reading() {
    let bytes = pdf(&[&["one"], &["two"], &["three"]]);
    let bounds = Bounds { max_pages: 2, ..BOUNDS };
    assert_eq!(
        extract("long.pdf", None, &bytes, bounds),
        Err(Refusal::TooManyPages { pages: 3, max: 2 })
    );
}

#[test]
fn a_damaged_or_mislabelled_pdf_is_refused() {
    assert_eq!(
        extract("x.pdf", None, b"%PDF-1.7\nthis is not a pdf body at all", BOUNDS),
        Err(Refusal::Corrupt)
    );
    let mut cut = pdf(&[&["hello"]]);
    cut.truncate(cut.len() / 3);
    assert!(matches!(
        extract("cut.pdf", None, &cut, BOUNDS),
        Err(Refusal::Corrupt | Refusal::NoText { .. })
    ));
    assert_eq!(
        extract("photo.pdf", None, b"\x89PNG\r\n\x1a\n....", BOUNDS),
        Err(Refusal::Mismatch { claimed: DocKind::Pdf })
    );
}

#[test]
fn streams_that_inflate_past_the_bound_are_refused_before_parsing() {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&vec![b' '; 4 * 1024 * 1024]).unwrap();
    let bomb = z.finish().unwrap();
    let mut bytes = b"%PDF-1.5\n1 0 obj\n<< /Length ".to_vec();
    bytes.extend(format!("{} /Filter /FlateDecode >>\nstream\n", bomb.len()).as_bytes());
    bytes.extend(&bomb);
    bytes.extend(b"\nendstream\nendobj\n%%EOF\n");
    let small = Bounds {
        max_inflated: 1024 * 1024,
        ..BOUNDS
    };
    assert_eq!(extract("bomb.pdf", None, &bytes, small), Err(Refusal::Bomb));
    assert_ne!(
        extract("bomb.pdf", None, &bytes, BOUNDS),
        Err(Refusal::Bomb),
        "under the bound it is parsed"
    );
}

#[test]
fn text_kinds_are_read_and_binary_is_not_text() {
    let md = extract(
        "notes.md",
        None,
        "\u{feff}# Plan\r\nCall Ana on Friday.".as_bytes(),
        BOUNDS,
    )
    .unwrap();
    assert_eq!(
        (md.kind, md.text.as_str()),
        (DocKind::Markdown, "# Plan\nCall Ana on Friday.")
    );
    assert_eq!(
        extract("notes.txt", None, b"\x7fELF\x02\x01\x01\0\0\0", BOUNDS),
        Err(Refusal::Mismatch { claimed: DocKind::Text })
    );
    assert_eq!(
        extract("notes.txt", None, &[0xff, 0xfe, 0x41], BOUNDS),
        Err(Refusal::Mismatch { claimed: DocKind::Text })
    );
    assert_eq!(
        extract("empty.txt", None, b"  \n", BOUNDS),
        Err(Refusal::NoText { pdf: false })
    );
    let huge = "word ".repeat(MAX_TEXT_BYTES / 4);
    assert!(matches!(
        extract("huge.txt", None, huge.as_bytes(), BOUNDS),
        Err(Refusal::TooLong { .. })
    ));
}

#[test]
fn csv_rows_and_json_values_say_what_their_numbers_are() {
    let csv = extract(
        "bills.csv",
        None,
        b"item,amount,due\nrent,950,2026-12-01\npower,81.20,2026-12-14\n",
        BOUNDS,
    )
    .unwrap();
    assert_eq!(
        csv.text,
        "item: rent; amount: 950; due: 2026-12-01\n\nitem: power; amount: 81.20; due: 2026-12-14\n\n"
    );
    let json = extract(
        "lease.json",
        None,
        br#"{"lease": {"deposit": 1800, "pets": false}, "rooms": ["kitchen", "bath"]}"#,
        BOUNDS,
    )
    .unwrap();
    assert!(
        json.text.contains("lease.deposit: 1800\nlease.pets: false\n"),
        "{}",
        json.text
    );
    assert!(json.text.contains("rooms[1]: bath"), "{}", json.text);
    assert_eq!(
        extract("broken.json", None, b"{\"a\": ", BOUNDS),
        Err(Refusal::Mismatch { claimed: DocKind::Json })
    );
}

#[test]
fn kinds_come_from_the_name_then_the_type_and_others_are_named_in_the_refusal() {
    assert_eq!(claimed_kind("REPORT.PDF", None), Ok(DocKind::Pdf));
    assert_eq!(
        claimed_kind("no-extension", Some("text/csv; charset=utf-8")),
        Ok(DocKind::Csv)
    );
    let refusal = claimed_kind("letter.docx", Some("application/vnd.openxmlformats")).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "I can't read .docx files. I read plain text, Markdown, CSV, JSON and PDF documents."
    );
    assert!(claimed_kind("a/../../b", None).is_err());
}

#[test]
fn a_pdf_locked_with_a_password_is_refused_and_one_locked_only_for_editing_is_read() {
    let plain = pdf(&[&["The security deposit is 1800 euros."]]);
    assert_eq!(
        extract("locked.pdf", None, &locked(&plain, "open sesame"), BOUNDS),
        Err(Refusal::Encrypted)
    );
    let readable = extract("owner-only.pdf", None, &locked(&plain, ""), BOUNDS).unwrap();
    assert!(readable.text.contains("1800 euros"), "{:?}", readable.text);
}
