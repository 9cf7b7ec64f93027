//! What tests put into the fake Bot API and script it to answer: users,
//! chats and messages as Telegram sends them in updates, and Telegram's
//! error answers. Re-exported from [`super`], so tests name them as
//! `telegram::text_message` and so on.

use super::{BOT_ID, BOT_USERNAME};
use serde_json::{Value, json};

/// The bot as a `from` field.
pub fn bot_user() -> Value {
    json!({ "id": BOT_ID, "is_bot": true, "first_name": "Mnemo", "username": BOT_USERNAME })
}

/// A person as a `from` field.
pub fn user(id: i64, first_name: &str) -> Value {
    json!({ "id": id, "is_bot": false, "first_name": first_name })
}

/// A chat object: private for positive ids, a forum supergroup otherwise.
pub fn chat(id: i64) -> Value {
    if id > 0 {
        json!({ "id": id, "type": "private", "first_name": "Someone" })
    } else {
        json!({ "id": id, "type": "supergroup", "title": "Team", "is_forum": true })
    }
}

/// A text message from `from` in chat `chat_id`.
pub fn text_message(chat_id: i64, from: Value, text: &str) -> Value {
    json!({ "chat": chat(chat_id), "from": from, "text": text })
}

/// A message in forum topic `thread` of group `chat_id`.
pub fn topic_message(chat_id: i64, thread: i64, from: Value, text: &str) -> Value {
    let mut message = text_message(chat_id, from, text);
    message["is_topic_message"] = json!(true);
    message["message_thread_id"] = json!(thread);
    message
}

/// A sticker without a caption.
pub fn sticker_message(chat_id: i64, from: Value) -> Value {
    json!({
        "chat": chat(chat_id), "from": from,
        "sticker": { "file_id": "s", "file_unique_id": "u", "type": "regular", "width": 512, "height": 512,
                     "is_animated": false, "is_video": false },
    })
}

/// Telegram's flood-control answer.
pub fn too_many_requests(retry_after: u64) -> String {
    json!({ "ok": false, "error_code": 429, "description": format!("Too Many Requests: retry after {retry_after}"),
            "parameters": { "retry_after": retry_after } })
    .to_string()
}

/// Telegram's answer when the user blocked the bot.
pub fn blocked_by_user() -> String {
    json!({ "ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user" }).to_string()
}

/// `getChatMember`'s result: a ChatMember object of the Bot API for
/// `user` with `status` (`creator`: `ChatMemberOwner`; `administrator`:
/// `ChatMemberAdministrator` with the rights the API requires; `None`:
/// `ChatMemberMember`).
pub(super) fn chat_member(user: i64, status: Option<&str>) -> Value {
    let person = json!({ "id": user, "is_bot": false, "first_name": "Someone" });
    match status {
        Some("creator") => json!({ "status": "creator", "user": person, "is_anonymous": false }),
        Some(_) => json!({
            "status": "administrator", "user": person, "can_be_edited": false, "is_anonymous": false,
            "can_manage_chat": true, "can_delete_messages": true, "can_manage_video_chats": true,
            "can_restrict_members": true, "can_promote_members": false, "can_change_info": true,
            "can_invite_users": true, "can_post_stories": false, "can_edit_stories": false,
            "can_delete_stories": false, "can_pin_messages": true, "can_manage_topics": true,
        }),
        None => json!({ "status": "member", "user": person }),
    }
}
