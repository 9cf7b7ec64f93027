//! [`ModelSummarizer`]: the memory library's [`Summarizer`] seam implemented
//! over a [`Model`] (DESIGN §4). It owns the summary prompts — one per
//! [`SummaryKind`] — and the lenient reading of the reply: JSON with a
//! summary and durable facts, the same inside a ```json fence, or plain
//! prose (then all of it is the summary and there are no facts). A reply
//! that looks like JSON but does not parse (cut off mid-object) is a
//! failure, never prose: the caller retries and in the end falls back. A
//! summary longer than [`MAX_SUMMARY_CHARS`] is cut visibly.
//!
//! It never writes memory files (the caller does, and changes nothing when
//! this fails) and sees only the one user's data it is handed.

use super::{Model, ModelError, ModelRequest, Usage};
use async_trait::async_trait;
use mnemo_sessions::context::Context;
use mnemo_sessions::summarizer::{
    Fact, FactSection, SummarizeError, Summarizer, SummaryKind, SummaryOutput, SummaryRequest,
};
use serde_json::Value;
use std::sync::Arc;

tokio::task_local! {
    /// The tokens of the summarizer's calls made inside [`metered`].
    static SPENT: std::sync::Mutex<Usage>;
}

/// Runs `work` (a fold, a maintenance run) and returns, beside its
/// output, the tokens the [`ModelSummarizer`] reported for the calls it
/// made inside it, on this task: whose spending they are is the caller's
/// to say (a user's fold, the channel's digests). Calls a backend
/// reports no usage for add nothing.
pub async fn metered<F: std::future::Future>(work: F) -> (F::Output, Usage) {
    SPENT
        .scope(std::sync::Mutex::new(Usage::default()), async {
            let out = work.await;
            let spent = SPENT.with(|s| s.lock().map(|u| *u).unwrap_or_default());
            (out, spent)
        })
        .await
}

/// Adds a call's tokens to the [`metered`] scope it runs in, if any.
fn meter(usage: Option<Usage>) {
    let Some(usage) = usage else { return };
    let _ = SPENT.try_with(|s| {
        if let Ok(mut total) = s.lock() {
            total.input_tokens = total.input_tokens.saturating_add(usage.input_tokens);
            total.output_tokens = total.output_tokens.saturating_add(usage.output_tokens);
        }
    });
}

/// Summaries and facts from a model. Build its model from the `summarizer`
/// config section, which may name a cheaper model than chat uses.
pub struct ModelSummarizer {
    model: Arc<dyn Model>,
}

impl ModelSummarizer {
    pub fn new(model: Arc<dyn Model>) -> Self {
        ModelSummarizer { model }
    }

    /// What the summarizer asks, for logs and `mnemo config check`.
    pub fn describe(&self) -> String {
        self.model.describe()
    }
}

/// The reply format, spelled out in every prompt: `json_object` alone does
/// not say which object, and most backends have no such option at all.
const JSON_INSTRUCTIONS: &str = r#"Reply with one JSON object and nothing else:
{"summary": "...", "facts": [{"section": "preferences|facts|topics|notes", "key": "...", "value": "..."}]}
"facts" lists only durable facts about the user (preferences, names, people, projects, ongoing topics) that are new or changed compared with the profile; use short, stable keys (e.g. "language", "timezone", "employer") so a changed fact replaces the old one. Use an empty list when there is nothing new. Write in the language of the conversation."#;

fn instructions(kind: SummaryKind) -> String {
    let task = match kind {
        SummaryKind::Rolling => "You keep the running memory of one user's conversation with an assistant. \
             Fold the messages below into the previous summary: keep what still matters (decisions, open \
             questions, names, plans, preferences), drop small talk, and keep it under about 300 words."
            .to_string(),
        SummaryKind::Daily { day } => format!(
            "You write the daily summary of one user's conversation with an assistant on {day}: what was \
             discussed, decided and left open, in a few short paragraphs or bullet points."
        ),
        SummaryKind::Weekly { iso_year, iso_week } => format!(
            "You write the weekly summary of one user's conversations with an assistant for ISO week \
             {iso_year}-W{iso_week:02}, from that week's daily summaries below: themes, decisions, progress \
             and open threads, in a few short paragraphs or bullet points."
        ),
    };
    format!("{task}\n\n{JSON_INSTRUCTIONS}")
}

