//! Keeps platform tokens and API keys out of every log line and every error
//! shown to a person. [`Scrubber`] replaces the values of the configured
//! secrets, everything `crate::model::redact` catches (`?key=…`,
//! `Authorization: Bearer …`, URL user-info), and anything shaped like a
//! known token even when its value is unknown here: Telegram bot tokens
//! (also inside `…/bot<token>/…` URLs, as HTTP client errors print them),
//! Slack `xox?-`/`xapp-` tokens, `sk-…` API keys, Discord bot tokens.
//! [`Scrubbed`] wraps a log writer so every formatted line passes it —
//! including lines from dependencies the broker does not control.
//!
//! Pure text work: no I/O of its own, never logs its input. It over-redacts
//! rather than under-redacts.

use crate::config::AppConfig;
use crate::model::config::ModelConfig;
use crate::model::redact::{REDACTED, redact};
use std::io;
use std::sync::Arc;
use tracing_subscriber::fmt::MakeWriter;

/// Shorter configured "secrets" are not replaced: they would blank out
/// ordinary words everywhere and are no real credential anyway.
const MIN_SECRET_LEN: usize = 6;

/// Replaces secrets in text. Cheap to clone.
#[derive(Clone, Default)]
pub struct Scrubber {
    known: Arc<Vec<String>>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrubber({} known secrets)", self.known.len())
    }
}

impl Scrubber {
    /// A scrubber for these secret values (besides the token shapes).
    pub fn new(known: impl IntoIterator<Item = String>) -> Self {
        let mut known: Vec<String> = known.into_iter().filter(|s| s.len() >= MIN_SECRET_LEN).collect();
        // Longest first, so a secret containing another is replaced whole.
        known.sort_by_key(|s| std::cmp::Reverse(s.len()));
        known.dedup();
        Scrubber { known: Arc::new(known) }
    }

    pub fn scrub(&self, text: &str) -> String {
        let known: Vec<&str> = self.known.iter().map(String::as_str).collect();
        scrub_token_shapes(&redact(text, &known))
    }
}

/// Every environment variable the config names for a secret: the model's
/// (and fallbacks') and summarizer's API keys, and each enabled platform's
/// tokens.
pub fn secret_env_names(config: &AppConfig, model: Option<&ModelConfig>) -> Vec<String> {
    let mut names = Vec::new();
    let mut next = model;
    while let Some(m) = next {
        names.extend(m.api_key_env().map(str::to_string));
        next = m.fallback.as_deref();
    }
    if let Some(name) = config.summarizer.as_ref().and_then(|s| s.api_key_env.clone()) {
        names.push(name);
    }
    let c = &config.channels;
    if c.telegram.enabled {
        names.push(c.telegram.token_env.clone());
    }
    if c.slack.enabled {
        names.extend([
            c.slack.bot_token_env.clone(),
            c.slack.app_token_env.clone(),
            c.slack.signing_secret_env.clone(),
        ]);
    }
    if c.discord.enabled {
        names.push(c.discord.token_env.clone());
    }
    // The database URL may carry a password.
    if config.store.kind == crate::config::StoreKind::Postgres {
        names.push(config.store.url_env.clone());
    }
    names.retain(|n| !n.is_empty());
    names.dedup();
    names
}

/// A scrubber for the secrets `config` names, read through `env`.
pub fn configured(config: &AppConfig, model: Option<&ModelConfig>, env: &dyn Fn(&str) -> Option<String>) -> Scrubber {
    Scrubber::new(secret_env_names(config, model).iter().filter_map(|name| env(name)))
}

/// A `MakeWriter` whose writers scrub each buffer before passing it on.
/// tracing's fmt layer formats a whole event and writes it with one
/// `write_all`, so every log line is scrubbed whole.
pub struct Scrubbed<M> {
    inner: M,
    scrubber: Scrubber,
}

impl<M> Scrubbed<M> {
    pub fn new(inner: M, scrubber: Scrubber) -> Self {
        Scrubbed { inner, scrubber }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Scrubbed<M> {
    type Writer = ScrubbedWriter<'a, M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedWriter {
            inner: self.inner.make_writer(),
            scrubber: &self.scrubber,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        ScrubbedWriter {
            inner: self.inner.make_writer_for(meta),
            scrubber: &self.scrubber,
        }
    }
}

pub struct ScrubbedWriter<'a, W> {
    inner: W,
    scrubber: &'a Scrubber,
}

