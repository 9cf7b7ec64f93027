//! Abuse limits from the app config (`limits`): how much one user, and all
//! users together, may ask of the model.

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Model calls in flight across all users.
    pub max_concurrent_model_calls: usize,
    /// Longest message accepted; longer ones are refused with a short reply.
    pub max_message_chars: usize,
    /// Longest answer stored and sent; a longer model answer is cut
    /// visibly (see `crate::reply_limit`).
    pub max_reply_chars: usize,
    /// Sustained messages per minute per user (token bucket refill); `0`
    /// turns the per-user rate limit off. The console is never limited.
    pub user_messages_per_minute: u32,
    /// Messages one user may send in a quick burst before the rate applies
    /// (the bucket's size). Absent: the same as `userMessagesPerMinute`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_burst: Option<u32>,
    /// Messages one user may have waiting while an earlier one is answered;
    /// beyond it they get a "slow down" reply and the message is not taken.
    pub user_queue_depth: usize,
    /// A question found stored but unanswered after a restart (or left by
    /// a dead broker) is answered if it is younger than this; an older one
    /// is given up and its user told once that it was not answered.
    pub answer_stale_after_minutes: u64,
    /// Model tokens (in + out: answers, tool rounds, the user's summaries)
    /// one user may spend per day, their day (midnight in their
    /// timezone); then questions get a short reply instead of a model
    /// call. `0`: no limit.
    pub user_tokens_per_day: u64,
    /// Model tokens all users of one channel, and its daily and weekly
    /// summaries, may spend per day (the app's timezone). `0`: no limit.
    pub channel_tokens_per_day: u64,
    /// The largest file (voice note, photo, document) a message may bring,
    /// in bytes, declared or downloaded; a larger one gets a short reply.
    /// Telegram's Bot API serves bots at most 20 MB whatever this says.
    pub max_attachment_bytes: u64,
    /// A download that brings no bytes for this long is given up (the
    /// sender is told).
    pub attachment_stall_secs: u64,
    /// The most pages a PDF sent as a document may have; a longer one gets
    /// a short reply and is not read.
    pub max_document_pages: u32,
}

/// `limits.maxAttachmentBytes` when not set: 20 MB.
pub const DEFAULT_MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_concurrent_model_calls: 8,
            max_message_chars: 8000,
            max_reply_chars: 20_000,
            user_messages_per_minute: 10,
            user_burst: None,
            user_queue_depth: 20,
            answer_stale_after_minutes: 30,
            user_tokens_per_day: 0,
            channel_tokens_per_day: 0,
            max_attachment_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
            attachment_stall_secs: 30,
            max_document_pages: 300,
        }
    }
}

impl LimitsConfig {
    /// A [`FieldError`] (its field path within the app config) for a value that cannot work.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.max_concurrent_model_calls == 0 {
            return Err(FieldError::new("maxConcurrentModelCalls", "must be at least 1".into()));
        }
        if self.max_message_chars == 0 {
            return Err(FieldError::new("maxMessageChars", "must be at least 1".into()));
        }
        if self.max_reply_chars < 100 {
            return Err(FieldError::new(
                "maxReplyChars",
                "must be at least 100 (room for the note that an answer was cut)".into(),
            ));
        }
        if self.user_burst == Some(0) {
            return Err(FieldError::new(
                "userBurst",
                "must be at least 1 (or leave it out to use userMessagesPerMinute)".into(),
            ));
        }
        if self.max_attachment_bytes == 0 {
            return Err(FieldError::new("maxAttachmentBytes", "must be at least 1".into()));
        }
        if self.attachment_stall_secs == 0 {
            return Err(FieldError::new("attachmentStallSecs", "must be at least 1".into()));
        }
        if self.max_document_pages == 0 {
            return Err(FieldError::new("maxDocumentPages", "must be at least 1".into()));
        }
        if self.user_queue_depth == 0 {
            return Err(FieldError::new("userQueueDepth", "must be at least 1".into()));
        }
        if self.channel_tokens_per_day > 0 && self.user_tokens_per_day > self.channel_tokens_per_day {
            return Err(FieldError::new(
                "userTokensPerDay",
                format!(
                    "it is {}, more than channelTokensPerDay ({}): one user could never reach it; lower it, or set it to 0 for no per-user limit",
                    self.user_tokens_per_day, self.channel_tokens_per_day
                ),
            ));
        }
        Ok(())
    }

    /// How old a recovered question may be and still be answered.
    pub fn answer_stale_after(&self) -> chrono::TimeDelta {
        let minutes = i64::try_from(self.answer_stale_after_minutes).unwrap_or(i64::MAX / 60_000);
        chrono::TimeDelta::try_minutes(minutes).unwrap_or(chrono::TimeDelta::MAX)
    }

    /// The per-user bucket size in effect.
    pub fn burst(&self) -> u32 {
        self.user_burst.unwrap_or(self.user_messages_per_minute)
    }
}