/// The material: previous summary, profile, notes, then the transcript.
fn material(request: &SummaryRequest<'_>) -> String {
    let section = |title: &str, body: Option<&str>| {
        let body = body.map(str::trim).filter(|b| !b.is_empty()).unwrap_or("(none)");
        format!("## {title}\n{body}\n")
    };
    let mut out = vec![
        section("Previous summary", request.previous_summary),
        section("User profile", request.profile),
    ];
    if !request.notes.is_empty() {
        let notes = request
            .notes
            .iter()
            .map(|n| n.trim())
            .collect::<Vec<_>>()
            .join("\n\n---\n\n");
        out.push(section("Daily summaries", Some(&notes)));
    }
    if !request.messages.is_empty() || request.notes.is_empty() {
        let transcript = request
            .messages
            .iter()
            .map(|m| format!("{}: {}", m.role.label(), m.text.trim()))
            .collect::<Vec<_>>()
            .join("\n");
        out.push(section("Messages", Some(&transcript)));
    }
    out.join("\n")
}

/// The longest summary kept: ten times what the prompts ask for, so only a
/// runaway reply is cut.
pub const MAX_SUMMARY_CHARS: usize = 20_000;

/// Reads a summarizer reply and caps its summary; `None` when there is
/// nothing usable in it.
fn parse_reply(reply: &str) -> Option<SummaryOutput> {
    let mut out = read_reply(reply)?;
    if let std::borrow::Cow::Owned(cut) = crate::reply_limit::cut(&out.summary, MAX_SUMMARY_CHARS) {
        tracing::warn!(
            chars = out.summary.chars().count(),
            "summary longer than {MAX_SUMMARY_CHARS} characters; cut"
        );
        out.summary = cut;
    }
    Some(out)
}

/// Whether a reply meant to be JSON: an object or array, a fence, or the
/// `"summary"` key. Such a reply that does not parse is broken, not prose.
fn looks_like_json(reply: &str, unfenced: &str) -> bool {
    reply.starts_with("```") || unfenced.starts_with(['{', '[']) || unfenced.contains("\"summary\"")
}

fn read_reply(reply: &str) -> Option<SummaryOutput> {
    let reply = reply.trim();
    let unfenced = strip_fence(reply);
    let json = serde_json::from_str::<Value>(unfenced).ok().or_else(|| {
        // JSON with a sentence around it ("Here is the summary: {…}").
        let (start, end) = (unfenced.find('{')?, unfenced.rfind('}')?);
        serde_json::from_str::<Value>(unfenced.get(start..=end)?).ok()
    });
    match json.filter(Value::is_object) {
        Some(json) => {
            let summary = json.get("summary").and_then(Value::as_str)?.trim().to_string();
            let facts = json
                .get("facts")
                .and_then(Value::as_array)
                .map(|facts| facts.iter().filter_map(read_fact).collect())
                .unwrap_or_default();
            (!summary.is_empty()).then_some(SummaryOutput { summary, facts })
        }
        None if looks_like_json(reply, unfenced) => None,
        None => (!reply.is_empty()).then(|| SummaryOutput {
            summary: reply.to_string(),
            facts: Vec::new(),
        }),
    }
}

/// Words of a plain-string fact that become its key.
const NOTE_KEY_WORDS: usize = 3;

/// One fact. A plain string (small local models answer so) is kept as a
/// note keyed by its first words; a malformed one is skipped rather than
/// costing the summary, with a warning that names what was wrong (never
/// the text: it is the user's).
fn read_fact(value: &Value) -> Option<Fact> {
    if let Some(text) = value.as_str() {
        let text = text.trim();
        if text.is_empty() {
            tracing::warn!(problem = "empty string", "summarizer fact skipped");
            return None;
        }
        let key = text
            .split_whitespace()
            .take(NOTE_KEY_WORDS)
            .collect::<Vec<_>>()
            .join(" ");
        return Some(Fact {
            section: FactSection::Notes,
            key,
            value: text.to_string(),
        });
    }
    let fact: Fact = match serde_json::from_value(value.clone()) {
        Ok(fact) => fact,
        Err(e) => {
            let problem = match value {
                Value::Object(_) => "object without a known section, key and value",
                _ => "neither an object nor a string",
            };
            tracing::warn!(problem, line = e.line(), column = e.column(), "summarizer fact skipped");
            return None;
        }
    };
    let usable = !fact.key.trim().is_empty() && !fact.value.trim().is_empty();
    if !usable {
        tracing::warn!(problem = "empty key or value", "summarizer fact skipped");
    }
    usable.then(|| Fact {
        key: fact.key.trim().to_string(),
        value: fact.value.trim().to_string(),
        ..fact
    })
}

