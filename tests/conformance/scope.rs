//! One user never reaches another's memory, on any store: not through
//! recall, `/session` search, status, profile, history or undo, and not
//! through the memory tools, whose arguments name no user; the tools keep
//! their limits (three deletions a turn, exact arguments).

use super::specs;
use super::subject::{Subject, at};
use mnemo::memory_tools::MemoryTools;
use mnemo::model::{ToolCall, ToolExecutor, ToolResult};
use serde_json::{Value, json};

specs![
    another_users_recall_search_and_commands_find_nothing_of_a_user,
    the_memory_tools_act_for_their_caller_only_and_keep_their_limits,
];

const CANARY: &str = "canary-ADA-7731";

async fn another_users_recall_search_and_commands_find_nothing_of_a_user(s: Subject) {
    s.chat("ada", 0, 24, &format!("my locker code is {CANARY}")).await;
    s.say("ada", &format!("remember the locker code is {CANARY}")).await;
    s.store
        .fold(&mnemo_sessions::SafeName::of("ada"), at(30))
        .await
        .unwrap();
    // Ada herself finds it.
    let mut ada = s.user("ada").await;
    let recalled = ada
        .recall(&format!("what is my locker code {CANARY}?"), &[], 500)
        .await
        .unwrap();
    assert!(
        recalled.items.iter().any(|i| i.text.contains(CANARY)),
        "{:?}",
        recalled.items
    );
    drop(ada);
    let mut bob = s.user("bob").await;
    let recalled = bob
        .recall(&format!("what is the locker code {CANARY}?"), &[], 500)
        .await
        .unwrap();
    assert!(
        recalled.items.iter().all(|i| !i.text.contains(CANARY)),
        "{:?}",
        recalled.items
    );
    let found = bob.search(CANARY, 10).await.unwrap();
    assert!(found.iter().all(|i| !i.text.contains(CANARY)), "{found:?}");
    assert!(bob.history().await.unwrap().is_empty());
    assert!(
        bob.undo(mnemo_sessions::versions::Author::Command, at(40))
            .await
            .unwrap()
            .is_none()
    );
    drop(bob);
    for command in ["status", "profile", "history", &format!("search {CANARY}"), "undo"] {
        let reply = s.say("bob", command).await.text;
        assert!(
            !reply.contains(CANARY) && !reply.contains("locker"),
            "{command}: {reply}"
        );
    }
    let ada = s.say("ada", "profile").await.text;
    assert!(ada.contains(CANARY), "bob's undo took nothing of ada's: {ada}");
}

async fn call(tools: &MemoryTools, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall {
        id: format!("call-{name}"),
        name: name.to_string(),
        arguments,
    };
    tools.call(&call).await
}

async fn the_memory_tools_act_for_their_caller_only_and_keep_their_limits(s: Subject) {
    s.say("bob", &format!("remember bob's code is {CANARY}")).await;
    let channel = s.store.channel().to_string();
    let tools = MemoryTools::for_caller(s.user("ada").await, &channel, 4000, at(1));
    for i in 0..5 {
        let done = call(
            &tools,
            "memory_remember",
            json!({ "text": format!("ada likes tea number {i}") }),
        )
        .await;
        assert!(!done.is_error, "{}", done.content);
    }
    let found = call(&tools, "memory_search", json!({ "query": "tea" })).await;
    assert!(found.content.contains("ada likes tea"), "{}", found.content);
    let theirs = call(&tools, "memory_search", json!({ "query": CANARY })).await;
    assert!(!theirs.content.contains(CANARY), "{}", theirs.content);
    let scoped = call(&tools, "memory_forget", json!({ "key": "bobs-code-is", "user": "bob" })).await;
    assert!(
        scoped.is_error && scoped.content.contains("unknown argument `user`"),
        "{}",
        scoped.content
    );
    let updated = call(
        &tools,
        "memory_update",
        json!({ "key": "ada-likes-tea-number-0", "text": "green tea" }),
    )
    .await;
    assert!(!updated.is_error, "{}", updated.content);
    let mut deleted = 0;
    for i in 0..5 {
        let forgot = call(
            &tools,
            "memory_forget",
            json!({ "key": format!("ada-likes-tea-number-{i}") }),
        )
        .await;
        if !forgot.is_error {
            deleted += 1;
        } else {
            assert!(
                forgot.content.contains("at most 3 deletions per turn"),
                "{}",
                forgot.content
            );
        }
    }
    assert_eq!(deleted, 3, "at most three deletions a turn");
    let missing = call(&tools, "memory_forget", json!({ "key": "bobs-code-is" })).await;
    assert!(missing.is_error, "{}", missing.content);
    drop(tools.into_memory());
    let bob = s.say("bob", "profile").await.text;
    assert!(bob.contains(CANARY), "ada's tools took nothing of bob's: {bob}");
}
