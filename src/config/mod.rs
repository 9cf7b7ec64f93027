//! The app config, `config.json` (DESIGN §8): where state lives, the time
//! zone, the system prompt, the model, the channels and the abuse limits.
//! camelCase like `sessions/config.json`; secrets only by env-var name.
//!
//! Strict: an unknown field, a wrong type or an invalid value is refused
//! with the file, the field path and the reason — never a silent fallback
//! to defaults. With no file at all, the model comes from the environment
//! (see [`crate::model::config::from_env`]).

mod attachments;
mod channels;
mod limits;
mod logging;
mod ops;
mod reminders;
mod store;

pub use attachments::AttachmentsConfig;
pub use channels::{ChannelsConfig, ConsoleConfig, DiscordConfig, SlackConfig, TelegramConfig};
pub use limits::{DEFAULT_MAX_ATTACHMENT_BYTES, LimitsConfig};
pub use logging::{LogFormat, LoggingConfig, parse_filter};
pub use ops::OpsConfig;
pub use reminders::RemindersConfig;
pub use store::{StoreConfig, StoreKind};

use crate::model::config::{ModelConfig, ModelOverride};
use crate::model::transcribe::TranscriptionConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What went wrong reading the app config: the one shape of every config
/// error (file, field, line; see [`mnemo_sessions::config::ConfigError`]).
pub use mnemo_sessions::config::ConfigError;
use mnemo_sessions::config::{ConfigFile, FieldError};
use mnemo_sessions::fsutil::FileError;

/// The whole app config as written in `config.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppConfig {
    /// State root; `~` expands to the home folder.
    #[serde(default = "default_state_dir")]
    pub state_dir: String,
    /// IANA zone for daily/weekly summaries (`Europe/Berlin`).
    #[serde(default = "default_timezone")]
    pub timezone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A file holding the system prompt, instead of `systemPrompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<PathBuf>,
    /// The chat model. Absent: taken from the environment at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelConfig>,
    /// Overrides for the summarizer (e.g. a cheaper model); every field
    /// omitted is taken from `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<ModelOverride>,
    /// Voice notes and audio files to text (an OpenAI-compatible
    /// `/audio/transcriptions` endpoint). Absent: voice is not set up, and
    /// a voice note gets a reply saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionConfig>,
    #[serde(default)]
    pub channels: ChannelsConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub logging: LoggingConfig,
    /// The ops HTTP endpoint (health, readiness, metrics); off by default.
    #[serde(default)]
    pub ops: OpsConfig,
    /// Where memory lives: the files (default) or a shared Postgres.
    #[serde(default)]
    pub store: StoreConfig,
    /// Reminders users set (`/session remind`, the model's tools).
    #[serde(default)]
    pub reminders: RemindersConfig,
    /// The files people send: whether they are kept as they were.
    #[serde(default)]
    pub attachments: AttachmentsConfig,
}

pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant.";

fn default_state_dir() -> String {
    "~/.mnemo".to_string()
}

fn default_timezone() -> String {
    "UTC".to_string()
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            state_dir: default_state_dir(),
            timezone: default_timezone(),
            system_prompt: None,
            system_prompt_file: None,
            model: None,
            summarizer: None,
            transcription: None,
            channels: ChannelsConfig::default(),
            limits: LimitsConfig::default(),
            logging: LoggingConfig::default(),
            ops: OpsConfig::default(),
            store: StoreConfig::default(),
            reminders: RemindersConfig::default(),
            attachments: AttachmentsConfig::default(),
        }
    }
}

/// Where the config came from, for messages and `mnemo config check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// No file anywhere: defaults plus the environment.
    Environment,
}

impl AppConfig {
    /// Finds the config: `explicit` (from `--config` / `MNEMO_CONFIG`) must
    /// exist; otherwise `./config.json`, then `<home>/.mnemo/config.json`;
    /// otherwise none (defaults + environment).
    pub fn locate(explicit: Option<&Path>, home: Option<&Path>) -> Result<(AppConfig, ConfigSource), ConfigError> {
        if let Some(path) = explicit {
            return Ok((Self::load(path)?, ConfigSource::File(path.to_path_buf())));
        }
        let candidates = [
            Some(PathBuf::from("config.json")),
            home.map(|h| h.join(".mnemo/config.json")),
        ];
        for path in candidates.into_iter().flatten() {
            if path.is_file() {
                return Ok((Self::load(&path)?, ConfigSource::File(path)));
            }
        }
        Ok((AppConfig::default(), ConfigSource::Environment))
    }

    pub fn load(path: &Path) -> Result<AppConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::read(ConfigFile::App, path, source))?;
        Self::parse(&text, path)
    }

    /// Parses and validates; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<AppConfig, ConfigError> {
        let config: AppConfig = mnemo_sessions::config::parse_object(ConfigFile::App, path, text)?;
        config
            .validate()
            .map_err(|e| ConfigError::invalid(ConfigFile::App, path, e))?;
        Ok(config)
    }

    /// The first value that cannot work, by its field path.
    fn validate(&self) -> Result<(), FieldError> {
        let field = FieldError::new;
        if self.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err(field(
                "timezone",
                format!(
                    "`{}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)",
                    self.timezone
                ),
            ));
        }
        parse_filter(&self.logging.level).map_err(|reason| field("logging.level", reason))?;
        if self.state_dir.trim().is_empty() {
            return Err(field("stateDir", "must not be empty".into()));
        }
        if self.system_prompt.is_some() && self.system_prompt_file.is_some() {
            return Err(field(
                "systemPromptFile",
                "set either `systemPrompt` or `systemPromptFile`, not both".into(),
            ));
        }
        if let Some(model) = &self.model {
            model.validate_at("model")?;
            if let Some(over) = &self.summarizer {
                model.with_override(over).validate_at("summarizer")?;
            }
        }
        if let Some(transcription) = &self.transcription {
            transcription.validate().map_err(|e| e.within("transcription"))?;
        }
        self.limits.validate().map_err(|e| e.within("limits"))?;
        self.channels.validate().map_err(|e| e.within("channels"))?;
        self.ops.addr().map_err(|e| e.within("ops"))?;
        self.store.validate().map_err(|e| e.within("store"))?;
        self.reminders.validate().map_err(|e| e.within("reminders"))?;
        Ok(())
    }

    /// The time zone; validated at parse time.
    pub fn tz(&self) -> chrono_tz::Tz {
        // validate() refused any zone that does not parse; UTC is only the
        // answer for a config built in code without validation.
        self.timezone.parse().unwrap_or(chrono_tz::UTC)
    }

    /// The state root with `~` expanded against `home`.
    pub fn state_root(&self, home: Option<&Path>) -> PathBuf {
        expand_home(&self.state_dir, home)
    }

    /// The base system prompt: `systemPrompt`, the file's text, or the default.
    pub fn system_prompt(&self, config_dir: &Path) -> Result<String, FileError> {
        if let Some(file) = &self.system_prompt_file {
            let file = if file.is_relative() {
                config_dir.join(file)
            } else {
                file.clone()
            };
            return std::fs::read_to_string(&file)
                .map(|s| s.trim_end().to_string())
                .map_err(|source| FileError::new("read", file, source));
        }
        Ok(self
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()))
    }
}

/// `~` or `~/x` → under `home`; anything else unchanged.
pub fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home.to_path_buf(),
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests;
