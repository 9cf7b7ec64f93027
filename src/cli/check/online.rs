//! `mnemo config check --online`: one tiny model request (and one for the
//! summarizer when it is a different model), and one authenticated call per
//! enabled platform that sends nothing to anyone. Each is printed as `ok`
//! or `failing` with why; every probe has a time limit.

use super::Built;
use crate::model::{Model, ModelRequest};
use mnemo_sessions::context::Context;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs every probe; returns how many failed.
pub(super) async fn probe(built: &Built) -> usize {
    println!("online checks:");
    let mut failing = 0;
    let models = [("model", &built.model), ("summarizer", &built.summarizer)];
    for (name, model) in models {
        if let Some(model) = model {
            failing += usize::from(!report(name, ask(model.as_ref())).await);
        }
    }
    for channel in &built.platforms {
        let name = format!("channel {}", channel.name());
        let channel = Arc::clone(channel);
        let probed = async move { channel.probe().await.map_err(|e| e.to_string()) };
        failing += usize::from(!report(&name, probed).await);
    }
    failing
}

/// A one-word request: proves the URL, the key and the model name.
async fn ask(model: &dyn Model) -> Result<String, String> {
    let request = ModelRequest::new(Context::default(), "Reply with the single word: ok");
    let reply = model.complete(&request).await.map_err(|e| e.to_string())?;
    let usage = if reply.usage.is_some() { " (usage reported)" } else { "" };
    Ok(format!("{} answered{usage}", model.describe()))
}

async fn report(name: &str, check: impl Future<Output = Result<String, String>>) -> bool {
    let started = Instant::now();
    let outcome = match tokio::time::timeout(PROBE_TIMEOUT, check).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())),
    };
    let ms = started.elapsed().as_millis();
    match outcome {
        Ok(what) => {
            println!("  ok      {name}: {what} ({ms} ms)");
            true
        }
        Err(why) => {
            println!("  failing {name}: {why}");
            false
        }
    }
}
