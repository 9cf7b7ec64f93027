//! A streamed answer has a deadline, end to end (issue 38): `mnemo chat`
//! against model servers that never finish — keep-alive comments after a
//! few words (OpenAI), words without end (Anthropic) — prints and stores
//! what came, marked as cut, tells the user the model took too long, and
//! answers the same user's next message; all within `timeoutSecs`, not when
//! the server closes. And a server that ignores `stream: true` and answers
//! one `application/json` completion is answered from it, tool calls
//! included.

use super::stm_records;
use crate::model_backends::fake::{FakeServer, Reply, sse_data};
use crate::support::{mnemo, write_config};
use mnemo_sessions::Role;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `mnemo chat` with `input`; returns its stdout and how long it
/// took. A chat still running after 30 s is killed and the test fails:
/// that is the hang this file is about.
async fn chat_within(config: &Path, home: &Path, input: &str) -> (String, Duration) {
    let mut cmd = mnemo(config, home);
    cmd.arg("chat").stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.stdin(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    let waited = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(out) = waited else {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("mnemo chat was still waiting on the model after 30 s");
    };
    let out = out.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mnemo chat failed: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), started.elapsed())
}

fn answers(state: &Path) -> Vec<String> {
    stm_records(state, "console", "ada")
        .into_iter()
        .filter(|r| r.role == Role::Assistant)
        .map(|r| r.text)
        .collect()
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
}

/// A whole OpenAI stream answering `text`.
fn openai_stream(text: &str) -> Reply {
    Reply::Sse(sse_data(&[
        &openai_chunk(json!({"role": "assistant", "content": ""}), None),
        &openai_chunk(json!({"content": text}), Some("stop")),
        "[DONE]",
    ]))
}

const TOO_LONG: &str = "The model took too long to answer";

/// Both messages' answers: the first cut at the deadline, the second whole.
fn assert_cut_then_answered(dir: &Path, out: &str, took: Duration, cut: &str) {
    let cut = format!("{cut}{}", mnemo::streaming::CUT_BY_MODEL);
    assert_eq!(
        answers(&dir.join("state")),
        [cut.as_str(), "Second answer."],
        "the cut answer is stored marked, and the next message is answered"
    );
    assert!(out.starts_with(&format!("{cut}\n")), "{out}");
    assert!(out.contains(TOO_LONG), "the user is told why: {out}");
    assert!(out.ends_with("Second answer.\n"), "{out}");
    // timeoutSecs is 2: the first turn ends there, not when the server closes.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_stream_kept_open_by_keep_alives_is_cut_at_timeout_secs_and_the_next_message_proceeds() {
    let first = Reply::SseThenKeepAlive(sse_data(&[
        &openai_chunk(json!({"role": "assistant", "content": ""}), None),
        &openai_chunk(json!({"content": "The first words"}), None),
    ]));
    let server = FakeServer::start(vec![first, openai_stream("Second answer.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url("/v1"), json!({"timeoutSecs": 2}));

    let (out, took) = chat_within(&config, dir.path(), "tell me everything\nand then?\n").await;

    assert_cut_then_answered(dir.path(), &out, took, "The first words");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_stream_of_words_without_end_is_cut_at_timeout_secs_and_the_next_message_proceeds() {
    let event = |data: Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    let text =
        |t: &str| event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}));
    let start = vec![
        event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        text("On and on"),
    ];
    let mut whole = start.clone();
    whole[2] = text("Second answer.");
    whole.push(event(json!({"type": "content_block_stop", "index": 0})));
    whole.push(event(json!({"type": "message_stop"})));
    let server = FakeServer::start(vec![Reply::SseEndless(start, text(" and on")), Reply::Sse(whole)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &server.url(""),
        json!({"provider": "anthropic", "timeoutSecs": 2}),
    );

    let (out, took) = chat_within(&config, dir.path(), "tell me everything\nand then?\n").await;

    let first = answers(&dir.path().join("state")).remove(0);
    let words = first.strip_suffix(mnemo::streaming::CUT_BY_MODEL).unwrap();
    assert!(words.starts_with("On and on and on"), "the words that came: {first}");
    assert!(words.replace(" and on", "") == "On", "{first}");
    assert_cut_then_answered(dir.path(), &out, took, words);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_completion_to_a_streaming_request_answers_the_user_tool_calls_included() {
    let calls = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "memory_search", "arguments": "{\"query\":\"tea\"}"}}]}}]
    });
    let answer = json!({
        "id": "chatcmpl-2", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Green tea, as you said."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    });
    let server = FakeServer::start(vec![Reply::Json(200, calls), Reply::Json(200, answer)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.url("/v1"), json!({}));

    let (out, _) = chat_within(&config, dir.path(), "which tea do I like?\n").await;

    assert_eq!(out, "Green tea, as you said.\n");
    assert_eq!(answers(&dir.path().join("state")), ["Green tea, as you said."]);
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "the tool round, then the answer");
    assert_eq!(sent[0].body["stream"], true, "a stream was asked for");
    let messages = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["tool_call_id"],
        "call_1",
        "the call's result went back"
    );
}
