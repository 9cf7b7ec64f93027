//! One line of a short-term log: the JSONL record (DESIGN §3). The field
//! names are a contract with operators' scripts; add, never rename.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who said it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    /// The speaker label wherever a conversation is flattened to text.
    pub fn label(self) -> &'static str {
        match self {
            Role::User => "User",
            Role::Assistant => "Assistant",
        }
    }
}

/// `{"ts":"2026-03-23T03:28:32Z","role":"user","text":"hi","msgId":"123","channel":"slack"}`
/// plus optional `threadId`, `chatId`, `userName`. Unknown fields written by
/// newer versions are tolerated on read (and dropped on rewrite).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    #[serde(with = "ts_seconds")]
    pub ts: DateTime<Utc>,
    pub role: Role,
    pub text: String,
    pub msg_id: String,
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,
}

impl AsRef<Record> for Record {
    fn as_ref(&self) -> &Record {
        self
    }
}

/// Timestamps are written as RFC 3339 UTC with `Z` and at most millisecond
/// precision (`2026-03-23T03:28:32Z`, `2026-03-23T03:28:32.120Z`), and read
/// from any RFC 3339 form.
mod ts_seconds {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ts: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let raw = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&raw)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_matches_the_documented_wire_form() {
        let line = r#"{"ts":"2026-03-23T03:28:32Z","role":"user","text":"hi","msgId":"123","channel":"slack"}"#;
        let rec: Record = serde_json::from_str(line).unwrap();
        assert_eq!(rec.role, Role::User);
        assert_eq!(serde_json::to_string(&rec).unwrap(), line);
    }
}
