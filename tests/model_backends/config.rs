//! The `model` / `summarizer` config contract (DESIGN §8): the no-config
//! path from the environment, summarizer inheritance, and refusals that
//! name the field.

use super::fake::env;
use mnemo::model::{BuildError, ModelConfig, ModelOverride, NO_MODEL_HELP, Provider, build, from_env};
use serde_json::json;

#[test]
fn the_first_key_set_picks_the_backend() {
    let all = env(&[
        ("OPENAI_API_KEY", "o"),
        ("ANTHROPIC_API_KEY", "a"),
        ("MISTRAL_API_KEY", "m"),
        ("OLLAMA_BASE_URL", "http://localhost:11434"),
    ]);
    let cfg = from_env(&all).unwrap();
    assert_eq!((cfg.provider, cfg.model.as_str()), (Provider::Openai, "gpt-4o-mini"));
    assert_eq!(cfg.base_url(), Some("https://api.openai.com/v1"));

    let cfg = from_env(&env(&[("ANTHROPIC_API_KEY", "a"), ("MISTRAL_API_KEY", "m")])).unwrap();
    assert_eq!(cfg.provider, Provider::Anthropic);
    assert_eq!(cfg.base_url(), Some("https://api.anthropic.com"));

    let cfg = from_env(&env(&[
        ("MISTRAL_API_KEY", "m"),
        ("OLLAMA_BASE_URL", "http://localhost:11434"),
    ]))
    .unwrap();
    assert_eq!(
        (cfg.provider, cfg.model.as_str()),
        (Provider::Openai, "mistral-small-latest")
    );
    assert_eq!(cfg.base_url(), Some("https://api.mistral.ai/v1"));
    assert_eq!(cfg.api_key_env(), Some("MISTRAL_API_KEY"));

    let cfg = from_env(&env(&[("OLLAMA_BASE_URL", "http://localhost:11434")])).unwrap();
    assert_eq!((cfg.provider, cfg.model.as_str()), (Provider::Openai, "llama3.2"));
    assert_eq!(cfg.base_url(), Some("http://localhost:11434/v1"));
}

#[test]
fn blank_variables_count_as_unset_and_none_set_means_no_model() {
    assert_eq!(from_env(&env(&[])), None);
    let cfg = from_env(&env(&[("OPENAI_API_KEY", " "), ("ANTHROPIC_API_KEY", "a")])).unwrap();
    assert_eq!(cfg.provider, Provider::Anthropic);
}

#[test]
fn mnemo_model_overrides_the_default_model() {
    let cfg = from_env(&env(&[
        ("ANTHROPIC_API_KEY", "a"),
        ("MNEMO_MODEL", "claude-sonnet-4-5"),
    ]))
    .unwrap();
    assert_eq!(cfg.model, "claude-sonnet-4-5");
    assert_eq!(
        from_env(&env(&[("MNEMO_MODEL", "x")])),
        None,
        "a model name alone picks no backend"
    );
}

#[test]
fn the_help_text_names_every_way_to_configure_a_model() {
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "MISTRAL_API_KEY",
        "OLLAMA_BASE_URL",
        "MNEMO_MODEL",
        "config.json",
        "\"model\"",
    ] {
        assert!(NO_MODEL_HELP.contains(name), "NO_MODEL_HELP does not mention {name}");
    }
}

#[test]
fn the_documented_model_section_parses_with_its_defaults() {
    let cfg: ModelConfig = serde_json::from_value(json!({
        "provider": "openai", "baseUrl": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY",
        "model": "gpt-4o-mini", "timeoutSecs": 60, "maxRetries": 3, "temperature": null, "maxTokens": null,
        "extraHeaders": {}, "command": null, "fallback": null
    }))
    .unwrap();
    let minimal: ModelConfig = serde_json::from_value(json!({"provider": "openai", "model": "gpt-4o-mini"})).unwrap();
    assert_eq!(minimal.resolved(), cfg);
    assert!(cfg.validate().is_ok());
}

#[test]
fn the_summarizer_inherits_every_field_it_does_not_set() {
    let model: ModelConfig = serde_json::from_value(json!({
        "provider": "openai", "baseUrl": "https://openrouter.ai/api/v1", "apiKeyEnv": "OPENROUTER_API_KEY",
        "model": "big-model", "timeoutSecs": 90, "maxRetries": 2, "temperature": 0.7,
        "extraHeaders": {"X-Title": "mnemo"}
    }))
    .unwrap();
    let o: ModelOverride = serde_json::from_value(json!({"model": "small-model", "temperature": 0.0})).unwrap();

    let summarizer = model.with_override(&o);

    assert_eq!(summarizer.model, "small-model");
    assert_eq!(summarizer.temperature, Some(0.0));
    assert_eq!(summarizer.base_url(), Some("https://openrouter.ai/api/v1"));
    assert_eq!(summarizer.api_key_env(), Some("OPENROUTER_API_KEY"));
    assert_eq!((summarizer.timeout_secs, summarizer.max_retries), (90, 2));
    assert_eq!(summarizer.extra_headers, model.extra_headers);
}

#[test]
fn a_summarizer_on_another_provider_starts_from_that_providers_defaults() {
    let model: ModelConfig = serde_json::from_value(json!({
        "provider": "openai", "baseUrl": "https://openrouter.ai/api/v1", "model": "big-model", "timeoutSecs": 90
    }))
    .unwrap();
    let o: ModelOverride =
        serde_json::from_value(json!({"provider": "anthropic", "model": "claude-haiku-4-5"})).unwrap();

    let summarizer = model.with_override(&o);

    assert_eq!(summarizer.base_url(), Some("https://api.anthropic.com"));
    assert_eq!(summarizer.api_key_env(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(summarizer.timeout_secs, 90);
}

#[test]
fn an_unknown_field_is_refused_with_its_name() {
    let err =
        serde_json::from_value::<ModelConfig>(json!({"provider": "openai", "model": "m", "baseURL": "x"})).unwrap_err();
    assert!(err.to_string().contains("baseURL"), "{err}");
    let err = serde_json::from_value::<ModelOverride>(json!({"modle": "m"})).unwrap_err();
    assert!(err.to_string().contains("modle"), "{err}");
}

#[test]
fn a_command_model_needs_its_command_list() {
    let cfg: ModelConfig = serde_json::from_value(json!({"provider": "command", "command": []})).unwrap();
    let err = cfg.validate().unwrap_err();
    assert_eq!(err.field, "model.command");
    let cfg: ModelConfig =
        serde_json::from_value(json!({"provider": "openai", "model": "m", "timeoutSecs": 0})).unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().to_string(),
        "model.timeoutSecs: must be at least 1 (seconds)"
    );
}

#[test]
fn a_missing_key_is_refused_at_build_naming_the_variable() {
    let cfg = ModelConfig::new(Provider::Anthropic, "claude-haiku-4-5");
    let err = build(&cfg, &env(&[])).err().unwrap();
    assert!(
        matches!(err, BuildError::MissingApiKey { ref var, .. } if var == "ANTHROPIC_API_KEY"),
        "{err:?}"
    );
    assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");

    let mut cfg = ModelConfig::new(Provider::Openai, "m");
    cfg.fallback = Some(Box::new(ModelConfig::new(Provider::Anthropic, "claude-haiku-4-5")));
    let err = build(&cfg, &env(&[("OPENAI_API_KEY", "o")])).err().unwrap();
    assert!(err.to_string().starts_with("model.fallback: "), "{err}");
}
