//! The `model` and `summarizer` sections of the app config (DESIGN §8): their
//! serde shape (camelCase, unknown fields refused), per-provider defaults,
//! validation with field paths, the summarizer's inheritance from `model`,
//! and the no-config-file path that picks a backend from the environment.
//!
//! It only describes; it never reads the process environment (the lookup is
//! a parameter), never holds a key (only the *name* of the variable that
//! holds it), and never touches the network.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which backend speaks to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// A program run as a subprocess, e.g. `claude -p`.
    Command,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Command => "command",
        }
    }

    fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::Command => None,
        }
    }

    fn default_api_key_env(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Command => None,
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Anthropic requires `max_tokens`; this is what we send when none is set.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 1024;

fn default_timeout_secs() -> u64 {
    60
}

fn default_max_retries() -> u32 {
    3
}

/// One model endpoint. Optional fields left out mean the provider's default
/// ([`ModelConfig::resolved`] shows them filled in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    pub provider: Provider,
    /// Including `/v1` for openai (we append `/chat/completions`); without it
    /// for anthropic (we append `/v1/messages`). Default per provider.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The *name* of the environment variable holding the key, never the key.
    /// Default per provider; `""` means "send no key" (a keyless vLLM on
    /// the LAN). Servers on localhost need none even when it is named.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The model name the endpoint knows. Required for openai and anthropic.
    #[serde(default)]
    pub model: String,
    /// Per call; a streamed reply may run longer as long as deltas keep
    /// coming at least this often.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Extra attempts after a 429, 5xx or connection failure.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Reply length cap; anthropic requires one and defaults to 1024.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sent with every request (e.g. OpenRouter's `HTTP-Referer`). Not for
    /// keys: those belong in the environment.
    #[serde(default)]
    pub extra_headers: BTreeMap<String, String>,
    /// Program and arguments for provider `command`; `{context}` and
    /// `{message}` are replaced inside arguments. Never run through a shell.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Tried when this model stays unavailable (not on auth or bad request).
    #[serde(default)]
    pub fallback: Option<Box<ModelConfig>>,
    /// Rounds of memory tool calls the model may make before it must answer
    /// (openai and anthropic; `0` offers no tools). Default
    /// [`DEFAULT_MAX_TOOL_ROUNDS`]; only in the `model` section.
    #[serde(default)]
    pub max_tool_rounds: Option<u32>,
    /// The model reads images: a photo sent with a message goes with that
    /// turn's request as an image part (openai and anthropic). Off: the
    /// sender is told the model cannot see images. Only in `model`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vision: bool,
}

/// Tool rounds per answer when `model.maxToolRounds` is not set.
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 3;
/// The most `model.maxToolRounds` may be: every round is one more model
/// call the person waits for.
pub const MAX_TOOL_ROUNDS: u32 = 8;

/// The `summarizer` section: every field optional; an omitted field inherits
/// from `model` (see [`ModelConfig::with_override`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelOverride {
    pub provider: Option<Provider>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub model: Option<String>,
    pub timeout_secs: Option<u64>,
    pub max_retries: Option<u32>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub extra_headers: Option<BTreeMap<String, String>>,
    pub command: Option<Vec<String>>,
    pub fallback: Option<Box<ModelConfig>>,
}

/// A config value that cannot work, with the field path that holds it
/// (e.g. `model.fallback.timeoutSecs`): the shape every config section
/// reports in, lifted into a [`mnemo_sessions::config::ConfigError`] by
/// the loader that knows the file.
pub use mnemo_sessions::config::FieldError;

impl ModelConfig {
    /// A config with every optional field at its default.
    pub fn new(provider: Provider, model: impl Into<String>) -> Self {
        ModelConfig {
            provider,
            base_url: None,
            api_key_env: None,
            model: model.into(),
            timeout_secs: default_timeout_secs(),
            max_retries: default_max_retries(),
            temperature: None,
            max_tokens: None,
            extra_headers: BTreeMap::new(),
            command: None,
            fallback: None,
            max_tool_rounds: None,
            vision: false,
        }
    }

