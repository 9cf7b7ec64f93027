//! The parts of a chat request's messages the fake reads: a message's
//! text, and its images checked as the real APIs check them.

use serde_json::Value;

/// A message's text: its content string, or the `text` parts of a content
/// array that carries no tool results (a message with images).
pub fn content_text(content: &Value) -> Option<String> {
    if let Some(text) = content.as_str() {
        return Some(text.to_string());
    }
    let parts = content.as_array()?;
    if parts.iter().any(|p| p["type"] == "tool_result") {
        return None;
    }
    let texts: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    Some(texts.join("\n"))
}

/// The images of a request's messages as the model would see them:
/// (media type, bytes) of each OpenAI `image_url` data URL or Anthropic
/// base64 `image` block, in order. `Err` when one is malformed or its
/// bytes are not the image type it claims (both APIs refuse those with 400).
pub fn request_images(request: &Value) -> Result<Vec<(String, Vec<u8>)>, String> {
    use base64::Engine;
    let decode = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("invalid base64 image data: {e}"))
    };
    let mut images = Vec::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        for part in message["content"].as_array().into_iter().flatten() {
            let (media_type, data) = match part["type"].as_str() {
                Some("image_url") => {
                    let url = part["image_url"]["url"].as_str().unwrap_or_default();
                    let rest = url.strip_prefix("data:").ok_or("image_url is not a data URL")?;
                    let (media_type, data) = rest.split_once(";base64,").ok_or("data URL is not base64")?;
                    (media_type.to_string(), decode(data)?)
                }
                Some("image") => {
                    let source = &part["source"];
                    if source["type"] != "base64" {
                        return Err("image source type must be base64".into());
                    }
                    let media_type = source["media_type"].as_str().unwrap_or_default().to_string();
                    (media_type, decode(source["data"].as_str().unwrap_or_default())?)
                }
                _ => continue,
            };
            let matches = match media_type.as_str() {
                "image/jpeg" => data.starts_with(&[0xFF, 0xD8, 0xFF]),
                "image/png" => data.starts_with(b"\x89PNG\r\n\x1a\n"),
                "image/gif" => data.starts_with(b"GIF8"),
                "image/webp" => data.len() > 12 && &data[8..12] == b"WEBP",
                other => return Err(format!("unsupported image media type {other}")),
            };
            if !matches {
                return Err(format!("Image does not match the provided media type {media_type}"));
            }
            images.push((media_type, data));
        }
    }
    Ok(images)
}
