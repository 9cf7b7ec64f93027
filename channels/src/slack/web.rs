//! The Slack Web API calls the adapter makes (slack-morphism's typed client),
//! each retried while Slack answers 429 and for as long as its `Retry-After`
//! asks (capped), plus answers through a slash command's `response_url`.
//!
//! Errors say which method failed and Slack's error code with a hint, never
//! a token, a response body (it may echo message text) or a `response_url`.

use super::events::Identity;
use crate::retry::{RetryPolicy, Verdict};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Retries of one call on 429: 3, each as long as `Retry-After` asks, up
/// to a minute. No shutdown cuts these waits: replies are still sent while
/// the broker drains, and the waits are bounded.
const RETRY: RetryPolicy = RetryPolicy {
    max_retries: 3,
    base_delay: DEFAULT_RETRY_AFTER,
    max_delay: Duration::from_secs(10),
    max_retry_after: Duration::from_secs(60),
};
/// Wait when Slack answers 429 without saying how long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

pub type Client = SlackClient<SlackClientHyperHttpsConnector>;

/// A failed Web API call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("Slack {method} failed: {reason}")]
pub struct WebError {
    pub method: &'static str,
    pub reason: String,
    /// Slack's error code (`invalid_auth`, `channel_not_found`, …) if it gave one.
    pub code: Option<String>,
}

pub struct Web {
    pub client: Arc<Client>,
    token: SlackApiToken,
    /// For `response_url` answers, which are plain webhooks outside the Web API.
    http: reqwest::Client,
}

/// The HTTP connector: Slack's public API over https by default; with an
/// `apiUrl` (GovSlack, a proxy, a test server) http is allowed too, since
/// slack-morphism's default connector is https-only.
pub fn connector(api_url: Option<&str>) -> std::io::Result<SlackClientHyperHttpsConnector> {
    match api_url {
        None => SlackClientHyperConnector::new(),
        Some(url) => {
            let https = SlackHyperHttpsConnector::builder()
                .with_native_roots()?
                .https_or_http()
                .enable_all_versions()
                .build();
            Ok(SlackClientHyperConnector::with_connector(https).with_slack_api_url(url.trim_end_matches('/')))
        }
    }
}

impl Web {
    pub fn new(connector: SlackClientHyperHttpsConnector, bot_token: &str) -> Self {
        Web {
            client: Arc::new(SlackClient::new(connector)),
            token: SlackApiToken::new(SlackApiTokenValue(bot_token.to_string())),
            http: reqwest::Client::new(),
        }
    }

    /// Who the bot is; fails on a bad token.
    pub async fn auth_test(&self) -> Result<Identity, WebError> {
        let res = call("auth.test", || async move {
            self.client.open_session(&self.token).auth_test().await
        })
        .await?;
        Ok(Identity {
            user_id: res.user_id.0,
            name: res.user,
        })
    }

    /// Whether `user` is a workspace admin or owner (`users.info`, scope
    /// `users:read`): Slack's API names no per-channel admins outside
    /// Enterprise Grid, so these are a channel's admins to mnemo.
    pub async fn is_admin(&self, user: &str) -> Result<bool, WebError> {
        let req = &SlackApiUsersInfoRequest::new(SlackUserId(user.to_string()));
        let res = call("users.info", || async move {
            self.client.open_session(&self.token).users_info(req).await
        })
        .await?;
        let flags = res.user.flags;
        Ok([flags.is_admin, flags.is_owner, flags.is_primary_owner].contains(&Some(true)))
    }

    /// Checks that the app-level token may open Socket Mode connections, so
    /// a wrong token is one clear error at start instead of endless retries.
    pub async fn check_app_token(&self, app_token: &SlackApiToken) -> Result<(), WebError> {
        let req = &SlackApiAppsConnectionOpenRequest::new();
        call("apps.connections.open", || async move {
            self.client.open_session(app_token).apps_connections_open(req).await
        })
        .await?;
        Ok(())
    }

