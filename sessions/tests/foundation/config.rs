//! `sessions/config.json`: defaults, overrides, and errors that name the
//! file and the field.

use mnemo_sessions::config::{ConfigError, Position, Problem, SessionConfig};
use std::path::Path;

const FILE: &str = "/state/channels/slack/sessions/config.json";

fn parse(text: &str) -> Result<SessionConfig, ConfigError> {
    SessionConfig::parse(text, Path::new(FILE))
}

/// Parses `text`, expects an error about `field`, and checks its message
/// names the file and the field.
fn error_about(text: &str, field: &str) -> ConfigError {
    let err = parse(text).unwrap_err();
    let message = err.to_string();
    assert_eq!(err.field(), Some(field), "{message}");
    assert!(message.contains(FILE), "names the file: {message}");
    assert!(message.contains(&format!("`{field}`")), "names the field: {message}");
    err
}

#[test]
fn a_missing_file_means_every_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = SessionConfig::load(&dir.path().join("config.json")).unwrap();
    assert_eq!(config, SessionConfig::default());
    assert_eq!(config.stm.context_window, 10);
    assert_eq!(config.compacting.threshold, 50);
    assert_eq!(config.compacting.weekly_summary_weekday(), chrono::Weekday::Sun);
    assert_eq!(config.scheduler.cleanup_interval_minutes, 60);
    assert_eq!(config.context.max_tokens, 6000);
    assert_eq!(config.ltm.max_profile_chars, 4000);
    assert!(config.stm.fsync);
}

#[test]
fn the_documented_defaults_file_parses_to_the_defaults_and_back() {
    let documented = r#"{
      "stm":        { "maxMessages": 50, "maxAgeMinutes": 120, "contextWindow": 10, "fsync": true },
      "compacting": { "enabled": true, "threshold": 50, "dailySummaryHour": 3, "weeklySummaryDay": 0,
                      "maxFailures": 3, "summarizerTimeoutSecs": 120 },
      "scheduler":  { "logRotateDays": 7, "stmExpireDays": 3, "cleanupIntervalMinutes": 60,
                      "maxSummariesPerRun": 200, "summaryConcurrency": 2, "exportKeepDays": 7,
                      "archiveKeepDays": 0, "summaryKeepDays": 0, "logKeepDays": 0 },
      "context":    { "maxTokens": 6000 },
      "ltm":        { "maxProfileChars": 4000 },
      "recall":     { "enabled": true, "maxTokens": 1500 }
    }"#;
    let config = parse(documented).unwrap();
    assert_eq!(config, SessionConfig::default());
    let printed = serde_json::to_value(&config).unwrap();
    assert_eq!(printed, serde_json::from_str::<serde_json::Value>(documented).unwrap());
}

