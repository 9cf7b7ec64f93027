//! Recall with dense embeddings (`recall.embeddings`), end to end: the real
//! `App` or the real binary, with the fake model and the fake
//! `/v1/embeddings` server at the network edge. The fake embeds a hashed
//! bag of concepts with a small thesaurus ("automobile" ≈ "car", "parked"
//! ≈ "leave"), so a paraphrase BM25 cannot match is near its original.
//!
//! Specified: a paraphrase recalls the right turn with embeddings on and
//! not with them off; an embedder that is down, slow or answers NaN leaves
//! BM25 answering every turn with one warning; vectors never cross users
//! or channels; `/session clear all` removes them and `mnemo sessions
//! reindex` computes them again; a bad `recall.embeddings` stops the start
//! naming the file and the field.

use super::support::{self, FakeModel, dm, eventually, request_text};
use super::{run, said};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::stm::Stm;
use mnemo_sessions::{Layout, SafeName};
use mnemo_testkit::embeddings::{FakeEmbeddings, Mode};
use serde_json::{Value, json};
use std::path::Path;

const TOLD: &str = "I parked the automobile on level three of the north garage.";
const ASKED: &str = "Where did I leave my car?";
const FOUND: &str = "level three of the north garage";

/// Writes `channel`'s `sessions/config.json` with `recall` as given.
fn memory(state: &Path, channel: &str, recall: Value) {
    let path = Layout::new(state, channel).config_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, json!({ "recall": recall }).to_string()).unwrap();
}

fn embeddings_at(url: &str) -> Value {
    json!({"embeddings": {"provider": "openai", "baseUrl": url, "apiKeyEnv": "", "model": "fake-embed"}})
}

/// Twelve turns of small talk after `first`, so `first` is out of the
/// recent window (10) when the question comes.
fn history(channel: &str, user: &str, first: &str) -> Vec<mnemo_channels::Inbound> {
    let mut messages = vec![said(channel, user, &format!("{user}-t"), 3, first)];
    for i in 0..12 {
        let text = format!("Some chatter about the weather and lunch, number {i}.");
        messages.push(said(channel, user, &format!("{user}-h{i}"), 2, &text));
    }
    messages
}

/// The recall of `channel` (the same handle the app used while it lives).
fn recall_of(state: &Path, channel: &str) -> Recall {
    Recall::of(&Stm::new(Layout::new(state, channel), LockRegistry::new(), true))
}

/// Waits until `user`'s messages (question and answer of `turns` turns)
/// all have their vectors.
async fn vectors_settle(state: &Path, channel: &str, user: &str, turns: usize) {
    let recall = recall_of(state, channel);
    let user_name = SafeName::of(user);
    eventually(format!("{turns} turns of {user} embedded"), async || {
        recall.vectors_held(&user_name) >= 2 * turns
    })
    .await;
}

