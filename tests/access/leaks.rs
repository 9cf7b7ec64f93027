//! What a refused sender wrote appears in no file under the state folder
//! and in no log line: not in STM, not in access.json, not in the logs.

use crate::harness::{Broker, all_files, capture_logs, dm, group, logs};
use mnemo::config::LimitsConfig;
use serde_json::json;

#[tokio::test]
async fn a_refused_senders_text_is_written_nowhere() {
    capture_logs();
    let limits = LimitsConfig {
        user_messages_per_minute: 1,
        user_burst: Some(1),
        max_message_chars: 200,
        ..Default::default()
    };
    let b = Broker::start(limits).await;
    b.write_access(json!({ "dmPolicy": "pairing", "allowFrom": ["ok"], "groups": { "team": {} } }));

    let canaries = [
        "canary-pairing-7f3a",
        "canary-reply-cap-19bd",
        "canary-silenced-c2e0",
        "canary-group-unmentioned-55aa",
        "canary-group-not-opted-in-0d1e",
        "canary-rate-limited-a9c4",
        "canary-too-long-6b71",
    ];
    b.say(dm("stranger", "1", canaries[0])).await;
    b.say(dm("stranger", "2", canaries[1])).await;
    b.say(dm("stranger", "3", canaries[2])).await;
    b.say(group("team", "ok", "4", canaries[3], false)).await;
    b.say(group("elsewhere", "ok", "5", canaries[4], true)).await;
    assert_eq!(
        b.say(dm("ok", "6", "allowed-text-3e9f")).await,
        ["echo: allowed-text-3e9f"]
    );
    b.say(dm("ok", "7", canaries[5])).await;
    let b2 = Broker::start(LimitsConfig {
        max_message_chars: 30,
        ..Default::default()
    })
    .await;
    b2.write_access(json!({ "dmPolicy": "open" }));
    b2.say(dm("ok", "8", &format!("{} {}", canaries[6], "x".repeat(30))))
        .await;

    let mut files = all_files(b.root());
    files.extend(all_files(b2.root()));
    let everything: Vec<(String, String)> = files
        .iter()
        .map(|(p, bytes)| (p.display().to_string(), String::from_utf8_lossy(bytes).into_owned()))
        .collect();
    assert!(
        everything.iter().any(|(_, text)| text.contains("allowed-text-3e9f")),
        "the check can see stored text"
    );
    let log_text = logs();
    assert!(
        log_text.contains("message refused") || log_text.contains("message ignored"),
        "refusals are logged"
    );
    for canary in canaries {
        for (path, text) in &everything {
            assert!(!text.contains(canary), "{canary} was written to {path}");
        }
        assert!(!log_text.contains(canary), "{canary} was logged");
    }
}
