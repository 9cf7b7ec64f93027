//! The rules a parsed config must keep (DESIGN §4). Each failure names the
//! field in the file's own camelCase path and says what is allowed.

use super::{CompactingConfig, ConfigError, ConfigFile, FieldError, SchedulerConfig, SessionConfig, StmConfig};
use std::path::Path;

/// Smallest and largest `context.maxTokens`: below the floor even a short
/// system prompt does not fit; above the ceiling no model has the window.
pub const MIN_MAX_TOKENS: usize = 256;
pub const MAX_MAX_TOKENS: usize = 2_000_000;
/// Shortest non-zero `archiveKeepDays` / `summaryKeepDays`.
pub const MIN_KEEP_DAYS: u32 = 14;

/// serde also accepts a JSON array for a struct (fields by position), so
/// `"context": [6000]` would parse; every section must be an object with
/// named fields instead. Called only on text that already parsed.
pub fn sections_are_objects(text: &str, path: &Path) -> Result<(), ConfigError> {
    let Ok(serde_json::Value::Object(sections)) = serde_json::from_str(text) else {
        return Ok(());
    };
    match sections.iter().find(|(_, value)| !value.is_object()) {
        Some((name, value)) => Err(ConfigError::invalid(
            ConfigFile::Sessions,
            path,
            FieldError::new(
                name.clone(),
                format!(
                    "it is {}, but must be an object of named fields, e.g. `\"{name}\": {{ … }}`",
                    kind(value)
                ),
            ),
        )),
        None => Ok(()),
    }
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Builds the error for a field: its camelCase path and what is allowed.
type Invalid<'a> = &'a dyn Fn(&str, String) -> ConfigError;

/// The first rule `config` breaks, as an error naming `path` and the field.
/// Sections are checked in the file's order.
pub fn check(config: &SessionConfig, path: &Path) -> Result<(), ConfigError> {
    let invalid =
        |field: &str, reason: String| ConfigError::invalid(ConfigFile::Sessions, path, FieldError::new(field, reason));
    check_stm(&config.stm, &invalid)?;
    check_compacting(&config.compacting, &config.stm, &invalid)?;
    check_scheduler(&config.scheduler, &invalid)?;
    check_budgets(config, &invalid)
}

/// `field` is at least 1, or an error saying `why` it must be.
fn at_least_one(invalid: Invalid<'_>, field: &str, value: u64, why: &str) -> Result<(), ConfigError> {
    if value == 0 {
        Err(invalid(field, format!("it is 0, but must be at least 1: {why}")))
    } else {
        Ok(())
    }
}

fn check_stm(stm: &StmConfig, invalid: Invalid<'_>) -> Result<(), ConfigError> {
    at_least_one(
        invalid,
        "stm.maxMessages",
        stm.max_messages as u64,
        "it bounds how many messages the log keeps",
    )?;
    at_least_one(
        invalid,
        "stm.maxAgeMinutes",
        stm.max_age_minutes,
        "0 would fold every message into the summary before the model sees it",
    )?;
    Ok(())
}

/// Compaction's rules, some of them against the STM bounds it works in.
fn check_compacting(compacting: &CompactingConfig, stm: &StmConfig, invalid: Invalid<'_>) -> Result<(), ConfigError> {
    if compacting.threshold <= stm.context_window {
        return Err(invalid(
            "compacting.threshold",
            format!(
                "it is {}, but must be greater than stm.contextWindow ({}): compaction keeps the last contextWindow messages and folds the rest, so it needs more than that to fold",
                compacting.threshold, stm.context_window
            ),
        ));
    }
    if compacting.threshold > stm.max_messages {
        return Err(invalid(
            "compacting.threshold",
            format!(
                "it is {}, but must not exceed stm.maxMessages ({}): summarizing has to start before the hard bound drops messages unsummarized; lower the threshold or raise stm.maxMessages",
                compacting.threshold, stm.max_messages
            ),
        ));
    }
    if compacting.daily_summary_hour > 23 {
        return Err(invalid(
            "compacting.dailySummaryHour",
            format!(
                "it is {}, but must be an hour from 0 to 23",
                compacting.daily_summary_hour
            ),
        ));
    }
    if compacting.weekly_summary_day > 6 {
        return Err(invalid(
            "compacting.weeklySummaryDay",
            format!(
                "it is {}, but must be a day from 0 (Sunday) to 6 (Saturday)",
                compacting.weekly_summary_day
            ),
        ));
    }
    at_least_one(
        invalid,
        "compacting.maxFailures",
        u64::from(compacting.max_failures),
        "it is how many failed summaries are tolerated before the sliding window takes over",
    )?;
    at_least_one(
        invalid,
        "compacting.summarizerTimeoutSecs",
        compacting.summarizer_timeout_secs,
        "a summarizer call needs some time to answer",
    )?;
    Ok(())
}

fn check_scheduler(scheduler: &SchedulerConfig, invalid: Invalid<'_>) -> Result<(), ConfigError> {
    at_least_one(
        invalid,
        "scheduler.logRotateDays",
        u64::from(scheduler.log_rotate_days),
        "0 would delete today's log while it is written",
    )?;
    at_least_one(
        invalid,
        "scheduler.stmExpireDays",
        u64::from(scheduler.stm_expire_days),
        "0 would expire a conversation while it is going on",
    )?;
    at_least_one(
        invalid,
        "scheduler.cleanupIntervalMinutes",
        scheduler.cleanup_interval_minutes,
        "0 would run maintenance in a busy loop",
    )?;
    at_least_one(
        invalid,
        "scheduler.maxSummariesPerRun",
        scheduler.max_summaries_per_run as u64,
        "0 would never write a daily or weekly summary",
    )?;
    at_least_one(
        invalid,
        "scheduler.summaryConcurrency",
        scheduler.summary_concurrency as u64,
        "0 would never run a summary",
    )?;
    at_least_one(
        invalid,
        "scheduler.exportKeepDays",
        u64::from(scheduler.export_keep_days),
        "0 could delete an export before its owner fetched it",
    )?;
    // Weeklies are written from the last completed week's dailies, and a
    // catch-up after an outage reads the archive of up to a week back:
    // shorter keep times would delete what a summary still needs.
    for (field, days) in [
        ("scheduler.archiveKeepDays", scheduler.archive_keep_days),
        ("scheduler.summaryKeepDays", scheduler.summary_keep_days),
    ] {
        if (1..MIN_KEEP_DAYS).contains(&days) {
            return Err(invalid(
                field,
                format!(
                    "it is {days}, but must be 0 (keep forever) or at least {MIN_KEEP_DAYS}: weekly summaries and catch-ups still read the last two weeks"
                ),
            ));
        }
    }
    Ok(())
}

/// The token budgets (the context, and recall's part of it) and the
/// profile's size.
fn check_budgets(config: &SessionConfig, invalid: Invalid<'_>) -> Result<(), ConfigError> {
    let tokens = config.context.max_tokens;
    if !(MIN_MAX_TOKENS..=MAX_MAX_TOKENS).contains(&tokens) {
        return Err(invalid(
            "context.maxTokens",
            format!(
                "it is {tokens}, but must be between {MIN_MAX_TOKENS} and {MAX_MAX_TOKENS} (an estimate of the model's context budget, characters / 4)"
            ),
        ));
    }
    at_least_one(
        invalid,
        "ltm.maxProfileChars",
        config.ltm.max_profile_chars as u64,
        "0 would leave no room for a profile",
    )?;
    let recall = config.recall.max_tokens;
    if config.recall.enabled && (recall == 0 || recall >= tokens) {
        return Err(invalid(
            "recall.maxTokens",
            format!(
                "it is {recall}, but must be at least 1 and less than context.maxTokens ({tokens}): recalled items are part of the context, next to the recent messages"
            ),
        ));
    }
    if let Some(embeddings) = &config.recall.embeddings {
        if !config.recall.enabled {
            return Err(invalid(
                "recall.embeddings",
                "it is set, but recall.enabled is false, so nothing would use it: remove it, or turn recall on".into(),
            ));
        }
        check_embeddings(embeddings, invalid)?;
    }
    Ok(())
}

/// Longest `recall.embeddings.queryTimeoutMs`: the person waits that long
/// at worst before BM25 answers alone.
pub const MAX_QUERY_TIMEOUT_MS: u64 = 10_000;

/// The rules of `recall.embeddings` this crate owns. The endpoint's
/// `baseUrl` and `apiKeyEnv` are checked by the broker when it builds the
/// client, with the very checks of the `summarizer` section (a start with a
/// bad one fails naming this file and the field).
fn check_embeddings(embeddings: &super::EmbeddingsConfig, invalid: Invalid<'_>) -> Result<(), ConfigError> {
    if embeddings.model.trim().is_empty() {
        return Err(invalid(
            "recall.embeddings.model",
            "it is empty, but must name the embedding model, e.g. \"text-embedding-3-small\" (OpenAI), \"mistral-embed\" (Mistral) or \"nomic-embed-text\" (Ollama)".into(),
        ));
    }
    if !(1..=MAX_QUERY_TIMEOUT_MS).contains(&embeddings.query_timeout_ms) {
        return Err(invalid(
            "recall.embeddings.queryTimeoutMs",
            format!(
                "it is {}, but must be between 1 and {MAX_QUERY_TIMEOUT_MS}: a turn waits this long for the question's vector before BM25 answers alone",
                embeddings.query_timeout_ms
            ),
        ));
    }
    Ok(())
}