    /// Tool rounds in effect: the configured number, else the default for
    /// a backend with tool calling, else 0.
    pub fn tool_rounds(&self) -> u32 {
        match self.provider {
            Provider::Command => 0,
            Provider::Openai | Provider::Anthropic => self.max_tool_rounds.unwrap_or(DEFAULT_MAX_TOOL_ROUNDS),
        }
    }

    /// The base URL in effect (configured or the provider's default).
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref().or(self.provider.default_base_url())
    }

    /// Fills an unset `baseUrl` from the variable the provider's own SDK
    /// reads (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`), here and in the
    /// fallback. A `baseUrl` in the config wins, as it does in the SDKs.
    pub fn with_env_base_url(mut self, env: &dyn Fn(&str) -> Option<String>) -> ModelConfig {
        let var = match self.provider {
            Provider::Openai => Some("OPENAI_BASE_URL"),
            Provider::Anthropic => Some("ANTHROPIC_BASE_URL"),
            Provider::Command => None,
        };
        if self.base_url.is_none()
            && let Some(url) = var.and_then(env).filter(|v| !v.trim().is_empty())
        {
            self.base_url = Some(url.trim().to_string());
        }
        self.fallback = self.fallback.map(|f| Box::new(f.with_env_base_url(env)));
        self
    }

    /// The variable holding the key, if a key is to be sent at all.
    pub fn api_key_env(&self) -> Option<&str> {
        match self.api_key_env.as_deref() {
            Some("") => None,
            Some(name) => Some(name),
            None => self.provider.default_api_key_env(),
        }
    }

    /// The reply length cap in effect.
    pub fn max_tokens(&self) -> Option<u32> {
        match (self.max_tokens, self.provider) {
            (None, Provider::Anthropic) => Some(ANTHROPIC_DEFAULT_MAX_TOKENS),
            (cap, _) => cap,
        }
    }

    /// This config with provider defaults written out, for printing the
    /// effective config.
    pub fn resolved(&self) -> ModelConfig {
        let mut out = self.clone();
        out.base_url = self.base_url().map(str::to_string);
        out.api_key_env = Some(self.api_key_env().unwrap_or_default().to_string());
        out.max_tokens = self.max_tokens();
        out.fallback = self.fallback.as_ref().map(|f| Box::new(f.resolved()));
        out
    }

    /// The summarizer's config: `o`'s fields where given, this config's
    /// elsewhere. When `o` names a *different* provider, only `timeoutSecs`,
    /// `maxRetries` and `fallback` are inherited — another provider's URL,
    /// key variable, model name or command would be wrong for it.
    pub fn with_override(&self, o: &ModelOverride) -> ModelConfig {
        let provider = o.provider.unwrap_or(self.provider);
        let base = if provider == self.provider {
            self.clone()
        } else {
            ModelConfig {
                fallback: self.fallback.clone(),
                timeout_secs: self.timeout_secs,
                max_retries: self.max_retries,
                ..ModelConfig::new(provider, "")
            }
        };
        ModelConfig {
            provider,
            base_url: o.base_url.clone().or(base.base_url),
            api_key_env: o.api_key_env.clone().or(base.api_key_env),
            model: o.model.clone().unwrap_or(base.model),
            timeout_secs: o.timeout_secs.unwrap_or(base.timeout_secs),
            max_retries: o.max_retries.unwrap_or(base.max_retries),
            temperature: o.temperature.or(base.temperature),
            max_tokens: o.max_tokens.or(base.max_tokens),
            extra_headers: o.extra_headers.clone().unwrap_or(base.extra_headers),
            command: o.command.clone().or(base.command),
            fallback: o.fallback.clone().or(base.fallback),
            // The summarizer is never offered tools, nor images.
            max_tool_rounds: None,
            vision: false,
        }
    }

    /// [`ModelConfig::validate_at`] for the `model` section.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.validate_at("model")
    }

    /// Refuses a config that cannot work or has a field it would ignore
    /// (DESIGN §3: no decorative fields). `path` prefixes field names in
    /// errors (`model`, `summarizer`).
    pub fn validate_at(&self, path: &str) -> Result<(), FieldError> {
        let fail = |field: &str, reason: String| {
            Err(FieldError {
                field: format!("{path}.{field}"),
                reason,
            })
        };
        if self.timeout_secs == 0 {
            return fail("timeoutSecs", "must be at least 1 (seconds)".into());
        }
        if self.max_retries > MAX_RETRIES {
            return fail(
                "maxRetries",
                format!("must be at most {MAX_RETRIES}; more only delays the error reply"),
            );
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return fail("temperature", format!("must be between 0 and 2 (got {t})"));
        }
        if self.max_tokens == Some(0) {
            return fail("maxTokens", "must be at least 1, or null for the default".into());
        }
        if let Some(rounds) = self.max_tool_rounds {
            if path != "model" {
                return fail(
                    "maxToolRounds",
                    "only the `model` section offers memory tools; remove it here".into(),
                );
            }
            if rounds > MAX_TOOL_ROUNDS {
                return fail(
                    "maxToolRounds",
                    format!(
                        "must be at most {MAX_TOOL_ROUNDS}; each round is one more model call the person waits for"
                    ),
                );
            }
        }
        if self.vision && self.provider == Provider::Command {
            return fail(
                "vision",
                "a command model is given text only; use openai or anthropic to send photos, or remove it".into(),
            );
        }
        match self.provider {
            Provider::Command => self.validate_command(&fail)?,
            Provider::Openai | Provider::Anthropic => self.validate_http(&fail)?,
        }
        match &self.fallback {
            Some(fallback) => fallback.validate_at(&format!("{path}.fallback")),
            None => Ok(()),
        }
    }

    fn validate_command(&self, fail: &dyn Fn(&str, String) -> Result<(), FieldError>) -> Result<(), FieldError> {
        match self.command.as_deref() {
            None | Some([]) => {
                return fail(
                    "command",
                    r#"provider "command" needs the program and its arguments, e.g. ["claude", "-p", "--system-prompt", "{context}", "{message}"]"#.into(),
                );
            }
            Some([program, ..]) if program.trim().is_empty() => {
                return fail("command", "the first element must name the program to run".into());
            }
            Some(_) => {}
        }
        let unused = [
            ("baseUrl", self.base_url.is_some()),
            ("apiKeyEnv", self.api_key_env.is_some()),
            ("model", !self.model.is_empty()),
            ("temperature", self.temperature.is_some()),
            ("maxTokens", self.max_tokens.is_some()),
            ("extraHeaders", !self.extra_headers.is_empty()),
            ("maxToolRounds", self.max_tool_rounds.is_some()),
        ];
        match unused.iter().find(|(_, set)| *set) {
            Some((field, _)) => fail(
                field,
                r#"is not used by provider "command"; remove it (put such options into the command's arguments)"#
                    .into(),
            ),
            None => Ok(()),
        }
    }

    fn validate_http(&self, fail: &dyn Fn(&str, String) -> Result<(), FieldError>) -> Result<(), FieldError> {
        if self.model.trim().is_empty() {
            return fail(
                "model",
                format!(
                    "provider \"{}\" needs the model name, e.g. \"{}\"",
                    self.provider,
                    default_model(self.provider)
                ),
            );
        }
        if self.command.is_some() {
            return fail(
                "command",
                r#"is only used with provider "command"; remove it or change the provider"#.into(),
            );
        }
        if let Some(url) = self.base_url() {
            match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {}
                _ => {
                    return fail(
                        "baseUrl",
                        "must be an http:// or https:// URL, e.g. https://api.openai.com/v1".into(),
                    );
                }
            }
        }
        if let Some(name) = &self.api_key_env
            && !is_env_var_name(name)
        {
            // The value is not echoed: people do paste the key itself here.
            return fail(
                "apiKeyEnv",
                "must be the name of an environment variable (like OPENAI_API_KEY), not the key itself; \"\" sends no key".into(),
            );
        }
        for (name, value) in &self.extra_headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return fail("extraHeaders", format!("{name:?} is not a valid HTTP header name"));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return fail(
                    &format!("extraHeaders.{name}"),
                    "contains characters not allowed in an HTTP header".into(),
                );
            }
        }
        Ok(())
    }
}

