//! The `command` backend runs a real program: arguments are a list with
//! placeholders, never a shell string; failures carry the end of stderr; a
//! timeout kills the child.

use super::fake::env;
use futures_util::StreamExt;
use mnemo::model::{ModelConfig, ModelError, ModelRequest, StreamPart, build};
use mnemo_sessions::context::{Context, Turn};
use mnemo_sessions::record::Role;
use serde_json::json;
use std::time::Duration;

fn command(args: &[&str], timeout_secs: u64) -> ModelConfig {
    serde_json::from_value(json!({"provider": "command", "command": args, "timeoutSecs": timeout_secs})).unwrap()
}

#[tokio::test]
async fn the_message_is_one_literal_argument_never_shell_code() {
    let marker = tempfile::tempdir().unwrap();
    let victim = marker.path().join("x");
    std::fs::write(&victim, "still here").unwrap();
    let planted = marker.path().join("planted");
    let message = format!("hi; rm -rf {} $(touch {}) `id`", victim.display(), planted.display());
    let model = build(&command(&["printf", "%s", "{message}"], 5), &env(&[])).unwrap();

    let reply = model
        .complete(&ModelRequest::new(Context::default(), message.clone()))
        .await
        .unwrap();

    assert_eq!(reply.text, message);
    assert!(victim.exists());
    assert!(!planted.exists());
    assert_eq!(reply.usage, None);
}

#[tokio::test]
async fn context_is_flattened_into_its_placeholder() {
    let model = build(
        &command(
            &[
                "/bin/sh",
                "-c",
                r#"printf '%s|%s' "$1" "$2""#,
                "sh",
                "{context}",
                "{message}",
            ],
            5,
        ),
        &env(&[]),
    )
    .unwrap();
    let context = super::context_of(
        "Be brief.",
        vec![
            Turn {
                role: Role::User,
                content: "hi".into(),
            },
            Turn {
                role: Role::Assistant,
                content: "hello".into(),
            },
        ],
    );

    let reply = model
        .complete(&ModelRequest::new(context, "how are you?"))
        .await
        .unwrap();

    // `{context}` is `Context::flat()`: the system text, then the transcript.
    assert_eq!(
        reply.text,
        "Be brief.\n\n## Recent conversation\nUser: hi\nAssistant: hello|how are you?"
    );
}

#[tokio::test]
async fn a_non_zero_exit_is_an_error_quoting_the_end_of_stderr() {
    let script = r#"head -c 3000 /dev/zero | tr '\0' 'x' >&2; echo ' the real complaint' >&2; exit 3"#;
    let model = build(&command(&["/bin/sh", "-c", script], 5), &env(&[])).unwrap();

    let err = model
        .complete(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap_err();

    let ModelError::Command { program, detail } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(program, "/bin/sh");
    assert!(detail.contains("status 3"), "{detail}");
    assert!(detail.contains("the real complaint"), "{detail}");
    assert!(
        detail.len() < 700,
        "only the tail of stderr is kept: {} bytes",
        detail.len()
    );
}

#[tokio::test]
async fn a_program_that_cannot_start_is_a_command_error() {
    let model = build(&command(&["/nonexistent/mnemo-model", "{message}"], 5), &env(&[])).unwrap();

    let err = model
        .complete(&ModelRequest::new(Context::default(), "hi"))
        .await
        .unwrap_err();

    assert!(matches!(err, ModelError::Command { .. }), "{err:?}");
    assert!(err.to_string().contains("could not start"), "{err}");
}

#[tokio::test]
async fn a_timeout_kills_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = r#"echo $$ > "$1"; exec sleep 30"#;
    let model = build(
        &command(&["/bin/sh", "-c", script, "sh", pid_file.to_str().unwrap()], 1),
        &env(&[]),
    )
    .unwrap();

    // The guard only tells "killed at the timeout" from "waited out the
    // 30 s sleep"; it is not a measurement.
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        model.complete(&ModelRequest::new(Context::default(), "hi")),
    )
    .await
    .expect("the call returned only when the child exited by itself");

    assert!(matches!(outcome, Err(ModelError::Timeout { .. })), "{outcome:?}");
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let alive = std::process::Command::new("kill")
        .args(["-0", &pid])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!alive, "process {pid} is still running");
}

#[tokio::test]
async fn streaming_a_command_yields_its_whole_output_once() {
    let model = build(&command(&["printf", "%s", "{message}"], 5), &env(&[])).unwrap();

    let deltas: Vec<_> = model
        .stream(&ModelRequest::new(Context::default(), "all at once"))
        .await
        .unwrap()
        .collect()
        .await;

    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0].as_ref().unwrap(), &StreamPart::Text("all at once".into()));
}
