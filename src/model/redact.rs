//! Keeps secrets out of logs and error messages (DESIGN §7). Owns
//! [`redact`], which the whole broker may reuse on any text about to be
//! logged or shown, and [`Secret`], the only way a key is held in memory.
//!
//! It must stay a pure text function: no I/O, no logging of its own input.
//! It over-redacts rather than under-redacts — a hidden harmless word costs
//! nothing, a leaked key costs a rotation.

use std::borrow::Cow;
use std::fmt;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Names whose value is a credential wherever they appear as `name=value`
/// (URL query, form) or `name: value` (headers, JSON). Longest first, so
/// `x-api-key` is matched before `key`; in lower case (a text's bytes are
/// lowered to pick the names to compare).
const SENSITIVE_NAMES: &[&str] = &[
    "proxy-authorization",
    "authorization",
    "client_secret",
    "access_token",
    "x-api-key",
    "password",
    "api-key",
    "api_key",
    "apikey",
    "secret",
    "token",
    "auth",
    "key",
];

/// Credential schemes that precede the actual secret in a header value.
const SCHEMES: &[&str] = &["bearer", "basic", "token"];

/// `text` with every occurrence of each of `secrets` replaced, and with the
/// values of credential-looking parameters and headers (`?key=…`,
/// `api_key=…`, `token=…`, `Authorization: Bearer …`, `x-api-key: …`) and
/// URL user-info (`https://user:pass@host`) replaced too. Empty secrets are
/// ignored.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    // Every log line passes here (twice: stderr and the file), and almost
    // none holds a secret: a text is copied only where something changes.
    let mut out = Cow::Borrowed(text);
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(secret) {
            out = Cow::Owned(out.replace(secret, REDACTED));
        }
    }
    let named = redact_named_values(&out);
    redact_userinfo(&named)
}

/// An API key read from the environment. It has no `Display`, and its
/// `Debug` prints only `[REDACTED]`, so no `{:?}` of a struct holding one can
/// leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The key itself, for the one place that must send it (a header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

/// Bytes that may be part of a parameter name: a name only counts when it
/// is not the tail of a longer word (`monkey=` is not `key=`). Asked of
/// every byte of every log line: always inlined, whatever the profile's
/// size setting.
#[inline(always)]
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Bytes that end a value. All ASCII, so slicing at them never splits a
/// UTF-8 character.
#[inline(always)]
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"'&,;}])>#".contains(&b)
}

fn redact_named_values(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || !is_name_byte(bytes[i - 1]);
        let value = if at_boundary {
            // Only the names this byte can begin are compared.
            let first = bytes[i].to_ascii_lowercase();
            SENSITIVE_NAMES
                .iter()
                .filter(|name| name.as_bytes()[0] == first)
                .find_map(|name| value_after_name(bytes, i, name))
        } else {
            None
        };
        match value {
            Some((start, end)) if &text[start..end] != REDACTED => {
                out.reserve(text.len() - copied);
                out.push_str(&text[copied..start]);
                out.push_str(REDACTED);
                copied = end;
                i = end;
            }
            Some((_, end)) => i = end,
            None => i += 1,
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// If `name` starts at `at` and is followed by `=` or `:` (optionally after a
/// closing quote and spaces), the byte range of its value — skipping an
/// opening quote and a credential scheme such as `Bearer `.
fn value_after_name(bytes: &[u8], at: usize, name: &str) -> Option<(usize, usize)> {
    let end_of_name = at + name.len();
    let candidate = bytes.get(at..end_of_name)?;
    if !candidate.eq_ignore_ascii_case(name.as_bytes()) {
        return None;
    }
    if bytes.get(end_of_name).is_some_and(|&b| is_name_byte(b)) {
        return None;
    }
    let mut i = end_of_name;
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    i = skip_spaces(bytes, i);
    if !matches!(bytes.get(i), Some(b'=' | b':')) {
        return None;
    }
    i = skip_spaces(bytes, i + 1);
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    if bytes[i..].starts_with(REDACTED.as_bytes()) {
        return Some((i, i + REDACTED.len()));
    }
    let mut start = i;
    let mut end = scan_value(bytes, start);
    let word = &bytes[start..end];
    let after_word = skip_spaces(bytes, end);
    if SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s.as_bytes())) && after_word > end {
        if bytes[after_word..].starts_with(REDACTED.as_bytes()) {
            return Some((after_word, after_word + REDACTED.len()));
        }
        start = after_word;
        end = scan_value(bytes, start);
    }
    (end > start).then_some((start, end))
}

fn skip_spaces(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    i
}

fn scan_value(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && !ends_value(bytes[i]) {
        i += 1;
    }
    i
}

/// `scheme://user:pass@host` → `scheme://[REDACTED]@host`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let authority_start = pos + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        let authority_len = after
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"')
            .unwrap_or(after.len());
        let authority = &after[..authority_len];
        match authority.rfind('@') {
            Some(at) if &authority[..at] != REDACTED => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[authority_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_names_are_written_in_lower_case() {
        for name in SENSITIVE_NAMES {
            assert_eq!(*name, name.to_ascii_lowercase());
        }
        let shouted = redact("API_KEY=abc123 Token: xyz", &[]);
        assert_eq!(shouted, "API_KEY=[REDACTED] Token: [REDACTED]");
    }

    #[test]
    fn known_secret_values_are_replaced_everywhere() {
        assert_eq!(
            redact("key sk-123 and again sk-123", &["sk-123", ""]),
            "key [REDACTED] and again [REDACTED]"
        );
    }

    #[test]
    fn credential_query_parameters_are_redacted_and_others_kept() {
        let url = "https://host/v1?model=m&key=abc123&api_key=def&token=ghi#frag";
        assert_eq!(
            redact(url, &[]),
            "https://host/v1?model=m&key=[REDACTED]&api_key=[REDACTED]&token=[REDACTED]#frag"
        );
    }

    #[test]
    fn credential_headers_are_redacted_including_after_the_scheme() {
        assert_eq!(
            redact("Authorization: Bearer sk-live-1\nx-api-key: abc", &[]),
            "Authorization: Bearer [REDACTED]\nx-api-key: [REDACTED]"
        );
        assert_eq!(
            redact(r#"{"api_key": "abc", "model": "m"}"#, &[]),
            r#"{"api_key": "[REDACTED]", "model": "m"}"#
        );
    }

    #[test]
    fn words_that_merely_end_in_a_sensitive_name_are_left_alone() {
        let text = "monkey=banana max_tokens: 5 keyboard=qwerty";
        assert_eq!(redact(text, &[]), text);
    }

    #[test]
    fn url_user_info_is_redacted() {
        assert_eq!(
            redact("see https://bob:hunter2@example.com/x and http://host/", &[]),
            "see https://[REDACTED]@example.com/x and http://host/"
        );
    }

    #[test]
    fn redaction_is_idempotent() {
        let once = redact("https://a:b@h/?key=v Authorization: Bearer t", &[]);
        assert_eq!(redact(&once, &[]), once);
    }

    #[test]
    fn non_ascii_text_survives_redaction() {
        assert_eq!(redact("ключ key=секрет ok", &[]), "ключ key=[REDACTED] ok");
    }

    #[test]
    fn a_secret_never_shows_in_debug() {
        let shown = format!("{:?}", Secret::new("sk-live-1"));
        assert!(!shown.contains("sk-live-1"), "{shown}");
    }
}