/// More retries than this only keep a person waiting for the same error.
const MAX_RETRIES: u32 = 10;

fn is_env_var_name(name: &str) -> bool {
    name.is_empty()
        || (name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit()))
}

fn default_model(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => OPENAI_DEFAULT_MODEL,
        Provider::Anthropic => ANTHROPIC_DEFAULT_MODEL,
        Provider::Command => "",
    }
}

const OPENAI_DEFAULT_MODEL: &str = "gpt-4o-mini";
const ANTHROPIC_DEFAULT_MODEL: &str = "claude-haiku-4-5";
const MISTRAL_DEFAULT_MODEL: &str = "mistral-small-latest";
const MISTRAL_BASE_URL: &str = "https://api.mistral.ai/v1";
const OLLAMA_DEFAULT_MODEL: &str = "llama3.2";
/// Local models load on first use; a cold start on a CPU can take minutes.
const OLLAMA_TIMEOUT_SECS: u64 = 180;

/// What to tell a person when no model is configured.
pub const NO_MODEL_HELP: &str = "\
No model is configured. Set one of these environment variables (the first one set wins):
  OPENAI_API_KEY     OpenAI, model gpt-4o-mini
  ANTHROPIC_API_KEY  Anthropic, model claude-haiku-4-5
  MISTRAL_API_KEY    Mistral, model mistral-small-latest
  OLLAMA_BASE_URL    a local Ollama server, e.g. http://localhost:11434, model llama3.2
