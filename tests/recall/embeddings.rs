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

/// Issue 40: a turn's question (indexed when it comes) and its answer are
/// embedded in one request, after the answer: with the question's vector
/// for recall, at most two requests a turn (before, each message had its
/// own request: three a turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_question_and_answer_are_embedded_in_one_request() {
    let (_model, url) = FakeModel::start().await;
    let (embedder, embed_url) = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    support::open_access(state, "fake", &[]);
    memory(state, "fake", embeddings_at(&embed_url));
    let turns = 4;
    let questions: Vec<String> = (0..turns)
        .map(|i| format!("Tell me about green tea number {i}."))
        .collect();
    let messages = questions
        .iter()
        .enumerate()
        .map(|(i, q)| dm("fake", "ada", &format!("b{i}"), q))
        .collect();
    run(state, &url, messages).await;
    vectors_settle(state, "fake", "ada", turns).await;

    let requests: Vec<Vec<String>> = embedder
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| match &r["input"] {
            Value::Array(texts) => texts.iter().map(|t| t.as_str().unwrap().to_string()).collect(),
            one => vec![one.as_str().unwrap().to_string()],
        })
        .collect();
    assert!(
        requests.len() <= 2 * turns,
        "{} requests for {turns} turns: {requests:?}",
        requests.len()
    );
    for question in &questions {
        let answer = format!("echo: {question}");
        assert!(
            requests.iter().any(|r| r.contains(question) && r.contains(&answer)),
            "{question:?} and its answer in one request: {requests:?}"
        );
    }
}

/// 600 turns of a conversation, in Ada's log as a long-time user's would be.
fn seed_conversation(state: &Path, turns: usize) -> Vec<String> {
    let places = [
        "the north garage",
        "the station",
        "the office",
        "the river",
        "the market",
    ];
    let teas = [
        "sencha",
        "gyokuro",
        "matcha",
        "hojicha",
        "genmaicha",
        "bancha",
        "kukicha",
    ];
    let start = chrono::Utc::now() - chrono::TimeDelta::days(30);
    let mut texts = Vec::new();
    let mut lines = String::new();
    for i in 0..turns {
        let said = format!(
            "Day {i}: I parked the automobile by {} and drank {} with friends.",
            places[i % places.len()],
            teas[i % teas.len()]
        );
        let answered = format!(
            "Noted, turn {i}: {} by {}.",
            teas[(i / 3) % teas.len()],
            places[(i / 2) % places.len()]
        );
        for (n, (role, text)) in [
            (mnemo_sessions::Role::User, said),
            (mnemo_sessions::Role::Assistant, answered),
        ]
        .into_iter()
        .enumerate()
        {
            let record = mnemo_sessions::Record {
                ts: start + chrono::TimeDelta::seconds((2 * i + n) as i64 * 60),
                role,
                msg_id: format!("{}s{i}", if n == 0 { "" } else { "re-" }),
                text: text.clone(),
                channel: "fake".into(),
                thread_id: None,
                chat_id: Some("dm-ada".into()),
                user_name: Some("ada".into()),
            };
            lines.push_str(&serde_json::to_string(&record).unwrap());
            lines.push('\n');
            texts.push(text);
        }
    }
    let path = Layout::new(state, "fake").messages_path(&SafeName::of("ada"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, lines).unwrap();
    texts
}

/// An embedder that asks for one text at a time: what indexing did before
/// batching, to compare recall against.
struct OneByOne(std::sync::Arc<dyn mnemo_sessions::recall::Embedder>);

#[async_trait::async_trait]
impl mnemo_sessions::recall::Embedder for OneByOne {
    async fn embed(
        &self,
        texts: &[String],
        purpose: mnemo_sessions::recall::EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, mnemo_sessions::recall::EmbedError> {
        let mut vectors = Vec::new();
        for text in texts {
            vectors.extend(self.0.embed(std::slice::from_ref(text), purpose).await?);
        }
        Ok(vectors)
    }

    fn model(&self) -> &str {
        self.0.model()
    }
}

/// The embedder the broker builds for `url` (the real HTTP client).
fn http_embedder(url: &str) -> std::sync::Arc<dyn mnemo_sessions::recall::Embedder> {
    let cfg: mnemo_sessions::config::EmbeddingsConfig =
        serde_json::from_value(embeddings_at(url)["embeddings"].clone()).unwrap();
    mnemo::model::embeddings::build_embedder(&cfg, &|_| None, "recall.embeddings", None).unwrap()
}

/// What recall brings to each question, with the question's vector.
fn recalled(recall: &Recall, questions: &[&str]) -> Vec<Option<String>> {
    let ada = SafeName::of("ada");
    questions
        .iter()
        .map(|q| {
            let query = mnemo_sessions::recall::TurnQuery {
                message: q,
                recent: &[],
                max_tokens: 800,
            };
            let vector = mnemo_testkit::embeddings::vector_of(q);
            recall.for_turn_with(&ada, &query, Some(&vector)).render()
        })
        .collect()
}

/// Issue 40: `mnemo sessions reindex` of a 600-turn conversation (1,200
/// messages) sends arrays of at most 128 texts — 10 requests, not 1,200 —
/// and recall then finds exactly what it finds with every text embedded
/// on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_embeds_a_long_conversation_in_batches_with_the_same_recall() {
    let (model, url) = FakeModel::start().await;
    let (embedder, embed_url) = FakeEmbeddings::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), &url, json!({}));
    let state = dir.path().join("state");
    support::open_access(&state, "fake", &[]);
    memory(&state, "fake", embeddings_at(&embed_url));
    let texts = seed_conversation(&state, 600);

    let out = support::mnemo(&config, dir.path())
        .args(["sessions", "reindex", "--channel", "fake"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1200 vectors"), "{stdout}");
    let batch = mnemo_sessions::recall::EMBED_BATCH;
    assert_eq!(
        embedder.calls(),
        texts.len().div_ceil(batch),
        "requests of {batch} texts"
    );
    assert!(
        embedder.calls() <= texts.len().div_ceil(64),
        "arrays of 64 texts or more"
    );
    let mut embedded = embedder.inputs();
    embedded.sort();
    let mut want = texts.clone();
    want.sort();
    assert_eq!(embedded, want, "every message once");
    assert!(model.chat_requests().is_empty());

    // The same conversation embedded one text a request.
    let (single, single_url) = FakeEmbeddings::start().await;
    let other = tempfile::tempdir().unwrap();
    seed_conversation(other.path(), 600);
    let unbatched = recall_of(other.path(), "fake");
    let one_by_one: std::sync::Arc<dyn mnemo_sessions::recall::Embedder> =
        std::sync::Arc::new(OneByOne(http_embedder(&single_url)));
    unbatched.use_embedder(Some((one_by_one, std::time::Duration::from_secs(5))));
    let stored = unbatched
        .reindex_vectors(&SafeName::of("ada"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(stored, 1200);
    assert_eq!(single.calls(), 1200);

    let batched = recall_of(&state, "fake");
    batched.use_embedder(Some((http_embedder(&embed_url), std::time::Duration::from_secs(5))));
    let questions = [
        "Where did I leave my car?",
        "Which day did I have gyokuro by the river?",
        "what did I drink at the market with my pals",
        "genmaicha at the station",
    ];
    let with_batches = recalled(&batched, &questions);
    assert!(with_batches.iter().all(Option::is_some), "recall found something");
    assert_eq!(with_batches, recalled(&unbatched, &questions), "the same recall");
}
