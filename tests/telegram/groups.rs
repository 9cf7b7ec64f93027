//! A group with its own memory over Telegram, end to end (the real
//! binary, the fake Bot API, the fake model): with `memory: "shared"` and
//! `observe: true`, what members say without asking the bot is kept, not
//! answered, and recalled in that group when the bot is mentioned; a
//! member's own memory never enters the group's turn, and the group's never
//! enters a private one; `/session status` there tells the group's memory;
//! only an admin (asked of Telegram with `getChatMember`) clears it.

use super::{ADA, GROUP, Mnemo, text_message, user};
use mnemo_sessions::{Layout, Record, SafeName};
use mnemo_testkit::model::{last_user_message, request_text};
use mnemo_testkit::telegram::FakeBotApi;
use serde_json::json;
use std::path::Path;
use support::FakeModel;

use super::support;

const BOB: i64 = 43;

fn start(api: &FakeBotApi, model_url: &str) -> Mnemo {
    let rule = json!({ "memory": "shared", "observe": true });
    let limits = json!({ "limits": { "userMessagesPerMinute": 0 } });
    Mnemo::start_with_group_rule(api, model_url, json!({}), limits, rule)
}

/// The group's memory as stored on the files.
fn group_records(state: &Path) -> Vec<Record> {
    let layout = Layout::new(state, "telegram");
    support::stm_written(&layout.messages_path(&SafeName::group(&GROUP.to_string())))
}

