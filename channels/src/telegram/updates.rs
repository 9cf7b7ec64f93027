//! `getUpdates` with each update decoded on its own. teloxide decodes a
//! whole answer at once, so one update it cannot read (a lone UTF-16
//! surrogate in a name, a field of a shape it does not know) would fail the
//! whole batch, the offset would never advance, and nobody would be answered
//! again. Here the batch is split first (strings are not decoded while
//! splitting), then each update is decoded: one that fails is logged by its
//! id only (its content may be message text) and skipped, and still moves
//! the offset. The webhook uses [`decode`] for the same rule.

use super::api::{Api, Failure};
use serde::Deserialize;
use serde_json::value::RawValue;
use teloxide::types::{AllowedUpdate, ResponseParameters, Update};
use teloxide::{ApiError, RequestError};

/// One answer of `getUpdates`: the updates that decoded, and the offset
/// that confirms every update in it, decoded or not.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub updates: Vec<Update>,
    pub next_offset: Option<i32>,
}

/// Telegram's answer envelope, with `result` kept raw.
#[derive(Deserialize)]
struct Envelope<'a> {
    ok: bool,
    #[serde(borrow, default)]
    result: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    description: Option<ApiError>,
    #[serde(default)]
    parameters: Option<ResponseParameters>,
}

/// Only the id of an update, read without decoding any string.
#[derive(Deserialize)]
struct IdOnly {
    update_id: i32,
}

/// Decodes one update. `Err` holds its id when at least that was readable;
/// the failure is logged here, by id and error class only.
pub(crate) fn decode(raw: &str) -> Result<Update, Option<i32>> {
    serde_json::from_str::<Update>(raw).map_err(|e| {
        let id = serde_json::from_str::<IdOnly>(raw).ok().map(|u| u.update_id);
        tracing::warn!(
            update = id,
            error = ?e.classify(),
            line = e.line(),
            column = e.column(),
            "telegram: an update could not be decoded; skipped"
        );
        id
    })
}

/// One `getUpdates` call (long poll up to `timeout` seconds).
pub(crate) async fn fetch(api: &Api, offset: Option<i32>, timeout: u32) -> Result<Batch, Failure> {
    let bot = api.bot();
    let mut url = bot.api_url();
    url.path_segments_mut()
        .map_err(|()| Failure::Rejected("apiUrl cannot take a path".into()))?
        .push(&format!("bot{}", bot.token()))
        .push("getUpdates");
    let mut params = serde_json::json!({ "timeout": timeout, "allowed_updates": [AllowedUpdate::Message] });
    if let Some(offset) = offset {
        params["offset"] = offset.into();
    }
    let response = bot
        .client()
        .post(url)
        .json(&params)
        .send()
        .await
        .map_err(|e| api.failure(RequestError::Network(std::sync::Arc::new(e))))?;
    let body = response
        .text()
        .await
        .map_err(|e| api.failure(RequestError::Network(std::sync::Arc::new(e))))?;
    parse(api, &body)
}

fn parse(api: &Api, body: &str) -> Result<Batch, Failure> {
    let envelope: Envelope<'_> = serde_json::from_str(body).map_err(|e| {
        // Not the body: it may hold message text.
        Failure::Network(format!(
            "Telegram's answer was not the expected JSON ({})",
            e.classify_name()
        ))
    })?;
    if !envelope.ok {
        let error = match envelope.parameters {
            Some(ResponseParameters::RetryAfter(wait)) => RequestError::RetryAfter(wait),
            Some(ResponseParameters::MigrateToChatId(chat)) => RequestError::MigrateToChatId(chat),
            None => RequestError::Api(envelope.description.unwrap_or(ApiError::Unknown(String::new()))),
        };
        return Err(api.failure(error));
    }
    let mut batch = Batch::default();
    for raw in envelope.result.unwrap_or_default() {
        let id = match decode(raw.get()) {
            Ok(update) => {
                let id = update.id.as_offset() - 1;
                batch.updates.push(update);
                Some(id)
            }
            Err(id) => id,
        };
        if let Some(id) = id {
            batch.next_offset = Some(batch.next_offset.map_or(id + 1, |o: i32| o.max(id + 1)));
        }
    }
    Ok(batch)
}

/// Names the kind of a JSON error without quoting anything from the input.
trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teloxide::Bot;

    fn api() -> Api {
        Api::new(Bot::new("1:T"))
    }

    fn update(id: i32, name: &str) -> String {
        format!(
            r#"{{"update_id":{id},"message":{{"message_id":1,"date":0,"chat":{{"id":42,"type":"private","first_name":"A"}},"from":{{"id":42,"is_bot":false,"first_name":"{name}"}},"text":"hi"}}}}"#
        )
    }

    #[test]
    fn an_undecodable_update_is_skipped_and_still_moves_the_offset() {
        let body = format!(
            r#"{{"ok":true,"result":[{},{}]}}"#,
            update(7, r"\ud83d"),
            update(8, "Bo")
        );
        let batch = parse(&api(), &body).unwrap();
        assert_eq!(batch.updates.len(), 1);
        assert_eq!(batch.updates[0].id.0, 8);
        assert_eq!(batch.next_offset, Some(9));
        let only_bad = format!(r#"{{"ok":true,"result":[{}]}}"#, update(7, r"\ud83d"));
        assert_eq!(parse(&api(), &only_bad).unwrap().next_offset, Some(8));
    }

    #[test]
    fn refusals_keep_their_meaning() {
        let wait = r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}"#;
        assert_eq!(
            parse(&api(), wait).unwrap_err(),
            Failure::RetryAfter(std::time::Duration::from_secs(3))
        );
        let token = r#"{"ok":false,"error_code":401,"description":"Unauthorized"}"#;
        assert_eq!(parse(&api(), token).unwrap_err(), Failure::Unauthorized);
    }
}