/// The text of the last model request, which asked `question`.
fn asked(fake: &FakeModel, question: &str) -> String {
    let requests = fake.chat_requests();
    let last = requests.last().expect("a model request");
    assert_eq!(support::last_user_message(last), question);
    request_text(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paraphrase_is_recalled_with_embeddings_on_and_not_with_them_off() {
    let (model, url) = FakeModel::start().await;
    let (embedder, embed_url) = FakeEmbeddings::start().await;

    let on = tempfile::tempdir().unwrap();
    support::open_access(on.path(), "fake", &[]);
    memory(on.path(), "fake", embeddings_at(&embed_url));
    run(on.path(), &url, history("fake", "ada", TOLD)).await;
    vectors_settle(on.path(), "fake", "ada", 13).await;
    assert!(embedder.inputs().iter().any(|t| t == TOLD), "the message was embedded");
    run(on.path(), &url, vec![dm("fake", "ada", "q", ASKED)]).await;
    let with = asked(&model, ASKED);
    assert!(with.contains(FOUND), "embeddings find the paraphrase: {with}");
    assert!(
        embedder.inputs().iter().any(|t| t == ASKED),
        "the question was embedded"
    );

    let off = tempfile::tempdir().unwrap();
    support::open_access(off.path(), "fake", &[]);
    memory(off.path(), "fake", json!({}));
    run(off.path(), &url, history("fake", "ada", TOLD)).await;
    run(off.path(), &url, vec![dm("fake", "ada", "q", ASKED)]).await;
    let without = asked(&model, ASKED);
    assert!(!without.contains(FOUND), "BM25 alone has no word of it: {without}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_never_cross_users_or_channels() {
    let (model, url) = FakeModel::start().await;
    let (_embedder, embed_url) = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    for channel in ["fake", "other"] {
        support::open_access(state, channel, &[]);
        memory(state, channel, embeddings_at(&embed_url));
    }
    let canary = "I parked the automobile in bay canary-Z-7781 of the north garage.";
    let mut messages = history("fake", "ada", canary);
    // Bob in the same channel, and Ada's namesake in another channel, talk
    // about cars too: their nearest vectors must be their own.
    messages.extend(history("fake", "bob", "My bicycle is green."));
    messages.extend(history("other", "ada", "I take the tram to work."));
    run(state, &url, messages).await;
    vectors_settle(state, "fake", "ada", 13).await;
    vectors_settle(state, "fake", "bob", 13).await;
    vectors_settle(state, "other", "ada", 13).await;

    run(state, &url, vec![dm("fake", "bob", "qb", ASKED)]).await;
    assert!(!asked(&model, ASKED).contains("canary-Z-7781"));
    run(state, &url, vec![dm("other", "ada", "qo", ASKED)]).await;
    assert!(!asked(&model, ASKED).contains("canary-Z-7781"));
    run(state, &url, vec![dm("fake", "ada", "qa", ASKED)]).await;
    assert!(asked(&model, ASKED).contains("canary-Z-7781"), "the owner gets it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_all_removes_the_vectors_and_reindex_computes_them_again() {
    let (model, url) = FakeModel::start().await;
    let (embedder, embed_url) = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    support::open_access(&state, "fake", &[]);
    memory(&state, "fake", embeddings_at(&embed_url));
    run(&state, &url, history("fake", "ada", TOLD)).await;
    vectors_settle(&state, "fake", "ada", 13).await;
    let ada = SafeName::of("ada");
    #[allow(clippy::disallowed_methods, reason = "a test names the file it checks")]
    let vectors = Layout::new(&state, "fake").recall_dir(&ada).join("vectors.bin");
    assert!(vectors.exists());

    // Reindex: the vectors are computed again from the files.
    std::fs::write(&vectors, b"damaged").unwrap();
    let before = embedder.calls();
    let out = support::mnemo(&config, dir.path())
        .args(["sessions", "reindex", "--channel", "fake"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("reindexed 26 messages and 26 vectors of 1 user(s)"),
        "{stdout}"
    );
    assert!(embedder.calls() > before);
    run(&state, &url, vec![dm("fake", "ada", "q1", ASKED)]).await;
    assert!(asked(&model, ASKED).contains(FOUND));

    // `/session clear all confirm`: the vectors go with the index, at once.
    run(&state, &url, vec![dm("fake", "ada", "c", "/session clear all confirm")]).await;
    assert!(!vectors.exists(), "the vectors are deleted");
    run(&state, &url, vec![dm("fake", "ada", "q2", ASKED)]).await;
    assert!(!asked(&model, ASKED).contains(FOUND));
}

/// Runs `mnemo chat` with `input` on stdin; returns its log files (the
/// console chat keeps stderr for errors).
async fn chat(config: &Path, home: &Path, state: &Path, input: String) -> String {
    let (config, home) = (config.to_path_buf(), home.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let mut cmd = support::mnemo(&config, &home);
        cmd.arg("chat");
        let out = support::with_input(cmd, input.as_bytes());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await
    .unwrap();
    let mut logged = String::new();
    for entry in std::fs::read_dir(state.join("logs")).unwrap() {
        logged += &std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
    }
    logged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_down_slow_or_answering_nan_leaves_bm25_answering_with_one_warning() {
    let (model, url) = FakeModel::start().await;
    let (embedder, embed_url) = FakeEmbeddings::start().await;
    for mode in [Mode::Down, Mode::Slow(std::time::Duration::from_secs(30)), Mode::NaN] {
        embedder.set(mode);
        let dir = tempfile::tempdir().unwrap();
        let config = support::write_config(dir.path(), &url, json!({}));
        let state = dir.path().join("state");
        let mut recall = embeddings_at(&embed_url);
        recall["embeddings"]["queryTimeoutMs"] = json!(100);
        memory(&state, "console", recall);
        let mut input = String::from("My locker code is zebra-quokka, remember it.\n");
        for i in 0..11 {
            input.push_str(&format!("chatter about the weather, part {i}\n"));
        }
        input.push_str("What is my locker code?\n");
        let before = model.chat_requests().len();
        let calls_before = embedder.calls();
        let logged = chat(&config, dir.path(), &state, input).await;
        // 13 questions, and a fill after each of the 26 messages, each
        // retried 3 times when the server is down: never a loop of calls.
        let attempts = if mode == Mode::Down { 4 } else { 1 };
        let calls = embedder.calls() - calls_before;
        assert!(calls <= 13 + 26 * attempts, "{mode:?}: {calls} calls");

        assert_eq!(
            model.chat_requests().len() - before,
            13,
            "{mode:?}: every turn answered"
        );
        assert!(
            asked(&model, "What is my locker code?").contains("My locker code is zebra-quokka"),
            "{mode:?}: BM25 answers"
        );
        assert_eq!(
            logged.matches("recall embeddings failed").count(),
            1,
            "{mode:?}: one warning, not one per turn: {logged}"
        );
        assert!(
            !logged.contains("quokka"),
            "{mode:?}: no message text in the log: {logged}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_embeddings_section_stops_the_start_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), "http://127.0.0.1:9/v1", json!({}));
    let state = dir.path().join("state");
    for (embeddings, field) in [
        (
            json!({"provider": "anthropic", "model": "x"}),
            "recall.embeddings.provider",
        ),
        (
            json!({"provider": "openai", "model": "x", "baseUrl": "ftp://nowhere"}),
            "recall.embeddings.baseUrl",
        ),
        (json!({"provider": "openai", "model": ""}), "recall.embeddings.model"),
        (
            json!({"provider": "openai", "model": "x", "apiKeyEnv": "sk-live-123"}),
            "recall.embeddings.apiKeyEnv",
        ),
        (
            json!({"provider": "openai", "model": "text-embedding-3-small", "apiKeyEnv": "NOT_SET_ANYWHERE"}),
            "NOT_SET_ANYWHERE",
        ),
    ] {
        memory(&state, "console", json!({ "embeddings": embeddings }));
        let out = binary(&config, dir.path(), &["chat"], b"hello\n").await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{field}: refused");
        assert!(stderr.contains(field), "{field}: {stderr}");
        assert!(
            stderr.contains("sessions/config.json"),
            "{field}: names the file: {stderr}"
        );
        assert!(!stderr.contains("sk-live-123"), "a pasted key is not echoed");

        let out = binary(&config, dir.path(), &["config", "check"], b"").await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{field}: config check refuses it too");
        assert!(stderr.contains(field), "{field}: config check: {stderr}");
    }
    // Embeddings with recall turned off would be a field nothing uses.
    memory(
        &state,
        "console",
        json!({"enabled": false, "embeddings": {"provider": "openai", "model": "x"}}),
    );
    let out = binary(&config, dir.path(), &["config", "check"], b"").await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("recall.embeddings"));
}

/// The real binary with `args`, `input` on its stdin, off the runtime.
async fn binary(config: &Path, home: &Path, args: &[&str], input: &[u8]) -> std::process::Output {
    let (config, home) = (config.to_path_buf(), home.to_path_buf());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let input = input.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut cmd = support::mnemo(&config, &home);
        cmd.args(&args);
        support::with_input(cmd, &input)
    })
    .await
    .unwrap()
}