/// Waits until the group's memory holds `n` messages (observed ones are
/// stored without any reply to wait for).
async fn wait_for_group_records(state: &Path, n: usize) -> Vec<Record> {
    for _ in 0..500 {
        let records = group_records(state);
        if records.len() >= n {
            return records;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!(
        "the group's memory never held {n} messages: {:?}",
        group_records(state).len()
    );
}

fn in_group(from: i64, name: &str, text: &str) -> serde_json::Value {
    text_message(GROUP, user(from, name), text)
}

/// Ada tells the bot a fact in private; then Bob tells the group, not the
/// bot, where the offsite is, and the group chats on longer than the
/// context window, so that fact can only come back by recall. `kept(n)`
/// waits until the group's memory holds `n` observed messages.
async fn a_discussion_the_bot_only_observes(api: &FakeBotApi, kept: impl AsyncFn(usize)) {
    api.push_message(text_message(ADA, user(ADA, "Ada"), "my locker code is 7731"));
    api.wait_for_calls("sendMessage", 1).await;
    api.push_message(in_group(
        BOB,
        "Bob",
        "the offsite moved to Porto, we booked the Ribeira hotel",
    ));
    kept(1).await;
    for i in 0..12 {
        api.push_message(in_group(BOB, "Bob", &format!("lunch order number {i} is pizza")));
    }
    kept(13).await;
    assert_eq!(api.calls("sendMessage").len(), 1, "nothing observed is answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_group_recalls_what_it_observed_when_mentioned_and_never_in_a_private_chat() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = start(&api, &model_url);
    let state = mnemo.state();
    a_discussion_the_bot_only_observes(&api, async |n| {
        wait_for_group_records(&state, n).await;
    })
    .await;
    let kept = wait_for_group_records(&mnemo.state(), 13).await;
    assert!(
        kept.iter().all(|r| r.msg_id.starts_with("seen-")),
        "observed, not questions"
    );
    assert_eq!(kept[0].user_name.as_deref(), Some("Bob"));
    assert_eq!(model.chat_requests().len(), 1);

    api.push_message(in_group(
        ADA,
        "Ada",
        "@mnemo_test_bot which hotel did we book for the offsite?",
    ));
    let sent = api.wait_for_calls("sendMessage", 2).await;
    assert_eq!(sent[1].params["chat_id"], GROUP);
    let asked = model.chat_requests().pop().unwrap();
    assert_eq!(
        last_user_message(&asked),
        "Ada: which hotel did we book for the offsite?"
    );
    let whole = request_text(&asked);
    assert!(
        whole.contains("Ribeira hotel"),
        "recalled from the group's memory: {whole}"
    );
    assert!(whole.contains("Bob: lunch order number 11"), "{whole}");
    assert!(whole.contains("This is a group conversation"), "{whole}");
    assert!(!whole.contains("7731"), "Ada's own memory entered the group: {whole}");

    // In private, the group's memory does not exist.
    api.push_message(text_message(
        ADA,
        user(ADA, "Ada"),
        "which hotel did we book for the offsite?",
    ));
    api.wait_for_calls("sendMessage", 3).await;
    let private = request_text(&model.chat_requests().pop().unwrap());
    assert!(!private.contains("Ribeira") && !private.contains("pizza"), "{private}");
    assert!(private.contains("7731"), "{private}");
    let own = super::stm_records(&mnemo.state(), ADA);
    assert!(own.iter().all(|r| !r.text.contains("Ribeira")), "{own:?}");

    // Status in the group tells the group's memory, in the group.
    api.push_message(in_group(BOB, "Bob", "/session status"));
    let sent = api.wait_for_calls("sendMessage", 4).await;
    assert_eq!(sent[3].params["chat_id"], GROUP);
    let status = sent[3].params["text"].as_str().unwrap();
    assert!(status.starts_with("This group's shared memory:"), "{status}");
    assert!(status.contains("15 messages in short-term memory"), "{status}");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_group_admin_clears_the_group_s_memory() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let mnemo = start(&api, &model_url);
    api.push_message(in_group(BOB, "Bob", "the release password hint is heron"));
    wait_for_group_records(&mnemo.state(), 1).await;

    api.push_message(in_group(BOB, "Bob", "/session clear group"));
    let sent = api.wait_for_calls("sendMessage", 1).await;
    assert_eq!(sent[0].params["text"], mnemo::pipeline::NOT_A_GROUP_ADMIN);
    let asked = api.calls("getChatMember");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].params["user_id"], BOB);
    assert_eq!(group_records(&mnemo.state()).len(), 1, "nothing cleared");

    api.set_admin(GROUP, ADA, "administrator");
    api.push_message(in_group(ADA, "Ada", "/session clear group"));
    let sent = api.wait_for_calls("sendMessage", 2).await;
    let text = sent[1].params["text"].as_str().unwrap();
    assert!(text.starts_with("Deleted this group's shared memory"), "{text}");
    assert_eq!(sent[1].params["chat_id"], GROUP);
    assert!(group_records(&mnemo.state()).is_empty());

    api.push_message(in_group(
        ADA,
        "Ada",
        "@mnemo_test_bot what is the release password hint?",
    ));
    api.wait_for_calls("sendMessage", 3).await;
    let whole = request_text(&model.chat_requests().pop().unwrap());
    assert!(!whole.contains("heron"), "{whole}");
    mnemo.stop(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_shared_group_keeps_what_it_observed_and_recalls_it_when_mentioned() {
    let (model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let db = mnemo_testkit::pg::database();
    let store = mnemo_pg::PgStore::connect(&db.url(), 2, std::time::Duration::from_secs(5)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    // On Postgres the channel's rules are in the database.
    mnemo::access::db::edit(&store, "telegram", |rules| {
        rules.dm_policy = mnemo::access::DmPolicy::Open;
        let shared = mnemo::access::GroupRule {
            memory: mnemo::access::GroupMemory::Shared,
            observe: true,
            ..Default::default()
        };
        rules.groups.insert(GROUP.to_string(), shared);
    })
    .await
    .unwrap();
    drop(store);
    let extra = json!({ "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" },
                        "limits": { "userMessagesPerMinute": 0 } });
    let mnemo = Mnemo::launch(
        &api,
        &model_url,
        json!({}),
        extra,
        json!({}),
        &[("MNEMO_DATABASE_URL", db.url())],
    );
    let (client, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let group_key = SafeName::group(&GROUP.to_string()).as_str().to_string();
    let kept = async |n: usize| {
        for _ in 0..500 {
            let row = client
                .query_one(
                    "SELECT count(*) FROM mnemo_messages WHERE user_key = $1 AND msg_id LIKE 'seen-%'",
                    &[&group_key],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) >= n as i64 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the group's memory never held {n} observed messages");
    };
    a_discussion_the_bot_only_observes(&api, kept).await;
    api.push_message(in_group(
        ADA,
        "Ada",
        "@mnemo_test_bot which hotel did we book for the offsite?",
    ));
    api.wait_for_calls("sendMessage", 2).await;
    let whole = request_text(&model.chat_requests().pop().unwrap());
    assert!(
        whole.contains("Ribeira hotel"),
        "recalled from the group's memory: {whole}"
    );
    assert!(!whole.contains("7731"), "Ada's own memory entered the group: {whole}");
    api.push_message(text_message(ADA, user(ADA, "Ada"), "which hotel did we book?"));
    api.wait_for_calls("sendMessage", 3).await;
    let private = request_text(&model.chat_requests().pop().unwrap());
    assert!(!private.contains("Ribeira") && private.contains("7731"), "{private}");
    mnemo.stop(&api).await;
}
