//! The seam between memory and the model: `sessions` asks a [`Summarizer`]
//! to fold messages into a summary and to pull durable facts out of them.
//! The crate ships no network code; the broker implements this trait over its
//! model backend, and tests use an in-process fake.

use crate::record::Record;
use async_trait::async_trait;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What kind of summary is asked for; the implementation may phrase its
/// prompt differently for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryKind {
    /// Fold older STM messages into the rolling `summary.md`.
    Rolling,
    /// One day of a user's messages.
    Daily { day: NaiveDate },
    /// One ISO week, from that week's daily summaries (`notes`).
    Weekly { iso_year: i32, iso_week: u32 },
}

/// Everything the summarizer sees. Only the one user's data is ever put in
/// here (DESIGN §4: one user's memory never reaches another's prompt).
#[derive(Clone, Debug)]
pub struct SummaryRequest<'a> {
    pub kind: SummaryKind,
    /// The previous rolling summary, if any (body only, no frontmatter).
    pub previous_summary: Option<&'a str>,
    /// The messages to fold, oldest first.
    pub messages: &'a [Record],
    /// Extra texts to combine, e.g. the daily summaries of a week.
    pub notes: &'a [String],
    /// The user's current long-term profile (body), so the summarizer can
    /// tell what is new and what changed.
    pub profile: Option<&'a str>,
}

/// Which profile section a fact belongs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactSection {
    Preferences,
    Facts,
    Topics,
    Notes,
}

/// One durable fact, keyed so a changed fact can replace the old one
/// (`{"section":"preferences","key":"language","value":"Traditional Chinese"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    pub section: FactSection,
    pub key: String,
    pub value: String,
}

/// The summarizer's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SummaryOutput {
    pub summary: String,
    pub facts: Vec<Fact>,
}

/// Why a summary could not be had. Either way, the caller changes nothing
/// and tries again later.
#[derive(Debug, thiserror::Error)]
pub enum SummarizeError {
    #[error("the summarizer timed out after {0:?}")]
    Timeout(Duration),
    #[error("the summarizer failed: {0}")]
    Failed(String),
}

#[async_trait]
pub trait Summarizer: Send + Sync {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError>;
}

/// `summarizer`'s summary for a fold, given `timeout`: a timeout is
/// [`SummarizeError::Timeout`], and an empty summary is a failure too (it
/// would replace the previous summary with nothing). Both compactors, the
/// files' and the database's, fold through this.
pub async fn rolling_summary(
    summarizer: &dyn Summarizer,
    request: SummaryRequest<'_>,
    timeout: Duration,
) -> Result<SummaryOutput, SummarizeError> {
    let output = match tokio::time::timeout(timeout, summarizer.summarize(request)).await {
        Ok(result) => result?,
        Err(_) => return Err(SummarizeError::Timeout(timeout)),
    };
    if output.summary.trim().is_empty() {
        return Err(SummarizeError::Failed(
            "the summarizer returned an empty summary".into(),
        ));
    }
    Ok(output)
}

/// The summarizer of a process without a model (an operator's verb acting
/// for a user): every call fails, so a fold or summary it is asked for
/// changes nothing (the rule for any summarizer failure) and is done by a
/// broker later.
pub struct NoModel;

#[async_trait]
impl Summarizer for NoModel {
    async fn summarize(&self, _: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        Err(SummarizeError::Failed("no model in this process".into()))
    }
}
