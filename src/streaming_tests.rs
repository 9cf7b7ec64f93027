//! Specs of the streaming relay on a paused clock: a scripted model that
//! streams its rounds slowly, and a live reply that records what it shows.

use super::*;
use crate::model::tools::{ToolCall, ToolResult, ToolSpec};
use crate::model::{DeltaStream, ModelReply};
use mnemo_channels::ChannelError;
use std::sync::Mutex;
use std::time::Duration;

/// A live reply that records what it was shown, ready once a second.
#[derive(Default)]
struct Recorder {
    shown: Vec<String>,
    next: Option<Instant>,
}

#[async_trait]
impl LiveReply for Recorder {
    fn ready_at(&self) -> Instant {
        self.next.unwrap_or_else(Instant::now)
    }
    async fn update(&mut self, text: &str) {
        self.shown.push(text.to_string());
        self.next = Some(Instant::now() + Duration::from_secs(1));
    }
    async fn finish(self: Box<Self>, _: &str) -> Result<(), ChannelError> {
        Ok(())
    }
}

/// Streams one scripted round per call, a part every `every`.
struct Scripted {
    rounds: Mutex<Vec<Vec<Result<StreamPart, ModelError>>>>,
    every: Duration,
}

impl Scripted {
    fn new(rounds: Vec<Vec<Result<StreamPart, ModelError>>>, every: Duration) -> Self {
        Scripted {
            rounds: Mutex::new(rounds),
            every,
        }
    }
}

fn text(t: &str) -> Result<StreamPart, ModelError> {
    Ok(StreamPart::Text(t.to_string()))
}

#[async_trait]
impl Model for Scripted {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelReply, ModelError> {
        unreachable!("a streamed answer is never asked whole")
    }
    async fn stream(&self, _: &ModelRequest) -> Result<DeltaStream, ModelError> {
        let round = self.rounds.lock().unwrap().remove(0);
        let every = self.every;
        Ok(futures_util::stream::iter(round)
            .then(move |p| async move {
                tokio::time::sleep(every).await;
                p
            })
            .boxed())
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
    fn supports_tools(&self) -> bool {
        true
    }
    fn streams(&self) -> bool {
        true
    }
}

struct Lookup;

#[async_trait]
impl ToolExecutor for Lookup {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "lookup",
            description: "lookup",
            parameters: serde_json::Value::Null,
        }]
    }
    async fn call(&self, call: &ToolCall) -> ToolResult {
        ToolResult {
            call_id: call.id.clone(),
            content: "found".into(),
            is_error: false,
        }
    }
}

const LIMITS: ToolLimits = ToolLimits {
    max_rounds: 3,
    budget_chars: 1000,
};

/// Streams with no hold: the first words are shown the moment they come.
async fn run(model: &Scripted, live: &mut Recorder, max_chars: usize) -> Result<Streamed, ModelError> {
    run_held(model, live, max_chars, Duration::ZERO).await
}

async fn run_held(
    model: &Scripted,
    live: &mut Recorder,
    max_chars: usize,
    hold: Duration,
) -> Result<Streamed, ModelError> {
    let showing = Showing { max_chars, hold };
    answer(model, ModelRequest::default(), Some(&Lookup), LIMITS, live, (), showing).await
}

const HOLD: Duration = Duration::from_millis(400);

