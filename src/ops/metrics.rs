//! The process's Prometheus metrics (`/metrics`), as one registry shared by
//! the whole process: recording is a call from wherever the event happens
//! (pipeline, access gate, model wrapper, scheduler) without threading a
//! handle through every constructor — the same shape as the `metrics` crate
//! facade. Labels are channel names, outcomes, reasons, purposes and model
//! names: small fixed sets. Never a user id, never message text.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelOutcome {
    channel: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelReason {
    channel: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    channel: String,
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurposeLabel {
    purpose: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    purpose: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    purpose: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttachmentLabels {
    channel: String,
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric mnemo exports. Cheap to record into from any task: the
/// families are internally synchronised.
pub struct Metrics {
    registry: Registry,
    /// The `process_*` metrics, unprefixed as every exporter names them.
    process: Registry,
    turns: Family<ChannelOutcome, Counter>,
    turn_seconds: Histograms<ChannelOutcome>,
    first_text_seconds: Histograms<ChannelLabel>,
    model_seconds: Histograms<PurposeLabel>,
    model_failures: Family<FailureLabels, Counter>,
    /// The chat model's health as its answer calls report it.
    model_failures_in_a_row: Gauge,
    model_healthy: Gauge,
    tokens_in: Family<TokenLabels, Counter>,
    tokens_out: Family<TokenLabels, Counter>,
    refused: Family<ChannelReason, Counter>,
    compactions: Family<ChannelOutcome, Counter>,
    /// Questions found stored and unanswered at start (or left by a dead
    /// broker), by what became of them: `answered` (queued for an answer)
    /// or `stale` (given up, the user told once).
    recovered: Family<ChannelOutcome, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    recall_embeddings: Family<OutcomeLabel, Counter>,
    summarizer_failures: Counter,
    maintenance_runs: Family<ChannelOutcome, Counter>,
    /// Reminders by what became of them: `set`, `delivered`, `late`,
    /// `missed`, `failed` (counts only: never a reminder's text).
    reminders: Family<ChannelOutcome, Counter>,
    reconnects: Family<ChannelLabel, Counter>,
    connected: Family<ChannelLabel, Gauge>,
    queue_users: Gauge,
    queued_messages: Gauge,
    /// 1 when every readiness check passed at the last scrape.
    ready: Gauge,
    /// Files that came with messages, by channel, kind and outcome.
    attachments: Family<AttachmentLabels, Counter>,
    transcription_seconds: Histogram,
    transcription_failures: Family<ReasonLabel, Counter>,
}

fn fine_buckets() -> Histogram {
    // 0.1 ms … ~13 s: mnemo's own delay, and a platform's rate-limit wait.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

fn seconds_buckets() -> Histogram {
    // 5 ms … ~82 s: from a /session answer to a slow model.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Metrics {
    fn new() -> Metrics {
        let m = Metrics {
            turns: Family::default(),
            turn_seconds: Family::new_with_constructor(seconds_buckets),
            first_text_seconds: Family::new_with_constructor(fine_buckets),
            model_seconds: Family::new_with_constructor(seconds_buckets),
            model_failures: Family::default(),
            model_failures_in_a_row: Gauge::default(),
            model_healthy: Gauge::default(),
            tokens_in: Family::default(),
            tokens_out: Family::default(),
            refused: Family::default(),
            compactions: Family::default(),
            recovered: Family::default(),
            tool_calls: Family::default(),
            recall_embeddings: Family::default(),
            summarizer_failures: Counter::default(),
            maintenance_runs: Family::default(),
            reminders: Family::default(),
            reconnects: Family::default(),
            connected: Family::default(),
            queue_users: Gauge::default(),
            queued_messages: Gauge::default(),
            ready: Gauge::default(),
            attachments: Family::default(),
            transcription_seconds: seconds_buckets(),
            transcription_failures: Family::default(),
            registry: Registry::default(),
            process: Registry::default(),
        };
        // Healthy until answer calls say otherwise.
        m.model_healthy.set(1);
        let registry = m.register();
        let mut process = Registry::default();
        process.register_collector(Box::new(super::process::ProcessCollector));
        Metrics { registry, process, ..m }
    }

    /// The registry that exposes every family under its name and help
    /// text, in the order `/metrics` lists them.
    fn register(&self) -> Registry {
        let mut registry = Registry::with_prefix("mnemo");
        registry.register("turns", "Turns finished, by channel and outcome", self.turns.clone());
        registry.register(
            "recall_embeddings",
            "Embedding requests of recall (questions and indexing), by outcome",
            self.recall_embeddings.clone(),
        );
        registry.register(
            "turn_seconds",
            "Whole-turn latency from intake to reply sent, by channel and outcome",
            self.turn_seconds.clone(),
        );
        registry.register(
            "build",
            "The running mnemo's version and git revision",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                revision: env!("MNEMO_GIT_REV").into(),
            }),
        );
        registry.register(
            "first_text_seconds",
            "Streamed answers: from the model's first text to the platform call showing it",
            self.first_text_seconds.clone(),
        );
        self.register_model(&mut registry);
        self.register_attachments(&mut registry);
        registry.register(
            "recovered_questions",
            "Questions found stored but unanswered after a restart (or a dead broker), by channel and outcome: answered or stale (given up, the user told)",
            self.recovered.clone(),
        );
        registry.register(
            "refused_messages",
            "Messages refused before storage, by channel and reason",
            self.refused.clone(),
        );
        registry.register(
            "compactions",
            "Compaction runs, by channel and outcome",
            self.compactions.clone(),
        );
        registry.register(
            "memory_tool_calls",
            "Memory tool calls the model made, by channel, tool and outcome",
            self.tool_calls.clone(),
        );
        registry.register(
            "summarizer_failures",
            "Summarizer model calls that failed",
            self.summarizer_failures.clone(),
        );
        registry.register(
            "maintenance_runs",
            "Maintenance runs, by channel and outcome",
            self.maintenance_runs.clone(),
        );
        registry.register(
            "reminders",
            "Reminders set, delivered (on time or late), missed and failed, by channel",
            self.reminders.clone(),
        );
        registry.register(
            "platform_reconnects",
            "Times a platform connection came back after the first",
            self.reconnects.clone(),
        );
        registry.register(
            "platform_connected",
            "1 while the platform connection is up",
            self.connected.clone(),
        );
        registry.register(
            "queue_users",
            "Users with a live message queue",
            self.queue_users.clone(),
        );
        registry.register(
            "queued_messages",
            "Messages waiting in user queues",
            self.queued_messages.clone(),
        );
        registry.register(
            "ready",
            "1 when every readiness check passes (state folder, database, platforms: what /readyz answers 200 to), checked at each scrape",
            self.ready.clone(),
        );
        registry
    }

    /// Files with messages, and their transcription.
    fn register_attachments(&self, registry: &mut Registry) {
        registry.register(
            "attachments",
            "Files that came with messages, by channel, kind (voice, audio, photo, document) and outcome",
            self.attachments.clone(),
        );
        registry.register(
            "transcription_seconds",
            "Voice and audio transcription calls that answered, by latency",
            self.transcription_seconds.clone(),
        );
        registry.register(
            "transcription_failures",
            "Transcription calls that failed, by reason (timeout, connect, status, unreadable)",
            self.transcription_failures.clone(),
        );
    }

    /// The model's families: latency, failures, health, tokens.
    fn register_model(&self, registry: &mut Registry) {
        registry.register(
            "model_seconds",
            "Model call latency, by purpose (answer, summary)",
            self.model_seconds.clone(),
        );
        registry.register(
            "model_failures",
            "Model calls that failed, by purpose and status (an HTTP status, timeout, connect, stream_error, unreadable, command)",
            self.model_failures.clone(),
        );
        registry.register(
            "model_answer_failures_in_a_row",
            "Answer calls of the chat model that failed in a row since its last success",
            self.model_failures_in_a_row.clone(),
        );
        registry.register(
            "model_healthy",
            "0 while the chat model's last answer calls failed (3 or more in a row), else 1; not part of readiness",
            self.model_healthy.clone(),
        );
        registry.register(
            "model_input_tokens",
            "Prompt tokens the model reported",
            self.tokens_in.clone(),
        );
        registry.register(
            "model_output_tokens",
            "Completion tokens the model reported",
            self.tokens_out.clone(),
        );
    }

    /// The text exposition (OpenMetrics, which Prometheus scrapes): mnemo's
    /// own families, then the process's (read from `/proc` now; absent
    /// where there is none).
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &self.process);
        let _ = encode_eof(&mut out);
        out
    }

    pub fn turn(&self, channel: &str, outcome: &str, took: Duration) {
        let labels = channel_outcome(channel, outcome);
        self.turns.get_or_create(&labels).inc();
        self.turn_seconds.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// A streamed answer's first text took `took` from the model to the
    /// channel (mnemo's added latency to the first token).
    pub fn first_text(&self, channel: &str, took: Duration) {
        self.first_text_seconds
            .get_or_create(&ChannelLabel {
                channel: channel.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn model_call(&self, purpose: &str, took: Duration) {
        self.model_seconds
            .get_or_create(&PurposeLabel {
                purpose: purpose.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// `status` is [`crate::model::ModelError::status_label`]: a small set.
    pub fn model_failed(&self, purpose: &str, status: &str) {
        self.model_failures
            .get_or_create(&FailureLabels {
                purpose: purpose.into(),
                status: status.into(),
            })
            .inc();
        if purpose == "summary" {
            self.summarizer_failures.inc();
        }
    }

    /// The chat model's answer calls have failed `in_a_row` times since
    /// the last success; `failing` once that reaches the threshold.
    pub fn model_health(&self, in_a_row: u32, failing: bool) {
        self.model_failures_in_a_row.set(i64::from(in_a_row));
        self.model_healthy.set(i64::from(!failing));
    }

    pub fn tokens(&self, model: &str, purpose: &str, input: u64, output: u64) {
        let labels = TokenLabels {
            model: model.into(),
            purpose: purpose.into(),
        };
        self.tokens_in.get_or_create(&labels).inc_by(input);
        self.tokens_out.get_or_create(&labels).inc_by(output);
    }

    /// `reason` is one of a fixed set of short codes (see `access`).
    pub fn refused(&self, channel: &str, reason: &'static str) {
        self.refused
            .get_or_create(&ChannelReason {
                channel: channel.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// `outcome`: `answered` (queued for its answer) or `stale`.
    pub fn recovered(&self, channel: &str, outcome: &'static str, n: usize) {
        self.recovered
            .get_or_create(&channel_outcome(channel, outcome))
            .inc_by(n as u64);
    }

    pub fn compaction(&self, channel: &str, outcome: &'static str) {
        self.compactions.get_or_create(&channel_outcome(channel, outcome)).inc();
    }

    /// `tool` is one of the memory tools' names or `unknown`; `outcome` a
    /// fixed code (`ok`, `invalid`, `not_found`, `limit`, `failed`).
    pub fn tool_call(&self, channel: &str, tool: &'static str, outcome: &'static str) {
        self.tool_calls
            .get_or_create(&ToolLabels {
                channel: channel.into(),
                tool: tool.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// `outcome` is `ok` or one of `EmbedError::outcome`'s codes.
    pub fn recall_embeddings(&self, outcome: &'static str) {
        self.recall_embeddings
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    pub fn maintenance_run(&self, channel: &str, outcome: &'static str) {
        self.maintenance_runs
            .get_or_create(&channel_outcome(channel, outcome))
            .inc();
    }

    /// One file of a message: `kind` an `AttachmentKind` name, `outcome`
    /// a fixed code (`transcribed`, `seen`, `stored`, `too_large`, …).
    pub fn attachment(&self, channel: &str, kind: &'static str, outcome: &'static str) {
        self.attachments
            .get_or_create(&AttachmentLabels {
                channel: channel.into(),
                kind: kind.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A transcription call answered after `took`.
    pub fn transcribed(&self, took: Duration) {
        self.transcription_seconds.observe(took.as_secs_f64());
    }

    /// A transcription call failed; `reason` a fixed code.
    pub fn transcription_failed(&self, reason: &'static str) {
        self.transcription_failures
            .get_or_create(&ReasonLabel { reason: reason.into() })
            .inc();
    }

    /// `outcome`: `set`, `delivered`, `late`, `missed` or `failed`.
    pub fn reminder(&self, channel: &str, outcome: &'static str) {
        self.reminders.get_or_create(&channel_outcome(channel, outcome)).inc();
    }

    /// Brings the platform gauges up to date with a channel's link report.
    /// `connects` only grows, so the reconnect counter follows it.
    pub fn link(&self, channel: &str, connected: bool, connects: u64) {
        let label = ChannelLabel {
            channel: channel.into(),
        };
        self.connected.get_or_create(&label).set(i64::from(connected));
        let reconnects = self.reconnects.get_or_create(&label);
        let seen = reconnects.get();
        let now = connects.saturating_sub(1);
        if now > seen {
            reconnects.inc_by(now - seen);
        }
    }

    pub fn ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    pub fn queues(&self, users: usize, messages: usize) {
        self.queue_users.set(i64::try_from(users).unwrap_or(i64::MAX));
        self.queued_messages.set(i64::try_from(messages).unwrap_or(i64::MAX));
    }
}

fn channel_outcome(channel: &str, outcome: &str) -> ChannelOutcome {
    ChannelOutcome {
        channel: channel.into(),
        outcome: outcome.into(),
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_and_transcriptions_show_by_kind_outcome_and_reason() {
        let m = Metrics::new();
        m.attachment("telegram", "voice", "transcribed");
        m.attachment("slack", "photo", "not_an_image");
        m.transcribed(Duration::from_millis(700));
        m.transcription_failed("timeout");
        let text = m.encode();
        for line in [
            r#"mnemo_attachments_total{channel="telegram",kind="voice",outcome="transcribed"} 1"#,
            r#"mnemo_attachments_total{channel="slack",kind="photo",outcome="not_an_image"} 1"#,
            "mnemo_transcription_seconds_count 1",
            r#"mnemo_transcription_failures_total{reason="timeout"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn recorded_events_show_in_the_exposition_with_their_labels() {
        let m = Metrics::new();
        m.turn("telegram", "answered", Duration::from_millis(20));
        m.tokens("gpt-x", "answer", 10, 5);
        m.refused("slack", "rate_limit");
        m.link("discord", true, 3);
        m.link("discord", true, 3);
        m.recall_embeddings("timeout");
        m.recovered("telegram", "answered", 3);
        m.recovered("telegram", "stale", 2);
        let text = m.encode();
        assert!(
            text.contains(r#"mnemo_recovered_questions_total{channel="telegram",outcome="answered"} 3"#)
                && text.contains(r#"mnemo_recovered_questions_total{channel="telegram",outcome="stale"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_recall_embeddings_total{outcome="timeout"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_turns_total{channel="telegram",outcome="answered"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_model_input_tokens_total{model="gpt-x",purpose="answer"} 10"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_refused_messages_total{channel="slack",reason="rate_limit"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_platform_reconnects_total{channel="discord"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"mnemo_turn_seconds_count{channel="telegram",outcome="answered"} 1"#),
            "{text}"
        );
        assert!(text.contains("mnemo_build_info{version=\""), "{text}");
        assert!(text.contains("mnemo_model_healthy 1"), "{text}");
        m.model_failed("answer", "429");
        m.model_failed("answer", "401");
        assert!(
            text_of(&m).contains(r#"mnemo_model_failures_total{purpose="answer",status="429"} 1"#),
            "a rate limit is told apart from a refused key"
        );
        assert!(text.ends_with("# EOF\n"), "one EOF, at the end");
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    fn text_of(m: &Metrics) -> String {
        m.encode()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_metrics_are_read_from_proc_on_linux() {
        let text = Metrics::new().encode();
        for name in [
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            let value: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .unwrap_or_else(|| panic!("{name} missing: {text}"))
                .trim()
                .parse()
                .unwrap();
            assert!(value > 0.0 || name.starts_with("process_cpu"), "{name}{value}");
        }
        let start = text
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .unwrap()
            .trim()
            .parse::<f64>()
            .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(start <= now + 1.0 && start > now - 86_400.0 * 30.0, "{start} vs {now}");
    }
}