#[test]
fn fields_left_out_keep_their_defaults() {
    let config = parse(r#"{ "stm": { "contextWindow": 4 }, "compacting": { "threshold": 20 } }"#).unwrap();
    assert_eq!(config.stm.context_window, 4);
    assert_eq!(config.compacting.threshold, 20);
    assert_eq!(config.stm.max_messages, 50);
    assert_eq!(config.scheduler, SessionConfig::default().scheduler);
    assert_eq!(parse("{}").unwrap(), SessionConfig::default());
}

#[test]
fn an_unknown_field_is_refused_by_its_path() {
    let err = error_about(r#"{ "stm": { "contextWindows": 5 } }"#, "stm.contextWindows");
    assert!(matches!(err.problem, Problem::Field(_)), "{err}");
    assert!(matches!(err.at, Some(Position { line: 1, .. })), "{err}");
    assert!(err.to_string().contains("unknown field"));
    error_about(r#"{ "stmm": {} }"#, "stmm");
    error_about(r#"{ "recall": { "maxToken": 900 } }"#, "recall.maxToken");
}

#[test]
fn a_wrong_type_is_refused_by_its_path_and_line() {
    let err = error_about(
        "{\n  \"stm\": {\n    \"contextWindow\": \"ten\"\n  }\n}",
        "stm.contextWindow",
    );
    assert!(matches!(err.problem, Problem::Field(_)), "{err}");
    assert!(matches!(err.at, Some(Position { line: 3, .. })), "{err}");
    assert!(err.to_string().contains("line 3, column"), "{err}");
    error_about(r#"{ "compacting": { "enabled": "yes" } }"#, "compacting.enabled");
    error_about(r#"{ "scheduler": { "stmExpireDays": -1 } }"#, "scheduler.stmExpireDays");
    error_about(r#"{ "context": [] }"#, "context");
    error_about(r#"{ "context": [6000] }"#, "context");
    error_about(r#"{ "recall": { "enabled": "on" } }"#, "recall.enabled");
    error_about(r#"{ "recall": { "maxTokens": "1500" } }"#, "recall.maxTokens");
}

#[test]
fn invalid_json_is_refused_with_line_and_column() {
    let err = parse("{\n  \"stm\": { \"maxMessages\": 50, }\n}").unwrap_err();
    assert!(matches!(err.problem, Problem::Syntax(_)), "{err}");
    assert!(matches!(err.at, Some(Position { line: 2, .. })), "{err}");
    assert!(err.to_string().contains("line 2, column"), "{err}");
    assert!(err.to_string().contains(FILE));
    let err = parse("{} trailing").unwrap_err();
    assert!(matches!(err.problem, Problem::Syntax(_)), "{err}");
}

#[test]
fn an_empty_file_or_a_non_object_is_refused() {
    for text in ["", "  \n", "\u{feff}"] {
        assert!(
            matches!(parse(text).map_err(|e| e.problem), Err(Problem::Empty)),
            "{text:?}"
        );
    }
    for text in ["[]", "null", "42", "\"stm\""] {
        let err = parse(text).unwrap_err();
        assert!(matches!(err.problem, Problem::NotAnObject), "{text:?}");
        assert!(err.to_string().contains(FILE));
    }
}

#[test]
fn values_that_break_the_rules_are_refused_by_field() {
    let cases = [
        (
            r#"{"stm":{"contextWindow":50}}"#,
            "compacting.threshold",
            "greater than stm.contextWindow",
        ),
        (
            r#"{"stm":{"maxMessages":30}}"#,
            "compacting.threshold",
            "must not exceed stm.maxMessages",
        ),
        (r#"{"stm":{"maxMessages":0}}"#, "stm.maxMessages", "at least 1"),
        (
            r#"{"scheduler":{"archiveKeepDays":3}}"#,
            "scheduler.archiveKeepDays",
            "0 (keep forever) or at least 14",
        ),
        (
            r#"{"scheduler":{"summaryKeepDays":13}}"#,
            "scheduler.summaryKeepDays",
            "0 (keep forever) or at least 14",
        ),
        (
            r#"{"recall":{"maxTokens":6000}}"#,
            "recall.maxTokens",
            "less than context.maxTokens (6000)",
        ),
        (r#"{"recall":{"maxTokens":0}}"#, "recall.maxTokens", "at least 1"),
        (r#"{"stm":{"maxAgeMinutes":0}}"#, "stm.maxAgeMinutes", "at least 1"),
        (
            r#"{"compacting":{"dailySummaryHour":24}}"#,
            "compacting.dailySummaryHour",
            "0 to 23",
        ),
        (
            r#"{"compacting":{"weeklySummaryDay":7}}"#,
            "compacting.weeklySummaryDay",
            "6 (Saturday)",
        ),
        (
            r#"{"compacting":{"maxFailures":0}}"#,
            "compacting.maxFailures",
            "at least 1",
        ),
        (
            r#"{"compacting":{"summarizerTimeoutSecs":0}}"#,
            "compacting.summarizerTimeoutSecs",
            "at least 1",
        ),
        (
            r#"{"scheduler":{"logRotateDays":0}}"#,
            "scheduler.logRotateDays",
            "at least 1",
        ),
        (
            r#"{"scheduler":{"stmExpireDays":0}}"#,
            "scheduler.stmExpireDays",
            "at least 1",
        ),
        (
            r#"{"scheduler":{"cleanupIntervalMinutes":0}}"#,
            "scheduler.cleanupIntervalMinutes",
            "at least 1",
        ),
        (
            r#"{"scheduler":{"maxSummariesPerRun":0}}"#,
            "scheduler.maxSummariesPerRun",
            "at least 1",
        ),
        (
            r#"{"scheduler":{"summaryConcurrency":0}}"#,
            "scheduler.summaryConcurrency",
            "at least 1",
        ),
        (r#"{"context":{"maxTokens":10}}"#, "context.maxTokens", "between"),
        (r#"{"ltm":{"maxProfileChars":0}}"#, "ltm.maxProfileChars", "at least 1"),
    ];
    for (text, field, says) in cases {
        let err = error_about(text, field);
        assert!(matches!(err.problem, Problem::Invalid(_)), "{text}: {err}");
        assert_eq!(err.at, None, "found after parsing: {err}");
        assert!(err.to_string().contains(says), "{text}: {err}");
    }
}

#[test]
fn a_context_window_of_zero_is_allowed() {
    let config = parse(r#"{"stm":{"contextWindow":0}}"#).unwrap();
    assert_eq!(config.stm.context_window, 0);
}

#[test]
fn an_unreadable_file_is_an_error_not_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let err = SessionConfig::load(dir.path()).unwrap_err();
    assert!(matches!(err.problem, Problem::Read(_)), "{err}");
    assert!(err.to_string().contains(&dir.path().display().to_string()));
}