#[tokio::test(start_paused = true)]
async fn an_answer_finished_within_the_hold_is_never_shown_while_growing() {
    // Five pieces 50 ms apart: whole 250 ms after it began, inside the hold.
    let model = Scripted::new(vec![(0..5).map(|_| text("ab ")).collect()], Duration::from_millis(50));
    let mut live = Recorder::default();
    let out = run_held(&model, &mut live, 1000, HOLD).await.unwrap();
    assert_eq!(out.text, "ab ".repeat(5));
    assert!(live.shown.is_empty(), "left to `finish`, one send: {:?}", live.shown);
    let (first, shown) = (out.first_text.unwrap(), out.first_shown.unwrap());
    assert_eq!(
        shown - first,
        Duration::from_millis(200),
        "handed over when it was whole"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_shows_its_first_words_after_the_hold_then_at_the_platforms_pace() {
    let model = Scripted::new(vec![(0..10).map(|_| text("ab ")).collect()], Duration::from_millis(300));
    let mut live = Recorder::default();
    let out = run_held(&model, &mut live, 1000, HOLD).await.unwrap();
    assert_eq!(out.text, "ab ".repeat(10));
    // The first piece at 300 ms, the second at 600 ms: the hold ends at 700.
    assert_eq!(live.shown[0], "ab ab ", "what came within the hold, shown at once");
    assert_eq!(out.first_shown.unwrap() - out.first_text.unwrap(), HOLD);
    assert!(live.shown.len() >= 2 && live.shown.len() <= 4, "{:?}", live.shown);
    assert!(live.shown.windows(2).all(|w| w[1].starts_with(&w[0])));
}

#[tokio::test(start_paused = true)]
async fn a_tool_rounds_words_within_the_hold_are_never_shown() {
    let call = ToolCall {
        id: "c1".into(),
        name: "lookup".into(),
        arguments: serde_json::json!({}),
    };
    let model = Scripted::new(
        vec![
            vec![text("Let me look."), Ok(StreamPart::Call(call))],
            vec![text("You like "), text("green tea.")],
        ],
        Duration::from_millis(20),
    );
    let mut live = Recorder::default();
    let out = run_held(&model, &mut live, 1000, HOLD).await.unwrap();
    assert_eq!(out.text, "You like green tea.");
    assert!(live.shown.is_empty(), "{:?}", live.shown);
}

#[tokio::test(start_paused = true)]
async fn the_first_text_is_shown_at_once_and_later_text_at_the_platforms_pace() {
    let model = Scripted::new(vec![(0..10).map(|_| text("ab ")).collect()], Duration::from_millis(300));
    let mut live = Recorder::default();
    let out = run(&model, &mut live, 1000).await.unwrap();
    assert_eq!(out.text, "ab ".repeat(10));
    assert_eq!(live.shown[0], "ab ", "the first delta is shown alone");
    // 3 s of text at one update a second: the first, then about three.
    assert!(live.shown.len() <= 5, "{:?}", live.shown);
    assert!(live.shown.windows(2).all(|w| w[1].starts_with(&w[0])));
    assert_eq!(out.first_shown, out.first_text, "shown the moment it came");
}

#[tokio::test(start_paused = true)]
async fn a_stream_broken_after_some_text_keeps_it_marked_as_cut() {
    let broken = ModelError::Timeout {
        after: Duration::from_secs(5),
    };
    let model = Scripted::new(
        vec![vec![text("half of "), text("it "), Err(broken)]],
        Duration::from_millis(10),
    );
    let mut live = Recorder::default();
    let out = run(&model, &mut live, 1000).await.unwrap();
    assert_eq!(out.text, format!("half of it{CUT_BY_MODEL}"));
    assert!(matches!(out.broken, Some(ModelError::Timeout { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_stream_broken_before_any_text_is_a_failed_call() {
    let model = Scripted::new(
        vec![vec![Err(ModelError::Protocol { detail: "x".into() })]],
        Duration::from_millis(10),
    );
    let mut live = Recorder::default();
    let out = run(&model, &mut live, 1000).await;
    assert!(matches!(out, Err(ModelError::Protocol { .. })));
    assert!(live.shown.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_answer_past_the_reply_limit_stops_the_stream_and_is_cut_visibly() {
    let model = Scripted::new(
        vec![(0..1000).map(|_| text("word ")).collect()],
        Duration::from_millis(1),
    );
    let mut live = Recorder::default();
    let out = run(&model, &mut live, 200).await.unwrap();
    assert!(out.text.chars().count() <= 200);
    assert!(
        out.text
            .ends_with("[answer cut here: it was longer than 200 characters]")
    );
    assert!(model.rounds.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_round_that_turns_into_tool_calls_is_replaced_on_screen_by_the_answer() {
    let call = ToolCall {
        id: "c1".into(),
        name: "lookup".into(),
        arguments: serde_json::json!({}),
    };
    let usage = |n| {
        Ok(StreamPart::Usage(Usage {
            input_tokens: n,
            output_tokens: 1,
        }))
    };
    let model = Scripted::new(
        vec![
            vec![text("Let me look."), Ok(StreamPart::Call(call)), usage(10)],
            vec![text("You like "), text("green tea."), usage(20)],
        ],
        Duration::from_secs(2),
    );
    let mut live = Recorder::default();
    let out = run(&model, &mut live, 1000).await.unwrap();
    assert_eq!(out.text, "You like green tea.", "only the answer is stored");
    assert_eq!(live.shown.first().map(String::as_str), Some("Let me look."));
    assert!(
        live.shown.iter().skip(1).all(|s| s.starts_with("You like")),
        "{:?}",
        live.shown
    );
    assert_eq!(
        (
            out.usage.map(|u| u.input_tokens),
            out.tool_usage.map(|u| u.input_tokens)
        ),
        (Some(10), Some(20)),
        "the first round's tokens are the answer's, the later round's the tools'"
    );
}
