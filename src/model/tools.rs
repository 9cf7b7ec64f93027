//! Native tool calling and the bounded tool loop: the types a backend
//! translates to its API (`tools`/`tool_calls`/`role: tool` on openai,
//! `tools`/`tool_use`/`tool_result` on anthropic), the [`ToolExecutor`] the
//! broker hands in, and [`answer`], which asks the model, runs the tools it
//! calls, and asks again — at most `model.maxToolRounds` rounds of tools,
//! then one last call with tools switched off, whose reply is the answer.
//!
//! Each round is one [`Ask`]: [`Whole`] (`complete`) by default; the
//! broker's streaming asker (`crate::streaming`) streams every round
//! instead, so the same loop serves both.
//!
//! It knows no tool: what a tool does, and whose memory it touches, is the
//! executor's (built for one caller; see `crate::memory_tools`). Tool results
//! count against the context budget: each is cut, visibly, to what is left.

use super::{Model, ModelError, ModelReply, ModelRequest, Usage};
use async_trait::async_trait;
use serde_json::Value;

/// A tool offered to the model: its name, what it is for, and a JSON Schema
/// of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// One call the model asked for. `arguments` is what the model sent,
/// parsed; a model that sent text that is not JSON gets `Value::Null` and
/// the executor refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// What a call returned, sent back to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    pub call_id: String,
    pub content: String,
    pub is_error: bool,
}

/// One finished round: the model's calls (with any text it wrote beside
/// them) and their results, in call order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolRound {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub results: Vec<ToolResult>,
}

/// The tools of one request, and whether the model may call them this time
/// (`false` on the last round: the answer must be text).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOffer {
    pub specs: Vec<ToolSpec>,
    pub may_call: bool,
}

/// Runs the tools of one turn for one caller.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    fn specs(&self) -> Vec<ToolSpec>;
    async fn call(&self, call: &ToolCall) -> ToolResult;
}

/// Calls run per round at most; more get an error result each.
pub const MAX_CALLS_PER_ROUND: usize = 8;
/// Characters of one tool result at most, whatever budget is left.
pub const MAX_RESULT_CHARS: usize = 4_000;

/// What the loop may spend.
#[derive(Clone, Copy, Debug)]
pub struct ToolLimits {
    /// `model.maxToolRounds`: rounds of tool calls before the final answer.
    pub max_rounds: usize,
    /// Characters of tool results the context budget still has room for.
    pub budget_chars: usize,
}

/// How one round asks the model: its reply (text, any tool calls, usage).
#[async_trait]
pub trait Ask: Send {
    async fn ask(&mut self, model: &dyn Model, request: &ModelRequest) -> Result<ModelReply, ModelError>;
}

/// Each round asked whole ([`Model::complete`]).
pub struct Whole;

#[async_trait]
impl Ask for Whole {
    async fn ask(&mut self, model: &dyn Model, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        model.complete(request).await
    }
}

/// The loop's answer: its text, and the tokens spent, split as
/// `mnemo sessions usage` shows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answered {
    pub text: String,
    /// The first call's (`answer`).
    pub usage: Option<Usage>,
    /// Every later call's, summed: the calls that carried tool results
    /// back (`tools`); `None` when the model called no tool.
    pub tool_usage: Option<Usage>,
}

impl Answered {
    /// Every call's tokens.
    pub fn total_usage(&self) -> Option<Usage> {
        add_usage(self.usage, self.tool_usage)
    }
}

/// The reply to `request`, letting the model use `tools` first when the
/// backend supports them and `limits.max_rounds > 0`; otherwise one plain
/// call.
pub async fn answer(
    model: &dyn Model,
    request: ModelRequest,
    tools: Option<&dyn ToolExecutor>,
    limits: ToolLimits,
) -> Result<Answered, ModelError> {
    answer_with(model, request, tools, limits, &mut Whole).await
}

/// [`answer`], each round asked by `asker`.
pub async fn answer_with(
    model: &dyn Model,
    mut request: ModelRequest,
    tools: Option<&dyn ToolExecutor>,
    limits: ToolLimits,
    asker: &mut dyn Ask,
) -> Result<Answered, ModelError> {
    let Some(tools) = tools.filter(|_| model.supports_tools() && limits.max_rounds > 0) else {
        let reply = asker.ask(model, &request).await?;
        return Ok(Answered {
            text: reply.text,
            usage: reply.usage,
            tool_usage: None,
        });
    };
    let mut offer = ToolOffer {
        specs: tools.specs(),
        may_call: true,
    };
    let mut budget = limits.budget_chars;
    let (mut usage, mut tool_usage): (Option<Usage>, Option<Usage>) = (None, None);
    for round in 0..=limits.max_rounds {
        offer.may_call = round < limits.max_rounds;
        request.tools = Some(offer.clone());
        let reply = asker.ask(model, &request).await?;
        if round == 0 {
            usage = reply.usage;
        } else {
            tool_usage = add_usage(tool_usage, reply.usage);
        }
        if reply.tool_calls.is_empty() || !offer.may_call {
            if reply.text.trim().is_empty() && !reply.tool_calls.is_empty() {
                return Err(ModelError::Protocol {
                    detail: "the model kept calling tools after the last allowed round and gave no answer".into(),
                });
            }
            return Ok(Answered {
                text: reply.text,
                usage,
                tool_usage,
            });
        }
        let mut results = Vec::with_capacity(reply.tool_calls.len());
        for (n, call) in reply.tool_calls.iter().enumerate() {
            let result = if n < MAX_CALLS_PER_ROUND {
                tools.call(call).await
            } else {
                ToolResult {
                    call_id: call.id.clone(),
                    content: format!("refused: at most {MAX_CALLS_PER_ROUND} tool calls per round"),
                    is_error: true,
                }
            };
            results.push(within_budget(result, &mut budget));
        }
        request.rounds.push(ToolRound {
            text: reply.text,
            calls: reply.tool_calls,
            results,
        });
    }
    // The last round has tools switched off, so the loop returned above.
    Err(ModelError::Protocol {
        detail: "the tool loop ended without an answer".into(),
    })
}

