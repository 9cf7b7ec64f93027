//! Graceful shutdown: SIGINT or SIGTERM flips one watch that every channel
//! and background task listens to; the broker then drains in-flight turns
//! for a bounded time and exits 0.

use tokio::sync::watch;

/// The sending half; [`Trigger::fire`] starts the shutdown.
#[derive(Clone)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    pub fn new() -> (Trigger, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (Trigger(tx), rx)
    }

    pub fn fire(&self) {
        self.0.send_replace(true);
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// Fires `trigger` at the first SIGINT or SIGTERM.
pub fn on_signals(trigger: Trigger) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        trigger.fire();
    });
    Ok(())
}

/// Resolves once `rx` has seen `true`.
pub async fn fired(rx: &mut watch::Receiver<bool>) {
    // An error means every sender is gone, which also means "stop".
    let _ = rx.wait_for(|stop| *stop).await;
}
