//! An in-process summarizer for tests: scripted replies (a summary with
//! facts, a failure, or a hang), an optional gate that holds it until the
//! test releases it, and a record of every request it saw. With no script
//! left it answers deterministically: the previous summary plus one line
//! naming every folded message id, so a test can tell exactly what was
//! folded.

use async_trait::async_trait;
use mnemo_sessions::summarizer::{Fact, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, Semaphore};

pub enum Reply {
    Facts(Vec<Fact>),
    Fail(&'static str),
    Hang,
    /// A blank summary, as a confused model might return.
    Blank,
}

/// What the fake was asked.
#[derive(Clone, Debug)]
pub struct Seen {
    pub previous: Option<String>,
    pub msg_ids: Vec<String>,
    pub profile: Option<String>,
}

/// Holds the summarizer until released; tells the test when it is entered.
pub struct Gate {
    pub entered: Notify,
    release: Semaphore,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            entered: Notify::new(),
            release: Semaphore::new(0),
        }
    }
}

impl Gate {
    pub fn release(&self) {
        self.release.add_permits(1);
    }
}

#[derive(Default)]
pub struct FakeSummarizer {
    script: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
    gate: Option<Arc<Gate>>,
}

impl FakeSummarizer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn scripted(replies: impl IntoIterator<Item = Reply>) -> Arc<Self> {
        Arc::new(FakeSummarizer {
            script: Mutex::new(replies.into_iter().collect()),
            ..Self::default()
        })
    }

    pub fn gated() -> (Arc<Self>, Arc<Gate>) {
        let gate = Arc::new(Gate::default());
        (
            Arc::new(FakeSummarizer {
                gate: Some(gate.clone()),
                ..Self::default()
            }),
            gate,
        )
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// The deterministic summary of a request.
pub fn summary_text(previous: Option<&str>, msg_ids: &[String]) -> String {
    let line = format!("folded: {}", msg_ids.join(" "));
    match previous {
        Some(p) => format!("{p}\n{line}"),
        None => line,
    }
}

#[async_trait]
impl Summarizer for FakeSummarizer {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        let msg_ids: Vec<String> = request.messages.iter().map(|r| r.msg_id.clone()).collect();
        self.seen.lock().unwrap().push(Seen {
            previous: request.previous_summary.map(str::to_string),
            msg_ids: msg_ids.clone(),
            profile: request.profile.map(str::to_string),
        });
        if let Some(gate) = &self.gate {
            gate.entered.notify_one();
            gate.release.acquire().await.unwrap().forget();
        }
        let reply = self.script.lock().unwrap().pop_front();
        let facts = match reply {
            Some(Reply::Blank) => {
                return Ok(SummaryOutput {
                    summary: " \n".into(),
                    facts: Vec::new(),
                });
            }
            None => Vec::new(),
            Some(Reply::Facts(facts)) => facts,
            Some(Reply::Fail(why)) => return Err(SummarizeError::Failed(why.to_string())),
            Some(Reply::Hang) => std::future::pending().await,
        };
        Ok(SummaryOutput {
            summary: summary_text(request.previous_summary, &msg_ids),
            facts,
        })
    }
}