/// Two calls' tokens together (`None` only when neither reported any).
pub fn add_usage(total: Option<Usage>, more: Option<Usage>) -> Option<Usage> {
    match (total, more) {
        (Some(a), Some(b)) => Some(Usage {
            input_tokens: a.input_tokens + b.input_tokens,
            output_tokens: a.output_tokens + b.output_tokens,
        }),
        (a, b) => a.or(b),
    }
}

/// Cuts `result` to what the budget (and [`MAX_RESULT_CHARS`]) leaves,
/// with a marker naming how much was cut, and charges the budget.
fn within_budget(mut result: ToolResult, budget: &mut usize) -> ToolResult {
    let room = (*budget).min(MAX_RESULT_CHARS);
    let total = result.content.chars().count();
    if total > room {
        let kept: String = result.content.chars().take(room).collect();
        tracing::info!(cut_chars = total - room, "tool result cut to the context budget");
        result.content = format!(
            "{kept}\n[cut: {} more characters did not fit the context budget]",
            total - room
        );
    }
    *budget = budget.saturating_sub(total.min(room));
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeltaStream;
    use std::sync::Mutex;

    /// A model that calls the `echo` tool until told it may not.
    struct Caller {
        requests: Mutex<Vec<ModelRequest>>,
    }

    #[async_trait]
    impl Model for Caller {
        async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
            self.requests.lock().unwrap().push(request.clone());
            let may_call = request.tools.as_ref().is_some_and(|t| t.may_call);
            Ok(ModelReply {
                text: if may_call { String::new() } else { "done".into() },
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 1,
                }),
                tool_calls: if may_call {
                    vec![ToolCall {
                        id: format!("c{}", request.rounds.len()),
                        name: "echo".into(),
                        arguments: Value::Null,
                    }]
                } else {
                    Vec::new()
                },
            })
        }
        async fn stream(&self, _: &ModelRequest) -> Result<DeltaStream, ModelError> {
            unreachable!("the loop does not stream")
        }
        fn describe(&self) -> String {
            "caller".into()
        }
        fn supports_tools(&self) -> bool {
            true
        }
    }

    struct Echo;

    #[async_trait]
    impl ToolExecutor for Echo {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "echo",
                description: "echo",
                parameters: Value::Null,
            }]
        }
        async fn call(&self, call: &ToolCall) -> ToolResult {
            ToolResult {
                call_id: call.id.clone(),
                content: "x".repeat(30),
                is_error: false,
            }
        }
    }

    #[tokio::test]
    async fn a_model_that_keeps_calling_tools_is_stopped_after_max_rounds_and_answers() {
        let model = Caller {
            requests: Mutex::new(Vec::new()),
        };
        let limits = ToolLimits {
            max_rounds: 2,
            budget_chars: 50,
        };
        let reply = answer(&model, ModelRequest::default(), Some(&Echo), limits)
            .await
            .unwrap();
        assert_eq!(reply.text, "done");
        // The first call is the answer's, the two that carried tool
        // results back are the tools'.
        assert_eq!(reply.usage.map(|u| u.input_tokens), Some(10));
        assert_eq!(
            reply.tool_usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((20, 2))
        );
        assert_eq!(reply.total_usage().map(|u| u.input_tokens), Some(30));
        let requests = model.requests.lock().unwrap();
        assert_eq!(requests.len(), 3);
        assert!(!requests[2].tools.as_ref().unwrap().may_call);
        let results: Vec<&str> = requests[2]
            .rounds
            .iter()
            .map(|r| r.results[0].content.as_str())
            .collect();
        assert_eq!(results[0], "x".repeat(30));
        assert!(results[1].starts_with(&"x".repeat(20)) && results[1].contains("[cut: 10 more"));
    }

    #[tokio::test]
    async fn no_rounds_or_no_tool_support_means_one_plain_call() {
        let model = Caller {
            requests: Mutex::new(Vec::new()),
        };
        let limits = ToolLimits {
            max_rounds: 0,
            budget_chars: 50,
        };
        let reply = answer(&model, ModelRequest::default(), Some(&Echo), limits)
            .await
            .unwrap();
        assert_eq!(reply.text, "done");
        assert_eq!(
            (reply.usage.map(|u| u.input_tokens), reply.tool_usage),
            (Some(10), None)
        );
        assert!(model.requests.lock().unwrap()[0].tools.is_none());
    }
}
