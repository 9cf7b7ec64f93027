//! Who may manage a server, for `/session clear group`: asked of Discord's
//! REST API each time (rights change), reading only the fields used — the
//! channel's server (`GET /channels/{id}`: `guild_id`), the server's owner
//! and roles (`GET /guilds/{id}`: `owner_id`, `roles[].permissions`), and
//! the member's roles (`GET /guilds/{id}/members/{user}`). The owner, and
//! a member whose roles (with `@everyone`, whose id is the server's) grant
//! `ADMINISTRATOR` or `MANAGE_GUILD`, are the server's admins.

use super::Shared;
use serde_json::Value;

/// `ADMINISTRATOR` and `MANAGE_GUILD` (Discord's permission bits 3 and 5).
const MANAGERS: u64 = (1 << 3) | (1 << 5);

/// Whether `user` manages the server `channel` is in; `Err` with a
/// reason (token redacted) when Discord could not say.
pub(crate) async fn is_admin(shared: &Shared, channel: &str, user: &str) -> Result<bool, String> {
    let channel_info = get(shared, &format!("channels/{}", id(channel)?)).await?;
    let Some(guild) = channel_info["guild_id"].as_str() else {
        return Ok(false);
    };
    let guild_info = get(shared, &format!("guilds/{}", id(guild)?)).await?;
    if guild_info["owner_id"].as_str() == Some(user) {
        return Ok(true);
    }
    let member = get(shared, &format!("guilds/{guild}/members/{}", id(user)?)).await?;
    let held: Vec<&str> = member["roles"]
        .as_array()
        .map(|roles| roles.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let granted = guild_info["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|role| role["id"].as_str().is_some_and(|r| r == guild || held.contains(&r)))
        .filter_map(|role| role["permissions"].as_str()?.parse::<u64>().ok())
        .fold(0, |all, bits| all | bits);
    Ok(granted & MANAGERS != 0)
}

/// `raw` if it is a Discord id (digits only), so nothing else reaches a URL.
fn id(raw: &str) -> Result<&str, String> {
    match !raw.is_empty() && raw.len() <= 20 && raw.bytes().all(|b| b.is_ascii_digit()) {
        true => Ok(raw),
        false => Err("not a Discord id".into()),
    }
}

async fn get(shared: &Shared, path: &str) -> Result<Value, String> {
    let base = shared.settings.api_url.as_deref().unwrap_or("https://discord.com");
    let url = format!("{}/api/v10/{path}", base.trim_end_matches('/'));
    let token = shared.settings.token.trim().trim_start_matches("Bot ");
    let response = shared
        .files
        .get(&url)
        .header(reqwest::header::AUTHORIZATION, format!("Bot {token}"))
        .send()
        .await
        .map_err(|e| shared.redact(&format!("GET {path}: {e}"), None))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("GET {path}: Discord answered {status}"));
    }
    response
        .json()
        .await
        .map_err(|e| shared.redact(&format!("GET {path}: {e}"), None))
}
