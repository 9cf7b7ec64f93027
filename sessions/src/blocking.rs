//! Running file work on Tokio's blocking pool, so reads, gzip and fsyncs
//! never stall the async workers that serve other users' turns. A panic in
//! the work is re-raised in the caller, as if it had run inline.

/// Runs `work` on the blocking pool; `None` only when the runtime is
/// shutting down and the work was never run to completion.
pub(crate) async fn off_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Some(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}
