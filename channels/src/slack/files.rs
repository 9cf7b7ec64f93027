//! Slack files: the `files` of a message event become [`Attachment`]s,
//! and one is downloaded from its `url_private_download` with the bot
//! token as `Authorization: Bearer` (Slack serves private files only so).
//! The token goes only to Slack's own hosts (`*.slack.com`) or the host of
//! the configured `apiUrl`; a file URL anywhere else is refused, so a
//! crafted event cannot make the bot hand its token to a stranger.

use crate::download::{self, DownloadError, DownloadLimits};
use crate::{Attachment, AttachmentKind};
use slack_morphism::prelude::SlackFile;

/// The downloads' client, the bot token and the hosts it may go to.
pub(crate) struct Files {
    client: reqwest::Client,
    token: String,
    /// The host of the configured `apiUrl`, if one is set.
    api_host: Option<String>,
}

impl Files {
    pub(crate) fn new(token: &str, api_url: Option<&str>) -> Files {
        let api_host = api_url
            .and_then(|u| reqwest::Url::parse(u).ok())
            .and_then(|u| u.host_str().map(str::to_string));
        Files {
            client: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            token: token.trim().to_string(),
            api_host,
        }
    }

    pub(crate) async fn download(
        &self,
        attachment: &Attachment,
        limits: DownloadLimits,
    ) -> Result<Vec<u8>, DownloadError> {
        if attachment.size.is_some_and(|size| size > limits.max_bytes) {
            return Err(DownloadError::TooLarge {
                limit: limits.max_bytes,
            });
        }
        let url = reqwest::Url::parse(&attachment.source)
            .map_err(|_| DownloadError::Failed("the file's address is not a URL".into()))?;
        if !self.trusted(&url) {
            return Err(DownloadError::Failed("the file is not on Slack".into()));
        }
        let request = self.client.get(url).bearer_auth(&self.token);
        download::fetch(request, limits).await
    }

    fn trusted(&self, url: &reqwest::Url) -> bool {
        let Some(host) = url.host_str() else { return false };
        let slack = url.scheme() == "https" && (host == "slack.com" || host.ends_with(".slack.com"));
        slack || self.api_host.as_deref() == Some(host)
    }
}

/// The files of a message the broker can take: each with a download URL.
pub(crate) fn attachments(files: Option<&Vec<SlackFile>>) -> Vec<Attachment> {
    files
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let url = f.url_private_download.as_ref().or(f.url_private.as_ref())?;
            let mime = f.mimetype.as_ref().map(|m| m.0.clone());
            Some(Attachment {
                kind: kind_of(mime.as_deref()),
                name: f.name.clone(),
                mime,
                size: None,
                duration_secs: None,
                source: url.to_string(),
            })
        })
        .collect()
}

/// What a file is, by its declared type: audio (Slack's recorded clips
/// are audio files too), an image, or a document.
pub(crate) fn kind_of(mime: Option<&str>) -> AttachmentKind {
    match mime.unwrap_or("") {
        m if m.starts_with("audio/") => AttachmentKind::Audio,
        m if m.starts_with("image/") => AttachmentKind::Photo,
        _ => AttachmentKind::Document,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_only_to_slack_or_the_configured_api_host() {
        let files = Files::new("xoxb-1", Some("http://127.0.0.1:4000/api"));
        let ok = |u: &str| files.trusted(&reqwest::Url::parse(u).unwrap());
        assert!(ok("https://files.slack.com/files-pri/T1-F1/download/a.png"));
        assert!(ok("http://127.0.0.1:4000/files/F1"));
        assert!(!ok("http://files.slack.com/x"), "not over plain http");
        assert!(!ok("https://slack.com.evil.example/x"));
        assert!(!ok("https://evil.example/files.slack.com"));
        assert!(!Files::new("xoxb-1", None).trusted(&reqwest::Url::parse("http://127.0.0.1:4000/x").unwrap()));
    }

    #[test]
    fn files_are_sorted_by_their_declared_type() {
        assert_eq!(kind_of(Some("audio/webm")), AttachmentKind::Audio);
        assert_eq!(kind_of(Some("image/png")), AttachmentKind::Photo);
        assert_eq!(kind_of(Some("application/pdf")), AttachmentKind::Document);
        assert_eq!(kind_of(None), AttachmentKind::Document);
    }
}
