//! `attachments`: what becomes of the files people send beyond the text
//! taken from them (transcript, caption, a document's text).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AttachmentsConfig {
    /// Keep the files themselves (voice notes, photos, documents) as the
    /// sender's memory, with its privacy, export and forget rules
    /// (`mnemo_sessions::kept`). Off: only the text is kept.
    pub keep: bool,
}
