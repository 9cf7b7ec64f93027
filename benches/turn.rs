//! What one turn costs the broker itself, the model excluded: dispatch,
//! the durable append of the user message, the context read and build,
//! the append of the reply and the send — the real `App` with an
//! in-process model that answers at once (a bench measures our side; the
//! network fakes belong to the tests). Compaction runs as configured by
//! default, so its amortised cost (every ~40 turns) is in the numbers.

use async_trait::async_trait;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mnemo::app::{App, AppParts};
use mnemo::config::LimitsConfig;
use mnemo::model::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, ModelSummarizer};
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound, Shutdown};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

struct InstantModel;

#[async_trait]
impl Model for InstantModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            text: format!("ok: {} chars of context", request.context.system.len()),
            usage: None,
        })
    }
    async fn stream(&self, _: &ModelRequest) -> Result<DeltaStream, ModelError> {
        Err(ModelError::Protocol {
            detail: "not used".into(),
        })
    }
    fn describe(&self) -> String {
        "instant".into()
    }
}

/// Signals each reply it is asked to send.
struct Signal(Notify);

#[async_trait]
impl Channel for Signal {
    fn name(&self) -> &str {
        "bench"
    }
    fn max_message_chars(&self) -> usize {
        4000
    }
    async fn receive(&self, _: mpsc::Sender<Inbound>, _: Shutdown) -> Result<(), ChannelError> {
        Ok(())
    }
    async fn send(&self, _: Outbound) -> Result<(), ChannelError> {
        self.0.notify_one();
        Ok(())
    }
}

fn message(n: u64) -> Inbound {
    Inbound {
        channel: "bench".into(),
        user_id: "U1".into(),
        user_name: None,
        chat_id: "D1".into(),
        chat_kind: ChatKind::Direct,
        thread_id: None,
        msg_id: format!("m{n}"),
        text: "How long until the build finishes, and what should I check first?".into(),
        ts: chrono::Utc::now(),
        addressed: true,
        interaction: None,
    }
}

fn turn(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("turn");
    group.measurement_time(Duration::from_secs(4)).sample_size(40);
    for fsync in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("channels/bench/sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        // The default operator config: the log stays bounded by compaction
        // (which the instant model answers), as in steady-state service.
        let config = format!(r#"{{"stm": {{"fsync": {fsync}}}}}"#);
        std::fs::write(sessions.join("config.json"), config).unwrap();
        let model: Arc<dyn Model> = Arc::new(InstantModel);
        let parts = AppParts {
            state_root: dir.path().to_path_buf(),
            system_prompt: "You are a helpful assistant.".into(),
            tz: chrono_tz::UTC,
            limits: LimitsConfig::default(),
            model_timeout: Duration::from_secs(5),
            summarizer: Arc::new(ModelSummarizer::new(model.clone())),
            model,
        };
        let channel = Arc::new(Signal(Notify::new()));
        let app = rt.block_on(async { App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).unwrap() });
        let seq = AtomicU64::new(0);
        let label = if fsync { "fsync_on" } else { "fsync_off" };
        group.bench_with_input(BenchmarkId::new("one_message_answered", label), &fsync, |b, _| {
            b.iter(|| {
                rt.block_on(async {
                    app.submit(message(seq.fetch_add(1, Ordering::Relaxed))).await;
                    channel.0.notified().await;
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, turn);
criterion_main!(benches);
