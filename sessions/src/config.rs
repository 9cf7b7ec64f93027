//! The operator's tuning of a channel's memory: `sessions/config.json`
//! (DESIGN §3). Owns the field names, their defaults and the rules that make
//! a config valid.
//!
//! Every field is optional; a missing file means all defaults. Anything
//! else that is wrong — bad JSON, an unknown field, a wrong type, a value
//! that breaks a rule — is refused with the file, the field path (and the
//! line and column where parsing stopped) and the reason, never silently
//! replaced by a default. This module only reads. The error's shape
//! ([`ConfigError`]) and the strict parse ([`parse_object`]) live in
//! `config/error.rs` and serve `config.json` and `access.json` too.

mod error;
mod validate;

use chrono::{TimeDelta, Weekday};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

pub use error::{ConfigError, ConfigFile, FieldError, Position, Problem, parse_object, parse_object_bytes};

/// The whole file. Serializes back to the same camelCase shape, so the
/// broker can print the effective config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionConfig {
    pub stm: StmConfig,
    pub compacting: CompactingConfig,
    pub scheduler: SchedulerConfig,
    pub context: ContextConfig,
    pub ltm: LtmConfig,
    pub recall: RecallConfig,
}

/// The raw short-term log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StmConfig {
    /// Hard bound on the raw log: past it the oldest messages are archived
    /// unsummarized (a sliding window), even if compaction is off or failing.
    pub max_messages: usize,
    /// A turn whose oldest unfolded message is older than this starts a fold
    /// in the background after its reply. Until that fold commits, such
    /// messages are still in the context raw: they are folded, never dropped.
    pub max_age_minutes: u64,
    /// How many recent messages go into every model call. May be 0: the
    /// model then sees only the profile and the rolling summary.
    pub context_window: usize,
    /// `sync_data` after every append: a reply is never sent for a message
    /// that a power loss could still erase.
    pub fsync: bool,
}

impl Default for StmConfig {
    fn default() -> Self {
        StmConfig {
            max_messages: 50,
            max_age_minutes: 120,
            context_window: 10,
            fsync: true,
        }
    }
}

impl StmConfig {
    pub fn max_age(&self) -> TimeDelta {
        // Absurdly large values mean "never": saturate instead of panicking.
        i64::try_from(self.max_age_minutes)
            .ok()
            .and_then(TimeDelta::try_minutes)
            .unwrap_or(TimeDelta::MAX)
    }
}

/// Folding old messages into the rolling summary, and the daily and weekly
/// summaries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CompactingConfig {
    pub enabled: bool,
    /// The log length at which summarization starts.
    pub threshold: usize,
    /// Local hour (0–23, in the app's timezone) after which yesterday's
    /// daily summary is written.
    pub daily_summary_hour: u32,
    /// 0 = Sunday … 6 = Saturday: the day after which last week's weekly
    /// summary is written.
    pub weekly_summary_day: u32,
    /// Consecutive summarizer failures after which the sliding window takes
    /// over for that user until a summary succeeds again.
    pub max_failures: u32,
    pub summarizer_timeout_secs: u64,
}

impl Default for CompactingConfig {
    fn default() -> Self {
        CompactingConfig {
            enabled: true,
            threshold: 50,
            daily_summary_hour: 3,
            weekly_summary_day: 0,
            max_failures: 3,
            summarizer_timeout_secs: 120,
        }
    }
}

impl CompactingConfig {
    /// `weeklySummaryDay` as a weekday (validated to be 0..=6; anything
    /// larger wraps, which validation has already refused).
    pub fn weekly_summary_weekday(&self) -> Weekday {
        match self.weekly_summary_day % 7 {
            0 => Weekday::Sun,
            1 => Weekday::Mon,
            2 => Weekday::Tue,
            3 => Weekday::Wed,
            4 => Weekday::Thu,
            5 => Weekday::Fri,
            _ => Weekday::Sat,
        }
    }

    pub fn summarizer_timeout(&self) -> Duration {
        Duration::from_secs(self.summarizer_timeout_secs)
    }
}

