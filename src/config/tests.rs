use super::*;
use mnemo_sessions::config::Problem;

fn parse(text: &str) -> Result<AppConfig, ConfigError> {
    AppConfig::parse(text, Path::new("/etc/mnemo/config.json"))
}

fn field_error(text: &str) -> (String, String) {
    match parse(text) {
        Err(
            e @ ConfigError {
                problem: Problem::Field(_) | Problem::Invalid(_),
                ..
            },
        ) => {
            assert_eq!(e.path, Path::new("/etc/mnemo/config.json"));
            assert!(
                e.to_string()
                    .starts_with("the app config /etc/mnemo/config.json, field `"),
                "{e}"
            );
            (e.field.clone().unwrap_or_default(), e.reason())
        }
        other => panic!("expected a field error for {text}, got {other:?}"),
    }
}

#[test]
fn an_empty_object_gives_the_documented_defaults() {
    let c = parse("{}").unwrap();
    assert_eq!(c.state_dir, "~/.mnemo");
    assert_eq!(c.timezone, "UTC");
    assert!(c.channels.console.enabled && !c.channels.telegram.enabled);
    assert_eq!(c.limits, LimitsConfig::default());
    assert_eq!(c.limits.max_concurrent_model_calls, 8);
    assert_eq!(c.limits.max_message_chars, 8000);
    assert_eq!(c.limits.user_messages_per_minute, 10);
}

#[test]
fn the_example_config_parses_and_shows_every_section() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.json")).unwrap();
    let c = AppConfig::parse(&text, Path::new("config.example.json")).unwrap();
    assert!(c.model.is_some() && c.summarizer.is_some());
}

#[test]
fn the_example_summarizer_follows_the_model_to_another_provider() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.json")).unwrap();
    let mut c = AppConfig::parse(&text, Path::new("config.example.json")).unwrap();
    let anthropic = crate::model::ModelConfig::new(crate::model::Provider::Anthropic, "claude-haiku-4-5");
    c.model = Some(anthropic.clone());
    let summarizer = anthropic.with_override(c.summarizer.as_ref().unwrap());
    assert_eq!(summarizer.provider, crate::model::Provider::Anthropic);
    assert_eq!(summarizer.model, "claude-haiku-4-5");
}

