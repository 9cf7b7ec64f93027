//! `logging` in the app config: the stderr format and the log filter, and
//! the filter's grammar, so a bad filter is refused when the config loads,
//! naming the field, rather than when logging starts.
//!
//! Only what the config says; installing the subscriber is
//! [`crate::logging`]'s, which reads these.

use serde::{Deserialize, Serialize};
use tracing_subscriber::filter::Targets;

/// How log lines on stderr look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Logging settings (additions to DESIGN §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// `human` or `json` on stderr; files under `<state>/logs/` are always JSON.
    pub format: LogFormat,
    /// A tracing filter (`info`, `mnemo=debug,warn`); `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            format: LogFormat::Human,
            level: "info".to_string(),
        }
    }
}

/// Parses a log filter: comma-separated `target=level` directives and a
/// bare `level` for everything else (`info`, `mnemo=debug,warn`). The
/// reason, when it does not parse, names the filter's syntax. (Span and
/// field filters, `[span{field=value}]`, are not supported: the filter is
/// tracing-subscriber's `Targets`, which needs no regular-expression
/// engine in the binary.)
pub fn parse_filter(filter: &str) -> Result<Targets, String> {
    filter.parse::<Targets>().map_err(|e| {
        format!("`{filter}` is not a log filter ({e}); write comma-separated `target=level` directives or a level, e.g. `info` or `mnemo=debug,warn`")
    })
}