/// The background maintenance runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Days the broker's own log files are kept before they are gzipped
    /// and then removed.
    pub log_rotate_days: u32,
    /// A user's STM idle this long is archived, then removed.
    pub stm_expire_days: u32,
    pub cleanup_interval_minutes: u64,
    /// Upper bound on model calls one maintenance run may make (daily and
    /// weekly summaries), so a long catch-up cannot flood the model.
    pub max_summaries_per_run: usize,
    /// How many summaries are asked for at once.
    pub summary_concurrency: usize,
    /// `/session export` bundles hold everything about a user; they are
    /// deleted this many days after they were made.
    pub export_keep_days: u32,
    /// Archived message batches (`archive/<user>/…jsonl.gz`) are deleted
    /// this many days after they were written; 0 keeps them forever.
    pub archive_keep_days: u32,
    /// Daily and weekly summaries are deleted this many days after they
    /// were written; 0 keeps them forever.
    pub summary_keep_days: u32,
    /// Gzipped broker logs (`<state>/logs/archive/`) are deleted this many
    /// days after they were rotated; 0 keeps them forever.
    pub log_keep_days: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            log_rotate_days: 7,
            stm_expire_days: 3,
            cleanup_interval_minutes: 60,
            max_summaries_per_run: 200,
            summary_concurrency: 2,
            export_keep_days: 7,
            archive_keep_days: 0,
            summary_keep_days: 0,
            log_keep_days: 0,
        }
    }
}

impl SchedulerConfig {
    pub fn cleanup_interval(&self) -> Duration {
        Duration::from_secs(self.cleanup_interval_minutes.saturating_mul(60))
    }

    pub fn stm_expiry(&self) -> TimeDelta {
        TimeDelta::days(i64::from(self.stm_expire_days))
    }

    /// How long each kind of file is kept, for maintenance.
    pub fn keep(&self) -> crate::maintenance::prune::Keep {
        let days = |d: u32| (d > 0).then(|| TimeDelta::days(i64::from(d)));
        crate::maintenance::prune::Keep {
            exports: TimeDelta::days(i64::from(self.export_keep_days)),
            archives: days(self.archive_keep_days),
            summaries: days(self.summary_keep_days),
            logs: days(self.log_keep_days),
        }
    }
}

/// The prompt assembled for every model call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ContextConfig {
    /// Budget for system prompt, profile, summary and recent messages,
    /// estimated as characters / 4.
    pub max_tokens: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig { max_tokens: 6000 }
    }
}

/// Long-term memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LtmConfig {
    /// The profile is kept under this size when facts are merged in.
    pub max_profile_chars: usize,
}

impl Default for LtmConfig {
    fn default() -> Self {
        LtmConfig {
            max_profile_chars: 4000,
        }
    }
}

/// What every turn recalls from the user's whole history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RecallConfig {
    /// Search the history on every turn and put the best items in the
    /// context. `/session search` works either way.
    pub enabled: bool,
    /// Budget of the recalled items, inside `context.maxTokens`
    /// (characters / 4).
    pub max_tokens: usize,
    /// Dense embeddings fused with BM25; absent (the default) = BM25 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsConfig>,
}

impl Default for RecallConfig {
    fn default() -> Self {
        RecallConfig {
            enabled: true,
            max_tokens: 1500,
            embeddings: None,
        }
    }
}

/// Which embeddings API `recall.embeddings` speaks. One for now: every
/// OpenAI-compatible `POST {baseUrl}/embeddings` (OpenAI, Mistral, Ollama,
/// vLLM, llama.cpp server).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingsProvider {
    Openai,
}

/// `recall.embeddings`: shaped like the app config's `summarizer` (the
/// broker reads the key from the variable `apiKeyEnv` names; this crate
/// only carries the names and never talks to the endpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EmbeddingsConfig {
    pub provider: EmbeddingsProvider,
    /// Including `/v1` (we append `/embeddings`); default
    /// `https://api.openai.com/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The *name* of the variable holding the key; default
    /// `OPENAI_API_KEY`, `""` sends none (servers on localhost need none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The embedding model the endpoint knows, e.g. `text-embedding-3-small`.
    pub model: String,
    /// How long a turn waits for its question's vector before BM25
    /// answers alone.
    #[serde(default = "default_query_timeout_ms")]
    pub query_timeout_ms: u64,
}

fn default_query_timeout_ms() -> u64 {
    800
}

impl EmbeddingsConfig {
    pub fn query_timeout(&self) -> Duration {
        Duration::from_millis(self.query_timeout_ms)
    }
}

impl SessionConfig {
    /// Reads and validates the file at `path`; a missing file is all
    /// defaults.
    pub fn load(path: &Path) -> Result<SessionConfig, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => SessionConfig::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SessionConfig::default()),
            Err(source) => Err(ConfigError::read(ConfigFile::Sessions, path, source)),
        }
    }

    /// Parses and validates `text`; `path` is only named in errors.
    pub fn parse(text: &str, path: &Path) -> Result<SessionConfig, ConfigError> {
        let config: SessionConfig = parse_object(ConfigFile::Sessions, path, text)?;
        validate::sections_are_objects(text.strip_prefix('\u{feff}').unwrap_or(text), path)?;
        validate::check(&config, path)?;
        Ok(config)
    }
}
