//! A photo on its way to a vision model: its type read from its own bytes
//! (the magic numbers of the formats both APIs take: JPEG, PNG, GIF and
//! WebP), never from what the platform declared, and its bytes as base64
//! once. Debug shows the type and size only.

use base64::Engine;
use std::sync::Arc;

/// An image part of one request.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    mime: &'static str,
    base64: Arc<str>,
    bytes: usize,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({}, {} bytes)", self.mime, self.bytes)
    }
}

impl Image {
    /// The image in `bytes`, or `None` when they are not a JPEG, PNG, GIF
    /// or WebP picture.
    pub fn from_bytes(bytes: &[u8]) -> Option<Image> {
        let mime = sniff(bytes)?;
        Some(Image {
            mime,
            base64: base64::engine::general_purpose::STANDARD.encode(bytes).into(),
            bytes: bytes.len(),
        })
    }

    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
    pub fn mime(&self) -> &'static str {
        self.mime
    }

    pub fn base64(&self) -> &str {
        &self.base64
    }

    /// `data:<mime>;base64,<bytes>` (OpenAI's `image_url`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.base64)
    }
}

/// The image type `bytes` begin with, if any.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
        [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => Some("image/png"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_known_by_their_bytes_and_anything_else_is_not_one() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0]), Some("image/jpeg"));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), Some("image/png"));
        assert_eq!(sniff(b"GIF89a..."), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"%PDF-1.7"), None);
        assert_eq!(sniff(b"<html>"), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"RIFF\x10\0\0\0WAVEfmt "), None);
    }

    #[test]
    fn an_image_carries_base64_and_a_data_url_and_debug_shows_no_bytes() {
        let image = Image::from_bytes(b"\x89PNG\r\n\x1a\nabc").unwrap();
        assert_eq!(image.mime(), "image/png");
        assert_eq!(image.base64(), "iVBORw0KGgphYmM=");
        assert_eq!(image.data_url(), "data:image/png;base64,iVBORw0KGgphYmM=");
        assert_eq!(format!("{image:?}"), "Image(image/png, 11 bytes)");
        assert!(Image::from_bytes(b"not an image").is_none());
    }
}