    /// Posts `text` (already mrkdwn) and returns the new message's `ts`.
    pub async fn post(&self, channel: &str, thread_ts: Option<&str>, text: &str) -> Result<String, WebError> {
        let req =
            &SlackApiChatPostMessageRequest::new(channel.into(), SlackMessageContent::new().with_text(text.into()))
                .opt_thread_ts(thread_ts.map(|t| t.into()));
        let res = call("chat.postMessage", || async move {
            self.client.open_session(&self.token).chat_post_message(req).await
        })
        .await?;
        Ok(res.ts.0)
    }

    pub async fn update(&self, channel: &str, ts: &str, text: &str) -> Result<(), WebError> {
        let req = &SlackApiChatUpdateRequest::new(
            channel.into(),
            SlackMessageContent::new().with_text(text.into()),
            ts.into(),
        );
        call("chat.update", || async move {
            self.client.open_session(&self.token).chat_update(req).await
        })
        .await?;
        Ok(())
    }

    pub async fn delete(&self, channel: &str, ts: &str) -> Result<(), WebError> {
        let req = &SlackApiChatDeleteRequest::new(channel.into(), ts.into());
        call("chat.delete", || async move {
            self.client.open_session(&self.token).chat_delete(req).await
        })
        .await?;
        Ok(())
    }

    /// A message only `user` sees, in `channel`.
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<(), WebError> {
        let req = &SlackApiChatPostEphemeralRequest::new(
            channel.into(),
            user.into(),
            SlackMessageContent::new().with_text(text.into()),
        )
        .opt_thread_ts(thread_ts.map(|t| t.into()));
        call("chat.postEphemeral", || async move {
            self.client.open_session(&self.token).chat_post_ephemeral(req).await
        })
        .await?;
        Ok(())
    }

    /// The bot's direct-message conversation with `user`.
    pub async fn open_dm(&self, user: &str) -> Result<String, WebError> {
        let req = &SlackApiConversationsOpenRequest::new().with_users(vec![user.into()]);
        let res = call("conversations.open", || async move {
            self.client.open_session(&self.token).conversations_open(req).await
        })
        .await?;
        Ok(res.channel.id.0)
    }

    /// Uploads a file into `channel` with the current flow:
    /// `files.getUploadURLExternal`, the bytes to that URL, then
    /// `files.completeUploadExternal` to share it with a comment.
    pub async fn upload(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        path: &Path,
        comment: &str,
    ) -> Result<(), WebError> {
        let content = tokio::fs::read(path).await.map_err(|e| WebError {
            method: "files.getUploadURLExternal",
            reason: format!("could not read the file to upload: {e}"),
            code: None,
        })?;
        let filename = path
            .file_name()
            .map_or_else(|| "export.tar.gz".into(), |n| n.to_string_lossy().into_owned());
        let ticket_req = &SlackApiFilesGetUploadUrlExternalRequest::new(filename.clone(), content.len());
        let ticket = call("files.getUploadURLExternal", || async move {
            self.client
                .open_session(&self.token)
                .get_upload_url_external(ticket_req)
                .await
        })
        .await?;
        let bytes_req =
            &SlackApiFilesUploadViaUrlRequest::new(ticket.upload_url, content, content_type(&filename).into());
        call("file upload", || async move {
            self.client
                .open_session(&self.token)
                .files_upload_via_url(bytes_req)
                .await
        })
        .await?;
        let done_req = &SlackApiFilesCompleteUploadExternalRequest::new(vec![
            SlackApiFilesComplete::new(ticket.file_id).with_title(filename),
        ])
        .with_channel_id(channel.into())
        .with_initial_comment(comment.into())
        .opt_thread_ts(thread_ts.map(|t| t.into()));
        call("files.completeUploadExternal", || async move {
            self.client
                .open_session(&self.token)
                .files_complete_upload_external(done_req)
                .await
        })
        .await?;
        Ok(())
    }

