//! Logging: tracing to stderr (human or JSON) and, when a state folder is
//! known, to daily JSON files `<state>/logs/mnemo.log.YYYY-MM-DD`, which
//! maintenance gzips into `logs/archive/` after `scheduler.logRotateDays`.
//!
//! Message text never goes to the logs from the broker's own code: log
//! lines carry ids, counts and reasons only. Every line, from any crate,
//! passes [`Scrubbed`], so platform tokens and API keys never reach stderr
//! or the files.

use crate::access::secrets::{Scrubbed, Scrubber};
use crate::config::{LogFormat, LoggingConfig};
use std::path::Path;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::{EnvFilter, Layer, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// Keeps the file writer flushing; drop it last, at exit.
pub struct LogGuard {
    _file: Option<WorkerGuard>,
}

/// Installs the global subscriber. `stderr_level` overrides the config's
/// level for stderr (the console chat keeps stderr quiet); `RUST_LOG`
/// overrides both. Files, when `logs_dir` is given, always get `info`+.
/// `scrubber` knows the configured secrets (see `access::secrets`).
pub fn init(
    config: &LoggingConfig,
    stderr_level: Option<&str>,
    logs_dir: Option<&Path>,
    scrubber: Scrubber,
) -> LogGuard {
    let stderr_filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(stderr_level.unwrap_or(&config.level)));
    let stderr = match config.format {
        LogFormat::Human => fmt::layer()
            .with_writer(Scrubbed::new(std::io::stderr, scrubber.clone()))
            .with_filter(stderr_filter)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_writer(Scrubbed::new(std::io::stderr, scrubber.clone()))
            .with_filter(stderr_filter)
            .boxed(),
    };
    let (file_layer, guard) = match logs_dir.map(open_daily_file) {
        Some(Ok((writer, guard))) => {
            let layer = fmt::layer()
                .json()
                .with_writer(Scrubbed::new(writer, scrubber))
                .with_filter(EnvFilter::new("info"))
                .boxed();
            (Some(layer), Some(guard))
        }
        Some(Err(e)) => {
            eprintln!("mnemo: cannot write log files ({e}); logging to stderr only");
            (None, None)
        }
        None => (None, None),
    };
    // A second init (tests that build several apps) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(stderr).with(file_layer).try_init();
    LogGuard { _file: guard }
}

fn open_daily_file(
    dir: &Path,
) -> Result<(tracing_appender::non_blocking::NonBlocking, WorkerGuard), Box<dyn std::error::Error>> {
    mnemo_sessions::fsutil::create_private_dir_all(dir, dir)?;
    let appender = tracing_appender::rolling::Builder::new()
        .rotation(tracing_appender::rolling::Rotation::DAILY)
        .filename_prefix("mnemo.log")
        .build(dir)?;
    Ok(tracing_appender::non_blocking(appender))
}
