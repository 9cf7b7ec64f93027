//! Turns a validated [`ModelConfig`] into a ready `Arc<dyn Model>`: the
//! backend for its provider, its key read from the environment variable the
//! config names, wrapped in retries and, if configured, a fallback.
//!
//! The environment is a parameter (tests pass a closure; nothing here reads
//! or changes the process environment), and a missing key is refused at
//! start with the variable's name — not discovered at the first message.

use super::Model;
use super::anthropic::AnthropicBackend;
use super::build_error::BuildError;
use super::command::CommandBackend;
use super::config::{ModelConfig, Provider};
use super::openai::OpenAiBackend;
use super::redact::Secret;
use super::retry::{Retrying, WithFallback, policy_for};
use mnemo_channels::Shutdown;
use std::sync::Arc;

/// The `model` section's model. See [`build_section`].
pub fn build(cfg: &ModelConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Model>, BuildError> {
    build_section(cfg, env, "model")
}

/// The model for config section `section` (`model`, `summarizer`; used in
/// error messages): validated, keyed, retried, with its fallback behind it.
pub fn build_section(
    cfg: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
    section: &str,
) -> Result<Arc<dyn Model>, BuildError> {
    cfg.validate_at(section)?;
    build_validated(cfg, env, section, None)
}

/// [`build_section`] for a serving broker: retry waits end when `shutdown`
/// fires, so a turn waiting out a long `Retry-After` does not outlive the
/// drain.
pub fn build_serving(
    cfg: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
    section: &str,
    shutdown: Shutdown,
) -> Result<Arc<dyn Model>, BuildError> {
    cfg.validate_at(section)?;
    build_validated(cfg, env, section, Some(shutdown))
}

fn build_validated(
    cfg: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
    section: &str,
    shutdown: Option<Shutdown>,
) -> Result<Arc<dyn Model>, BuildError> {
    let backend: Arc<dyn Model> = match cfg.provider {
        Provider::Openai => {
            let key = api_key(cfg, env, section)?;
            Arc::new(OpenAiBackend::new(
                cfg,
                key.as_ref().map(|(v, s)| (v.as_str(), s.clone())),
                section,
            )?)
        }
        Provider::Anthropic => {
            let key = api_key(cfg, env, section)?;
            Arc::new(AnthropicBackend::new(
                cfg,
                key.as_ref().map(|(v, s)| (v.as_str(), s.clone())),
                section,
            )?)
        }
        Provider::Command => Arc::new(CommandBackend::new(cfg)),
    };
    let retrying: Arc<dyn Model> = Arc::new(Retrying::new(backend, policy_for(cfg), shutdown.clone()));
    match &cfg.fallback {
        Some(fallback) => {
            let fallback = build_validated(fallback, env, &format!("{section}.fallback"), shutdown)?;
            Ok(Arc::new(WithFallback::new(retrying, fallback)))
        }
        None => Ok(retrying),
    }
}

/// The key and the name of the variable it came from, or `None` when no key
/// is to be sent: none configured, or a local server and the variable unset.
pub(super) fn api_key(
    cfg: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
    section: &str,
) -> Result<Option<(String, Secret)>, BuildError> {
    let Some(var) = cfg.api_key_env() else {
        return Ok(None);
    };
    match env(var).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) {
        Some(value) => Ok(Some((var.to_string(), Secret::new(value)))),
        None if cfg.base_url().is_some_and(is_local) => Ok(None),
        None => Err(BuildError::MissingApiKey {
            section: section.to_string(),
            var: var.to_string(),
            provider: cfg.provider,
        }),
    }
}

/// A server on this machine (Ollama, llama.cpp, a dev proxy), which needs no
/// key.
fn is_local(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => host == "localhost" || host.ends_with(".localhost") || host == "host.docker.internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_servers_are_recognised() {
        for local in [
            "http://localhost:11434/v1",
            "http://127.0.0.1:8080",
            "http://[::1]:8000/v1",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "https://api.openai.com/v1",
            "http://10.0.0.5:8000/v1",
            "https://localhost.evil.com",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }

    #[test]
    fn a_local_server_needs_no_key_but_a_remote_one_does() {
        let no_env = |_: &str| None;
        let local = ModelConfig {
            base_url: Some("http://localhost:11434/v1".into()),
            ..ModelConfig::new(Provider::Openai, "llama3.2")
        };
        assert!(build(&local, &no_env).is_ok());
        let err = build(&ModelConfig::new(Provider::Openai, "gpt-4o-mini"), &no_env)
            .err()
            .unwrap();
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
    }
}