#[test]
fn an_unknown_field_is_named_with_its_path() {
    let (field, reason) = field_error(r#"{"limits": {"maxConcurentModelCalls": 3}}"#);
    assert_eq!(field, "limits.maxConcurentModelCalls");
    assert!(reason.contains("unknown field"), "{reason}");
}

#[test]
fn a_wrong_type_is_named_with_its_path() {
    let (field, _) = field_error(r#"{"channels": {"console": {"enabled": "yes"}}}"#);
    assert_eq!(field, "channels.console.enabled");
}

#[test]
fn invalid_values_are_refused_with_the_field() {
    assert_eq!(field_error(r#"{"timezone": "Mars/Base"}"#).0, "timezone");
    let (field, reason) = field_error(r#"{"logging": {"level": "mnemo=chatty"}}"#);
    assert_eq!(field, "logging.level");
    assert!(reason.contains("target=level"), "{reason}");
    assert_eq!(
        parse(r#"{"logging": {"level": "mnemo=debug,warn"}}"#)
            .unwrap()
            .logging
            .level,
        "mnemo=debug,warn"
    );
    assert_eq!(
        field_error(r#"{"limits": {"maxConcurrentModelCalls": 0}}"#).0,
        "limits.maxConcurrentModelCalls"
    );
    assert_eq!(
        field_error(r#"{"reminders": {"maxLateHours": 100000}}"#).0,
        "reminders.maxLateHours"
    );
    assert_eq!(
        field_error(r#"{"reminders": {"maxPerUser": 20000}}"#).0,
        "reminders.maxPerUser"
    );
    assert_eq!(field_error(r#"{"reminders": {"every": 5}}"#).0, "reminders.every");
    assert_eq!(
        field_error(r#"{"channels": {"slack": {"mode": "rtm"}}}"#).0,
        "channels.slack.mode"
    );
    assert_eq!(
        field_error(r#"{"systemPrompt": "a", "systemPromptFile": "b"}"#).0,
        "systemPromptFile"
    );
}

#[test]
fn broken_json_names_the_file_and_position() {
    match parse("{\n  \"timezone\": \"UTC\",,\n}") {
        Err(
            e @ ConfigError {
                problem: Problem::Syntax(_),
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("/etc/mnemo/config.json") && text.contains("line 2, column"),
                "{text}"
            );
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn an_explicit_path_that_does_not_exist_is_an_error_not_a_fallback() {
    let err = AppConfig::locate(Some(Path::new("/nonexistent/mnemo.json")), None).unwrap_err();
    assert!(matches!(err.problem, Problem::Read(_)), "{err}");
}

#[test]
fn home_is_expanded_only_at_the_start() {
    let home = Path::new("/home/ada");
    assert_eq!(expand_home("~", Some(home)), Path::new("/home/ada"));
    assert_eq!(expand_home("~/.mnemo", Some(home)), Path::new("/home/ada/.mnemo"));
    assert_eq!(expand_home("/srv/~x", Some(home)), Path::new("/srv/~x"));
    assert_eq!(expand_home("~bob/x", Some(home)), Path::new("~bob/x"));
}

#[test]
fn the_system_prompt_comes_from_the_file_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("prompt.md"), "Be brief.\n").unwrap();
    let c = parse(r#"{"systemPromptFile": "prompt.md"}"#).unwrap();
    assert_eq!(c.system_prompt(dir.path()).unwrap(), "Be brief.");
    assert_eq!(
        parse("{}").unwrap().system_prompt(dir.path()).unwrap(),
        DEFAULT_SYSTEM_PROMPT
    );
}

#[test]
fn token_budgets_default_to_none_and_are_checked() {
    let c = parse("{}").unwrap();
    assert_eq!((c.limits.user_tokens_per_day, c.limits.channel_tokens_per_day), (0, 0));
    let c = parse(r#"{"limits": {"userTokensPerDay": 50000, "channelTokensPerDay": 2000000}}"#).unwrap();
    assert_eq!(c.limits.user_tokens_per_day, 50_000);
    assert_eq!(c.limits.channel_tokens_per_day, 2_000_000);
    // Only a user limit: fine.
    assert!(parse(r#"{"limits": {"userTokensPerDay": 50000}}"#).is_ok());
    assert_eq!(
        field_error(r#"{"limits": {"userTokensPerDay": -1}}"#).0,
        "limits.userTokensPerDay"
    );
    assert_eq!(
        field_error(r#"{"limits": {"channelTokensPerDay": "lots"}}"#).0,
        "limits.channelTokensPerDay"
    );
    let (field, reason) = field_error(r#"{"limits": {"userTokensPerDay": 10, "channelTokensPerDay": 5}}"#);
    assert_eq!(field, "limits.userTokensPerDay");
    assert!(reason.contains("more than channelTokensPerDay (5)"), "{reason}");
}

#[test]
fn attachments_settings_have_documented_defaults_and_bad_values_are_refused_by_field() {
    let c = parse("{}").unwrap();
    assert_eq!(c.limits.max_attachment_bytes, 20_971_520);
    assert_eq!(c.limits.attachment_stall_secs, 30);
    assert!(c.transcription.is_none());
    let c = parse(
        r#"{"transcription": {"provider": "openai", "baseUrl": "http://127.0.0.1:8080/v1", "model": "whisper-1"},
            "model": {"provider": "openai", "model": "gpt-4o-mini", "vision": true}}"#,
    )
    .unwrap();
    assert_eq!(c.transcription.unwrap().timeout_secs, 60);
    assert!(c.model.unwrap().vision);
    let (field, _) = field_error(r#"{"limits": {"maxAttachmentBytes": 0}}"#);
    assert_eq!(field, "limits.maxAttachmentBytes");
    let (field, _) = field_error(r#"{"transcription": {"provider": "openai", "model": ""}}"#);
    assert_eq!(field, "transcription.model");
    let (field, reason) = field_error(r#"{"model": {"provider": "command", "command": ["x"], "vision": true}}"#);
    assert_eq!(field, "model.vision");
    assert!(reason.contains("text only"), "{reason}");
}
