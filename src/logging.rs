//! Logging: tracing to stderr (human or JSON) and, when a state folder is
//! known, to daily JSON files `<state>/logs/mnemo.log.YYYY-MM-DD`, which
//! maintenance gzips into `logs/archive/` after `scheduler.logRotateDays`.
//!
//! Message text never goes to the logs from the broker's own code: log
//! lines carry ids, counts and reasons only, and the platform libraries are
//! capped below the levels where they print payloads ([`LIBRARY_CAPS`]).
//! Every line, from any crate, passes [`Scrubbed`], so platform tokens and
//! API keys never reach stderr or the files. Each event is one line
//! ([`OneLine`]: a multi-line field such as the maintenance report is
//! escaped), and stderr gets colour only when it is a terminal, so files,
//! journald and docker logs stay plain.

use crate::access::secrets::{Scrubbed, Scrubber};
use crate::config::{LogFormat, LoggingConfig, parse_filter};
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::{Layer, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// Keeps the file writer flushing; drop it last, at exit.
pub struct LogGuard {
    _file: Option<WorkerGuard>,
}

/// Installs the global subscriber. `stderr_level` overrides the config's
/// level for stderr (the console chat keeps stderr quiet); `RUST_LOG`
/// overrides both. Files, when `logs_dir` is given, always get `info`+.
/// `scrubber` knows the configured secrets (see `access::secrets`).
/// `rust_log` is the value of `RUST_LOG` (read by `cli::setup`, the one
/// reader of the environment).
pub fn init(
    config: &LoggingConfig,
    stderr_level: Option<&str>,
    logs_dir: Option<&Path>,
    scrubber: Scrubber,
    rust_log: Option<String>,
) -> LogGuard {
    let stderr_filter = capped(stderr_filter(
        rust_log.as_deref(),
        stderr_level.unwrap_or(&config.level),
    ));
    let stderr = match config.format {
        LogFormat::Human => fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(Scrubbed::new(OneLine(std::io::stderr), scrubber.clone()))
            .with_filter(stderr_filter)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_writer(Scrubbed::new(OneLine(std::io::stderr), scrubber.clone()))
            .with_filter(stderr_filter)
            .boxed(),
    };
    let (file_layer, guard) = match logs_dir.map(open_daily_file) {
        Some(Ok((writer, guard))) => {
            let layer = fmt::layer()
                .json()
                .with_writer(Scrubbed::new(writer, scrubber))
                .with_filter(capped(Targets::new().with_default(LevelFilter::INFO)))
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

/// Levels the platform libraries are held to whatever the filter says:
/// below them they log whole payloads, message text included (serenity: a
/// gateway message it cannot decode at WARN, unknown events at DEBUG;
/// tungstenite: every websocket frame at TRACE; tokio-postgres: every
/// statement's parameters, stored message text included, at DEBUG).
const LIBRARY_CAPS: [(&str, LevelFilter); 8] = [
    ("serenity", LevelFilter::WARN),
    ("serenity::gateway::ws", LevelFilter::ERROR),
    ("tungstenite", LevelFilter::INFO),
    ("tokio_tungstenite", LevelFilter::INFO),
    ("slack_morphism", LevelFilter::INFO),
    ("teloxide", LevelFilter::WARN),
    ("teloxide_core", LevelFilter::WARN),
    ("tokio_postgres", LevelFilter::INFO),
];

fn capped(filter: Targets) -> Targets {
    LIBRARY_CAPS
        .iter()
        .fold(filter, |filter, (target, level)| filter.with_target(*target, *level))
}

/// The stderr filter: `RUST_LOG` when set and valid, else `level` (the
/// config's, validated at load, or the command's own). A `RUST_LOG` that
/// does not parse is said on stderr, not silently dropped.
fn stderr_filter(rust_log: Option<&str>, level: &str) -> Targets {
    if let Some(filter) = rust_log {
        match parse_filter(filter) {
            Ok(targets) => return targets,
            Err(reason) => eprintln!("mnemo: ignoring RUST_LOG: {reason}; using `{level}`"),
        }
    }
    parse_filter(level).unwrap_or_else(|reason| {
        eprintln!("mnemo: {reason}; logging at `info`");
        Targets::new().with_default(LevelFilter::INFO)
    })
}

/// Writes each formatted event as exactly one line: newlines inside it
/// (a multi-line field) become `\n`.
struct OneLine<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(self.0.make_writer())
    }
}

struct OneLineWriter<W>(W);

impl<W: Write> Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        let mut line = Vec::with_capacity(buf.len() + 8);
        for &b in body {
            match b {
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                _ => line.push(b),
            }
        }
        line.push(b'\n');
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn open_daily_file(
    dir: &Path,
) -> Result<(tracing_appender::non_blocking::NonBlocking, WorkerGuard), Box<dyn std::error::Error>> {
    mnemo_sessions::fsutil::create_private_dir_all(dir, dir)?;
    let appender = tracing_appender::rolling::Builder::new()
        .rotation(tracing_appender::rolling::Rotation::DAILY)
        .filename_prefix("mnemo.log")
        .build(dir)?;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(FILE_BUFFER_LINES)
        .finish(appender);
    Ok((writer, guard))
}

/// Log lines that may wait for the file writer's thread before new ones
/// are dropped. tracing-appender's default, 128,000, allocates and touches
/// its whole queue up front: 4 MB, a quarter of a console chat's memory
/// (BENCHMARKS.md). 8,192 lines (256 kB) still absorbs a burst of
/// thousands of turns' lines while the writer drains the queue to disk.
const FILE_BUFFER_LINES: usize = 8_192;

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn the_library_caps_hold_whatever_the_filter_says() {
        for rust_log in ["trace", "serenity=trace,tokio_postgres=trace,trace"] {
            let filter = capped(stderr_filter(Some(rust_log), "info"));
            assert!(filter.would_enable("mnemo::pipeline", &Level::TRACE), "{rust_log}");
            assert!(!filter.would_enable("serenity::model", &Level::INFO), "{rust_log}");
            assert!(filter.would_enable("serenity::model", &Level::WARN), "{rust_log}");
            assert!(
                !filter.would_enable("serenity::gateway::ws", &Level::WARN),
                "{rust_log}"
            );
            assert!(
                !filter.would_enable("tokio_postgres::query", &Level::DEBUG),
                "{rust_log}"
            );
            assert!(!filter.would_enable("teloxide_core::net", &Level::INFO), "{rust_log}");
        }
    }

    #[test]
    fn rust_log_overrides_the_level_and_a_bad_one_falls_back_to_it() {
        let filter = stderr_filter(Some("mnemo=debug,warn"), "info");
        assert!(filter.would_enable("mnemo::app", &Level::DEBUG));
        assert!(!filter.would_enable("hyper", &Level::INFO));
        // A span filter is not a `Targets` directive: the level applies.
        let filter = stderr_filter(Some("[turn{user=1}]=trace"), "warn");
        assert!(!filter.would_enable("mnemo::app", &Level::INFO));
        assert!(filter.would_enable("mnemo::app", &Level::WARN));
        let filter = stderr_filter(None, "error");
        assert!(!filter.would_enable("mnemo::app", &Level::WARN));
    }

    #[test]
    fn a_filter_that_does_not_parse_is_an_error_naming_the_syntax() {
        assert!(parse_filter("info").is_ok());
        assert!(parse_filter("mnemo=debug,warn").is_ok());
        assert!(parse_filter("off").is_ok());
        let reason = parse_filter("mnemo=loud").unwrap_err();
        assert!(
            reason.contains("`mnemo=loud`") && reason.contains("target=level"),
            "{reason}"
        );
    }
}
