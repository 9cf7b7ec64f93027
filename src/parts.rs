//! What the running broker is built from, resolved from the config and
//! the environment by `cli::setup` (or a test): the state folder, the
//! model and summarizer, limits, and the database when memory is kept
//! there.

use crate::config::{LimitsConfig, RemindersConfig};
use crate::model::Model;
use mnemo_sessions::summarizer::Summarizer;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything the app needs, resolved from config and environment.
pub struct AppParts {
    pub state_root: PathBuf,
    pub system_prompt: String,
    pub tz: chrono_tz::Tz,
    pub limits: LimitsConfig,
    /// `reminders`: how many a user may have, how late one is still sent.
    pub reminders: RemindersConfig,
    /// The chat model's per-call timeout, for shutdown budgets.
    pub model_timeout: Duration,
    pub model: Arc<dyn Model>,
    /// `model.maxToolRounds` in effect (0 for a backend without tool
    /// calling): rounds of memory tool calls before the answer.
    pub max_tool_rounds: usize,
    pub summarizer: Arc<dyn Summarizer>,
    /// The channels whose answers are shown while the model writes them
    /// (`channels.<name>.streaming`), each with how long the first words
    /// wait (`streamHoldMs`); the others get each answer whole.
    pub streaming: std::collections::BTreeMap<String, Duration>,
    /// `store.kind: postgres`: the database pool (checked at start by
    /// `serve`); `None` keeps memory in the files.
    pub store: Option<mnemo_pg::PgStore>,
    /// What files with messages may be and what becomes of them
    /// (`limits.maxAttachmentBytes`, `model.vision`, `transcription`).
    pub attachments: crate::pipeline::AttachmentSettings,
}
