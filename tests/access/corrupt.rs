//! A corrupt access.json: moved aside as `access.json.corrupt-<ts>`, the
//! operator warned at error level, and the channel on the most restrictive
//! rules — strangers get nothing, the last good allowFrom keeps talking —
//! until a valid file is written. Never `open`.

use crate::harness::{Broker, capture_logs, dm, logs};
use mnemo::config::LimitsConfig;
use serde_json::json;

const BROKEN: &str = r#"{"dmPolicy": "open", "allowFrom": ["kim", "#;

fn quarantined(b: &Broker) -> Vec<std::path::PathBuf> {
    let dir = b.access_path().parent().unwrap().to_path_buf();
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("access.json.corrupt-")
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn a_corrupt_file_is_quarantined_and_only_the_last_good_allow_from_may_talk() {
    capture_logs();
    let b = Broker::start(LimitsConfig::default()).await;
    b.write_access(json!({ "dmPolicy": "open", "allowFrom": ["kim"], "groups": { "team": {} } }));
    assert_eq!(b.say(dm("kim", "1", "hi")).await, ["echo: hi"]);
    assert_eq!(
        b.say(dm("lou", "1", "hi")).await,
        ["echo: hi"],
        "open, while the file is good"
    );

    std::fs::write(b.access_path(), BROKEN).unwrap();
    assert_eq!(
        b.say(dm("kim", "2", "still there?")).await,
        ["echo: still there?"],
        "last good allowFrom"
    );
    assert!(
        b.say(dm("lou", "2", "and me?")).await.is_empty(),
        "not open any more: strangers are refused"
    );
    assert!(
        b.say(dm("max", "1", "new here")).await.is_empty(),
        "no pairing codes either"
    );
    let team = crate::harness::group("team", "lou", "3", "hey bot", true);
    assert!(b.say(team).await.is_empty(), "no groups");

    let moved = quarantined(&b);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(
        std::fs::read_to_string(&moved[0]).unwrap(),
        BROKEN,
        "kept for the operator"
    );
    assert!(!b.access_path().exists());
    let warning = logs()
        .lines()
        .find(|l| {
            l.contains("\"level\":\"ERROR\"")
                && l.contains("access.json is corrupt")
                && l.contains(&*moved[0].to_string_lossy())
        })
        .map(str::to_string);
    assert!(
        warning.is_some(),
        "the operator is warned at error level, naming the quarantined file"
    );

    let (ok, listing) = b.cli(&["list", "fake"]);
    assert!(ok && listing.contains("moved aside"), "{listing}");

    // A valid file written by the operator ends the fallback.
    let (ok, out) = b.cli(&["policy", "fake", "open"]);
    assert!(
        ok && out.contains("corrupt"),
        "the operator is told the old file was moved: {out}"
    );
    assert_eq!(b.say(dm("lou", "4", "back?")).await, ["echo: back?"]);
    assert!(b.stm("lou").iter().all(|r| r.text != "and me?" && r.text != "hey bot"));
}

#[tokio::test]
async fn a_quarantined_file_stays_restrictive_after_a_restart_until_the_operator_fixes_it() {
    let mut b = Broker::start(LimitsConfig::default()).await;
    b.write_access(json!({ "dmPolicy": "allowlist", "allowFrom": ["kim"] }));
    std::fs::write(b.access_path(), BROKEN).unwrap();
    assert!(b.say(dm("max", "1", "hi")).await.is_empty());
    assert_eq!(quarantined(&b).len(), 1);

    b.restart();
    assert!(
        b.say(dm("max", "2", "hi again")).await.is_empty(),
        "no pairing code after a restart"
    );
    assert!(
        b.say(dm("kim", "1", "hi")).await.is_empty(),
        "nobody's allowFrom is known any more"
    );
    assert!(
        !b.access_path().exists(),
        "no fresh pairing-mode access.json over the operator's rules"
    );
    assert!(b.model.chat_requests().is_empty());
    let (ok, listing) = b.cli(&["list", "fake"]);
    assert!(
        ok && listing.contains("restrictive") && listing.contains("corrupt"),
        "{listing}"
    );

    let (ok, _) = b.cli(&["allow", "fake", "kim"]);
    assert!(ok);
    assert_eq!(
        b.say(dm("kim", "2", "back?")).await,
        ["echo: back?"],
        "a valid file ends it"
    );
}

#[tokio::test]
async fn a_file_corrupt_at_start_admits_only_the_console() {
    let b = Broker::start(LimitsConfig::default()).await;
    std::fs::create_dir_all(b.access_path().parent().unwrap()).unwrap();
    std::fs::write(b.access_path(), r#"{"dmPolicy": "open",,}"#).unwrap();
    assert!(b.say(dm("kim", "1", "hi")).await.is_empty());
    assert!(b.model.chat_requests().is_empty());
    assert_eq!(quarantined(&b).len(), 1);
    let (ok, _) = b.cli(&["list", "fake"]);
    assert!(ok, "list still works, with a warning");
}

#[tokio::test]
async fn the_cli_never_overwrites_a_corrupt_file() {
    let b = Broker::start(LimitsConfig::default()).await;
    std::fs::create_dir_all(b.access_path().parent().unwrap()).unwrap();
    std::fs::write(b.access_path(), BROKEN).unwrap();
    let (ok, out) = b.cli(&["allow", "fake", "kim"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("access.json") && out.contains("allowFrom"),
        "names the file and the field: {out}"
    );
    assert_eq!(std::fs::read_to_string(b.access_path()).unwrap(), BROKEN);
    let (ok, out) = b.cli(&["list", "fake"]);
    assert!(!ok && out.contains("refuses strangers"), "{out}");
}