    /// Answers a slash command through its `response_url`, visible only to
    /// the person who typed it.
    pub async fn respond(&self, response_url: &str, text: &str) -> Result<(), WebError> {
        const METHOD: &str = "response_url";
        let fail = |reason: String| WebError {
            method: METHOD,
            reason,
            code: None,
        };
        let url = reqwest::Url::parse(response_url).map_err(|_| fail("the response_url is not a URL".into()))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(fail("the response_url is not http(s)".into()));
        }
        let body = serde_json::json!({ "response_type": "ephemeral", "replace_original": false, "text": text });
        let attempt = || async {
            // `without_url`: reqwest errors would otherwise quote the URL.
            let res = self
                .http
                .post(url.clone())
                .json(&body)
                .send()
                .await
                .map_err(|e| Refused::final_(e.without_url().to_string()))?;
            let status = res.status();
            if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                let wait = res
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()?.trim().parse().ok())
                    .map_or(DEFAULT_RETRY_AFTER, Duration::from_secs);
                return Err(Refused {
                    retry_after: Some(wait),
                    reason: "still rate limited after retries".into(),
                });
            }
            if !status.is_success() {
                return Err(Refused::final_(format!(
                    "HTTP {status} (response URLs expire after 30 minutes and 5 uses)"
                )));
            }
            Ok(())
        };
        let judge = |r: &Refused| r.retry_after.map_or(Verdict::Fail, |w| Verdict::Retry(Some(w)));
        RETRY
            .run(METHOD, None, judge, attempt)
            .await
            .map_err(|gave| fail(gave.into_error().reason))
    }
}

/// A `response_url` answer that did not land: 429 (with Slack's wait) or
/// final.
struct Refused {
    retry_after: Option<Duration>,
    reason: String,
}

impl Refused {
    fn final_(reason: String) -> Self {
        Refused {
            retry_after: None,
            reason,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

fn content_type(filename: &str) -> &'static str {
    if filename.ends_with(".gz") {
        "application/gzip"
    } else {
        "application/octet-stream"
    }
}

/// Runs one Web API call, retrying while Slack answers 429.
async fn call<T, F, Fut>(method: &'static str, f: F) -> Result<T, WebError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = ClientResult<T>>,
{
    let judge = |e: &SlackClientError| match e {
        SlackClientError::RateLimitError(e) => Verdict::Retry(Some(e.retry_after.unwrap_or(DEFAULT_RETRY_AFTER))),
        _ => Verdict::Fail,
    };
    RETRY
        .run(method, None, judge, f)
        .await
        .map_err(|gave| describe(method, &gave.into_error()))
}

/// A reason that names no secret and quotes no response body.
fn describe(method: &'static str, e: &SlackClientError) -> WebError {
    let (reason, code) = match e {
        SlackClientError::ApiError(api) => (
            format!("Slack answered `{}`{}", api.code, hint(&api.code)),
            Some(api.code.clone()),
        ),
        SlackClientError::HttpError(http) => (format!("HTTP {}", http.status_code), None),
        SlackClientError::RateLimitError(_) => ("still rate limited after retries".to_string(), None),
        SlackClientError::HttpProtocolError(_) => {
            ("could not reach the Slack API (network or TLS error)".to_string(), None)
        }
        SlackClientError::ProtocolError(_) => ("Slack's answer could not be read".to_string(), None),
        SlackClientError::EndOfStream(_) | SlackClientError::SocketModeProtocolError(_) => {
            ("the connection ended".to_string(), None)
        }
        SlackClientError::SystemError(_) => ("Slack client error".to_string(), None),
    };
    WebError { method, reason, code }
}

fn hint(code: &str) -> &'static str {
    match code {
        "invalid_auth" | "not_authed" | "token_revoked" | "token_expired" | "account_inactive" => {
            " — check the token in the env var named by channels.slack (botTokenEnv / appTokenEnv)"
        }
        "not_allowed_token_type" => " — Socket Mode needs the app-level token (xapp-…) with connections:write",
        "missing_scope" => " — add the scopes of deploy/slack-app-manifest.yaml to the app and reinstall it",
        "channel_not_found" | "not_in_channel" => " — invite the bot to the channel",
        _ => "",
    }
}