impl<W: io::Write> io::Write for ScrubbedWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let clean = self.scrubber.scrub(&String::from_utf8_lossy(buf));
        self.inner.write_all(clean.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Asked of every byte of every log line, like [`is_word_byte`]: always
/// inlined, whatever the profile's size setting.
#[inline(always)]
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Bytes of a "word" that may hold a token (ASCII only, so every range
/// found is on char boundaries).
#[inline(always)]
fn is_word_byte(b: u8) -> bool {
    is_token_byte(b) || b == b'.' || b == b':'
}

/// Token prefixes, each with the fewest token bytes that must follow it.
const TOKEN_PREFIXES: &[(&[u8], usize)] = &[
    (b"xoxb-", 8),
    (b"xoxp-", 8),
    (b"xoxa-", 8),
    (b"xoxr-", 8),
    (b"xoxs-", 8),
    (b"xoxe-", 8),
    (b"xapp-", 8),
    (b"sk-", 20),
];

/// The fewest bytes any shape [`token_ranges`] finds can have: a Slack
/// prefix and 8 bytes (a Telegram token needs 37, a Discord one 50).
const SHORTEST_TOKEN: usize = 13;

/// `text` with every token-shaped run replaced by `[REDACTED]`.
pub fn scrub_token_shapes(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_word_byte(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word_byte(bytes[i]) {
            i += 1;
        }
        // Most words of a log line are too short to hold a token.
        if i - start >= SHORTEST_TOKEN {
            token_ranges(bytes, start, i, &mut ranges);
        }
    }
    if ranges.is_empty() {
        return text.to_string();
    }
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in ranges {
        if end <= copied {
            continue;
        }
        out.push_str(&text[copied..start.max(copied)]);
        out.push_str(REDACTED);
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// The end of the run of token bytes starting at `from`, within `end`.
fn token_run(bytes: &[u8], from: usize, end: usize) -> usize {
    let mut j = from;
    while j < end && is_token_byte(bytes[j]) {
        j += 1;
    }
    j
}

/// Token-shaped ranges inside the word `bytes[start..end]`.
fn token_ranges(bytes: &[u8], start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    for at in start..end {
        let boundary = at == start || !bytes[at - 1].is_ascii_alphanumeric();
        if boundary {
            for (prefix, min_rest) in TOKEN_PREFIXES {
                // The first byte alone rules out most words.
                if bytes[at] == prefix[0] && bytes[at..end].starts_with(prefix) {
                    let stop = token_run(bytes, at + prefix.len(), end);
                    if stop - (at + prefix.len()) >= *min_rest {
                        out.push((at, stop));
                    }
                }
            }
        }
        // Telegram: `<bot id digits>:<35 token bytes>`.
        if bytes[at] == b':' {
            let mut digits = at;
            while digits > start && bytes[digits - 1].is_ascii_digit() {
                digits -= 1;
            }
            let stop = token_run(bytes, at + 1, end);
            if at - digits >= 6 && stop - (at + 1) >= 30 {
                out.push((digits, stop));
            }
        }
    }
    discord_ranges(bytes, start, end, out);
}

/// Discord bot tokens: three base64url parts joined by dots, the middle one
/// short (`<24+>.<6>.<27+>`).
fn discord_ranges(bytes: &[u8], start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    /// The shortest word that can hold one: 18 + `.` + 5 + `.` + 25 bytes.
    const SHORTEST: usize = 50;
    if end - start < SHORTEST {
        return;
    }
    // The word's runs of token bytes, three at a time.
    let mut last: [Option<(usize, usize)>; 2] = [None, None];
    let mut at = start;
    while at < end {
        let stop = token_run(bytes, at, end);
        if let [Some((a0, a1)), Some((b0, b1))] = last {
            let (c0, c1) = (at, stop);
            let joined_by_dots = bytes.get(a1) == Some(&b'.') && bytes.get(b1) == Some(&b'.');
            if joined_by_dots && a1 - a0 >= 18 && (5..=7).contains(&(b1 - b0)) && c1 - c0 >= 25 {
                out.push((a0, c1));
            }
        }
        last = [last[1], Some((at, stop))];
        at = stop + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::sync::Mutex;

    const TELEGRAM: &str = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1";

    const SLACK_BOT: &str = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy";
    const SLACK_APP: &str = "xapp-1-A0123456789-1234567890123-abcdef0123456789";
    const OPENAI: &str = "sk-proj-Abc123Def456Ghi789Jkl012Mno345";
    const DISCORD: &str = "MTA4NjQ5MzE0NTcyMzQ1Njc4OQ.GhR2xQ.abcdefghijklmnopqrstuvwxyz0123456789AB";

    #[test]
    fn no_token_shape_is_shorter_than_the_words_looked_into() {
        for (prefix, min_rest) in TOKEN_PREFIXES {
            assert!(prefix.len() + min_rest >= SHORTEST_TOKEN);
        }
        let shortest = "xoxb-12345678";
        assert_eq!(shortest.len(), SHORTEST_TOKEN);
        assert_eq!(scrub_token_shapes(&format!("at {shortest}.")), "at [REDACTED].");
        assert_eq!(scrub_token_shapes("at xoxb-1234567."), "at xoxb-1234567.");
    }

    #[test]
    fn token_shapes_are_redacted_wherever_they_appear() {
        let lines = [
            format!("error sending request for url (https://api.telegram.org/bot{TELEGRAM}/getUpdates)"),
            format!("slack said invalid_auth for {SLACK_BOT}"),
            format!("socket mode with app token {SLACK_APP} failed"),
            format!("401 from openai: Incorrect API key provided: {OPENAI}."),
            format!("gateway identify failed: {DISCORD}"),
        ];
        for line in &lines {
            let clean = scrub_token_shapes(line);
            for secret in [TELEGRAM, SLACK_BOT, SLACK_APP, OPENAI, DISCORD] {
                assert!(!clean.contains(secret), "{clean}");
            }
            assert!(clean.contains(REDACTED), "{clean}");
        }
        assert!(
            scrub_token_shapes(&lines[0])
                .starts_with("error sending request for url (https://api.telegram.org/bot[REDACTED]/getUpdates)")
        );
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "task-force meeting at 12:30:00 in room sk-1",
            "user U01ABCDEF sent msg 1711164512.123456 in C0123",
            "2026-03-23T03:28:32Z channel=telegram user=12345678 reason=rate limit",
            "path /s/channels/slack/sessions/access.json.corrupt-20260323T032832Z",
        ] {
            assert_eq!(scrub_token_shapes(text), text);
        }
    }

    #[test]
    fn configured_values_and_named_parameters_are_redacted_too() {
        let s = Scrubber::new(["my-own-proxy-password".to_string(), "abc".to_string()]);
        let clean = s.scrub("proxy my-own-proxy-password; url https://x/v1?key=AIzaSyA1b2c3; abc stays");
        assert!(
            !clean.contains("my-own-proxy-password") && !clean.contains("AIzaSyA1b2c3"),
            "{clean}"
        );
        assert!(clean.contains("abc stays"), "too-short values are not secrets: {clean}");
        assert!(!format!("{s:?}").contains("password"));
    }

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_written_through_scrubbed_carry_no_token() {
        let sink = Sink::default();
        let made = sink.clone();
        let writer = Scrubbed::new(move || made.clone(), Scrubber::new(["hunter2-hunter2".to_string()]));
        let subscriber = tracing_subscriber::fmt().json().with_writer(writer).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(url = %format!("https://api.telegram.org/bot{TELEGRAM}/getMe"), "channel stopped");
            tracing::warn!("retrying with hunter2-hunter2 and Authorization: Bearer {OPENAI}");
        });
        let logged = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(logged.lines().count(), 2, "{logged}");
        for secret in [TELEGRAM, OPENAI, "hunter2-hunter2"] {
            assert!(!logged.contains(secret), "{logged}");
        }
        let mut w = ScrubbedWriter {
            inner: Vec::new(),
            scrubber: &Scrubber::default(),
        };
        w.write_all(format!("t {SLACK_BOT}").as_bytes()).unwrap();
        assert_eq!(w.inner, b"t [REDACTED]");
    }

    #[test]
    fn the_configured_secret_names_cover_model_and_platform_tokens() {
        let config: AppConfig = serde_json::from_value(serde_json::json!({
            "channels": {
                "telegram": { "enabled": true, "tokenEnv": "TG" },
                "slack": { "enabled": true, "botTokenEnv": "SB", "appTokenEnv": "SA", "signingSecretEnv": "SS" },
                "discord": { "enabled": false, "tokenEnv": "DC" }
            }
        }))
        .unwrap();
        let model: ModelConfig = serde_json::from_value(serde_json::json!({
            "provider": "openai", "baseUrl": "http://x/v1", "apiKeyEnv": "OK", "model": "m"
        }))
        .unwrap();
        assert_eq!(secret_env_names(&config, Some(&model)), ["OK", "TG", "SB", "SA", "SS"]);
        let env = |name: &str| Some(format!("value-of-{name}-secret"));
        let s = configured(&config, Some(&model), &env);
        assert_eq!(s.scrub("a value-of-TG-secret b"), "a [REDACTED] b");
    }
}
