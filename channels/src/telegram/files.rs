//! Downloading a message's file from Telegram: `getFile` turns the
//! `file_id` into a `file_path`, then `GET {api}/file/bot<token>/<path>`
//! fetches it. The Bot API serves files of at most 20 MB to bots
//! ([`BOT_API_DOWNLOAD_LIMIT`]); a larger one is refused before any byte
//! moves. The token is in both URLs: no error here carries a URL.

use crate::Attachment;
use crate::download::{self, DownloadError, DownloadLimits};
use serde::Deserialize;

/// The most a bot may download through the public Bot API (20 MB).
pub const BOT_API_DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;

/// What downloads need: their own client (no whole-call timeout: the
/// stall timeout bounds them), the API base and the token.
pub(crate) struct Files {
    client: reqwest::Client,
    api_url: String,
    token: String,
}

#[derive(Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    result: Option<FileInfo>,
}

#[derive(Deserialize)]
struct FileInfo {
    #[serde(default)]
    file_path: Option<String>,
    #[serde(default)]
    file_size: Option<u64>,
}

impl Files {
    pub(crate) fn new(api_url: &reqwest::Url, token: &str) -> Result<Files, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Files {
            client,
            api_url: api_url.as_str().trim_end_matches('/').to_string(),
            token: token.trim().to_string(),
        })
    }

    pub(crate) async fn download(
        &self,
        attachment: &Attachment,
        limits: DownloadLimits,
    ) -> Result<Vec<u8>, DownloadError> {
        let limits = DownloadLimits {
            max_bytes: limits.max_bytes.min(BOT_API_DOWNLOAD_LIMIT),
            ..limits
        };
        let too_large = DownloadError::TooLarge {
            limit: limits.max_bytes,
        };
        if attachment.size.is_some_and(|size| size > limits.max_bytes) {
            return Err(too_large);
        }
        let request = self
            .client
            .post(format!("{}/bot{}/getFile", self.api_url, self.token))
            .json(&serde_json::json!({ "file_id": attachment.source }));
        // getFile's answer is a small JSON object, whatever the file's size.
        let answer_limits = DownloadLimits {
            max_bytes: 64 * 1024,
            ..limits
        };
        let body = download::fetch_answer(request, answer_limits).await?;
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|_| DownloadError::Failed("getFile answered something unreadable".into()))?;
        let info = match (answer.ok, answer.result) {
            (true, Some(info)) => info,
            _ => {
                let reason = answer.description.unwrap_or_else(|| "no reason given".into());
                if reason.to_ascii_lowercase().contains("too big") {
                    return Err(too_large);
                }
                return Err(DownloadError::Failed(format!("getFile: {}", clip(&reason))));
            }
        };
        if info.file_size.is_some_and(|size| size > limits.max_bytes) {
            return Err(too_large);
        }
        let path = info
            .file_path
            .ok_or_else(|| DownloadError::Failed("getFile gave no file_path".into()))?;
        let url = format!(
            "{}/file/bot{}/{}",
            self.api_url,
            self.token,
            path.trim_start_matches('/')
        );
        download::fetch(self.client.get(url), limits).await
    }
}

/// Telegram's reason, short and without anything that looks like a token.
fn clip(reason: &str) -> String {
    reason.chars().take(200).collect()
}