MNEMO_MODEL overrides the model name. Or add a \"model\" section to config.json, e.g.
  \"model\": { \"provider\": \"openai\", \"baseUrl\": \"https://api.openai.com/v1\",
             \"apiKeyEnv\": \"OPENAI_API_KEY\", \"model\": \"gpt-4o-mini\" }
(provider is openai, anthropic or command; run `mnemo config check` to test it).";

/// The model for the no-config-file path (DESIGN §8): the first of
/// `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `MISTRAL_API_KEY`,
/// `OLLAMA_BASE_URL` that is set (and not blank) picks the backend;
/// `MNEMO_MODEL` overrides the model name. `None` when none is set — show
/// [`NO_MODEL_HELP`].
pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Option<ModelConfig> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut cfg = if set("OPENAI_API_KEY").is_some() {
        ModelConfig::new(Provider::Openai, OPENAI_DEFAULT_MODEL)
    } else if set("ANTHROPIC_API_KEY").is_some() {
        ModelConfig::new(Provider::Anthropic, ANTHROPIC_DEFAULT_MODEL)
    } else if set("MISTRAL_API_KEY").is_some() {
        ModelConfig {
            base_url: Some(MISTRAL_BASE_URL.into()),
            api_key_env: Some("MISTRAL_API_KEY".into()),
            ..ModelConfig::new(Provider::Openai, MISTRAL_DEFAULT_MODEL)
        }
    } else if let Some(ollama) = set("OLLAMA_BASE_URL") {
        let root = ollama.trim().trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        ModelConfig {
            base_url: Some(format!("{root}/v1")),
            api_key_env: Some(String::new()),
            timeout_secs: OLLAMA_TIMEOUT_SECS,
            ..ModelConfig::new(Provider::Openai, OLLAMA_DEFAULT_MODEL)
        }
    } else {
        return None;
    };
    if let Some(model) = set("MNEMO_MODEL") {
        cfg.model = model.trim().to_string();
    }
    Some(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_base_url_variables_fill_an_unset_base_url_only() {
        let env = |name: &str| match name {
            "OPENAI_BASE_URL" => Some("http://proxy:8080/v1".to_string()),
            "ANTHROPIC_BASE_URL" => Some("http://claude-proxy".to_string()),
            _ => None,
        };
        let openai = ModelConfig::new(Provider::Openai, "m").with_env_base_url(&env);
        assert_eq!(openai.base_url(), Some("http://proxy:8080/v1"));
        let anthropic = ModelConfig::new(Provider::Anthropic, "m").with_env_base_url(&env);
        assert_eq!(anthropic.base_url(), Some("http://claude-proxy"));
        let pinned = ModelConfig {
            base_url: Some("http://pinned/v1".into()),
            ..ModelConfig::new(Provider::Openai, "m")
        };
        assert_eq!(pinned.with_env_base_url(&env).base_url(), Some("http://pinned/v1"));
        assert_eq!(
            ModelConfig::new(Provider::Command, "m")
                .with_env_base_url(&env)
                .base_url,
            None
        );
    }

    #[test]
    fn anthropic_gets_its_required_max_tokens_by_default() {
        let cfg = ModelConfig::new(Provider::Anthropic, "claude-haiku-4-5");
        assert_eq!(cfg.max_tokens(), Some(ANTHROPIC_DEFAULT_MAX_TOKENS));
        assert_eq!(ModelConfig::new(Provider::Openai, "m").max_tokens(), None);
    }

    #[test]
    fn an_empty_api_key_env_means_no_key() {
        let cfg = ModelConfig {
            api_key_env: Some(String::new()),
            ..ModelConfig::new(Provider::Openai, "m")
        };
        assert_eq!(cfg.api_key_env(), None);
        assert_eq!(
            ModelConfig::new(Provider::Openai, "m").api_key_env(),
            Some("OPENAI_API_KEY")
        );
    }

    #[test]
    fn a_key_pasted_into_api_key_env_is_refused_without_echoing_it() {
        let cfg = ModelConfig {
            api_key_env: Some("sk-proj-abc123".into()),
            ..ModelConfig::new(Provider::Openai, "m")
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.field, "model.apiKeyEnv");
        assert!(!err.to_string().contains("sk-proj-abc123"), "{err}");
    }

    #[test]
    fn validation_errors_name_the_nested_field_path() {
        let cfg = ModelConfig {
            fallback: Some(Box::new(ModelConfig {
                timeout_secs: 0,
                ..ModelConfig::new(Provider::Openai, "m")
            })),
            ..ModelConfig::new(Provider::Openai, "m")
        };
        assert_eq!(
            cfg.validate_at("summarizer").unwrap_err().field,
            "summarizer.fallback.timeoutSecs"
        );
    }

    #[test]
    fn max_tool_rounds_defaults_small_is_bounded_and_belongs_to_the_main_model_only() {
        let with = |provider, rounds| ModelConfig {
            max_tool_rounds: rounds,
            command: (provider == Provider::Command).then(|| vec!["claude".to_string()]),
            ..ModelConfig::new(provider, if provider == Provider::Command { "" } else { "m" })
        };
        assert_eq!(with(Provider::Openai, None).tool_rounds(), DEFAULT_MAX_TOOL_ROUNDS);
        assert_eq!(with(Provider::Anthropic, Some(0)).tool_rounds(), 0);
        assert_eq!(with(Provider::Command, None).tool_rounds(), 0);
        assert!(with(Provider::Openai, Some(MAX_TOOL_ROUNDS)).validate().is_ok());
        assert_eq!(
            with(Provider::Openai, Some(MAX_TOOL_ROUNDS + 1))
                .validate()
                .unwrap_err()
                .field,
            "model.maxToolRounds"
        );
        assert_eq!(
            with(Provider::Command, Some(1)).validate().unwrap_err().field,
            "model.maxToolRounds"
        );
        let fallback = ModelConfig {
            fallback: Some(Box::new(with(Provider::Openai, Some(1)))),
            ..with(Provider::Openai, None)
        };
        assert_eq!(fallback.validate().unwrap_err().field, "model.fallback.maxToolRounds");
        let parsed: Result<ModelConfig, _> =
            serde_json::from_value(serde_json::json!({"provider": "openai", "model": "m", "maxToolRounds": "2"}));
        assert!(parsed.is_err(), "a wrong type is refused");
    }

    #[test]
    fn http_fields_on_a_command_model_are_refused_as_unused() {
        let cfg = ModelConfig {
            command: Some(vec!["claude".into(), "{message}".into()]),
            temperature: Some(0.2),
            ..ModelConfig::new(Provider::Command, "")
        };
        assert_eq!(cfg.validate().unwrap_err().field, "model.temperature");
    }

    #[test]
    fn ollama_base_url_gets_v1_exactly_once() {
        for given in ["http://gpu:11434", "http://gpu:11434/", "http://gpu:11434/v1"] {
            let env = |name: &str| (name == "OLLAMA_BASE_URL").then(|| given.to_string());
            let cfg = from_env(&env).unwrap();
            assert_eq!(cfg.base_url(), Some("http://gpu:11434/v1"), "from {given}");
            assert_eq!(cfg.api_key_env(), None);
        }
    }
}