/// The inside of a ```/```json fence, if `text` is one.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or("", |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

#[async_trait]
impl Summarizer for ModelSummarizer {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        let context = Context {
            system: instructions(request.kind),
            ..Default::default()
        };
        let call = ModelRequest::new(context, material(&request)).json();
        let reply = self.model.complete(&call).await.map_err(|e| match e {
            ModelError::Timeout { after } => SummarizeError::Timeout(after),
            other => SummarizeError::Failed(other.to_string()),
        })?;
        // Spent even when the reply turns out unusable.
        meter(reply.usage);
        parse_reply(&reply.text)
            .ok_or_else(|| SummarizeError::Failed("the model's reply had no summary in it; nothing was changed".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_with_a_sentence_around_it_is_still_read() {
        let out = parse_reply(r#"Here you go: {"summary": "S", "facts": []} Hope it helps."#).unwrap();
        assert_eq!(out.summary, "S");
    }

    #[test]
    fn malformed_facts_are_skipped_and_good_ones_kept() {
        let reply = r#"{"summary": "S", "facts": [
            {"section": "mood", "key": "k", "value": "v"},
            {"section": "facts", "key": " ", "value": "v"},
            {"section": "facts", "key": "pet", "value": " cat "}
        ]}"#;
        let out = parse_reply(reply).unwrap();
        assert_eq!(
            out.facts,
            vec![Fact {
                section: FactSection::Facts,
                key: "pet".into(),
                value: "cat".into()
            }]
        );
    }

    #[test]
    fn a_fact_given_as_a_plain_string_is_kept_as_a_note() {
        let reply = r#"{"summary": "S", "facts": ["Has a cat named Miso", "  ", 42]}"#;
        let out = parse_reply(reply).unwrap();
        assert_eq!(
            out.facts,
            vec![Fact {
                section: FactSection::Notes,
                key: "Has a cat".into(),
                value: "Has a cat named Miso".into()
            }]
        );
    }

    #[test]
    fn json_cut_off_midway_is_a_failure_not_a_summary() {
        assert_eq!(parse_reply(r#"{"summary": "The user moved to Lis"#), None);
        assert_eq!(parse_reply("```json\n{\"summary\": \"S\", \"facts\": [\n```"), None);
        assert_eq!(parse_reply(r#"Sure! {"summary": "half"#), None);
        assert_eq!(
            parse_reply("Plain prose about {braces}.").unwrap().summary,
            "Plain prose about {braces}."
        );
    }

    #[test]
    fn a_runaway_summary_is_capped() {
        let reply = serde_json::json!({ "summary": "word ".repeat(10_000), "facts": [] }).to_string();
        let out = parse_reply(&reply).unwrap();
        assert!(out.summary.chars().count() <= MAX_SUMMARY_CHARS);
        assert!(out.summary.ends_with("characters]"));
    }

    #[test]
    fn json_without_a_summary_or_an_empty_reply_is_unusable() {
        assert_eq!(parse_reply(r#"{"facts": []}"#), None);
        assert_eq!(parse_reply("  "), None);
    }

    #[test]
    fn a_weekly_prompt_names_the_iso_week_and_carries_the_daily_notes() {
        let notes = vec!["Monday: planned the trip.".to_string()];
        let request = SummaryRequest {
            kind: SummaryKind::Weekly {
                iso_year: 2026,
                iso_week: 3,
            },
            previous_summary: None,
            messages: &[],
            notes: &notes,
            profile: None,
        };
        assert!(instructions(request.kind).contains("2026-W03"));
        let text = material(&request);
        assert!(text.contains("Monday: planned the trip."), "{text}");
        assert!(!text.contains("## Messages"), "{text}");
    }
}
