//! Operations: what an operator watches a running mnemo with. The ops HTTP
//! endpoint (`ops.listen`: `/healthz`, `/readyz`, `/metrics`), the
//! Prometheus metrics every part of the broker records into, the one
//! structured log line per turn, and the model wrapper that counts tokens
//! and latency; and the operator's data verbs (forget, backup, restore)
//! with the control socket that lets them reach a running bot.
//!
//! What it must not do: put a user id or any message text into a metric
//! label, or message text into a log field (the turn log names a user only
//! by a short hash of channel + id), or change what a turn does: the
//! recording parts only observe.

pub mod control;
pub mod keep;
pub mod metered;
pub mod metrics;
mod process;
pub mod ready;
pub mod server;
pub mod turn_log;
