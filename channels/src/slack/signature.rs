//! Slack request signing (Events API and slash commands over HTTP): the
//! `X-Slack-Signature` header is `v0=` + hex HMAC-SHA256 of
//! `v0:{X-Slack-Request-Timestamp}:{raw body}` under the app's signing
//! secret. A request whose signature does not match, or whose timestamp is
//! more than five minutes from now (a replay), is refused before anything in
//! it is read. Never logs the secret or the body.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a request's timestamp may be from our clock (Slack's own rule).
pub const MAX_SKEW_SECS: i64 = 5 * 60;

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("missing X-Slack-Signature or X-Slack-Request-Timestamp header")]
    MissingHeaders,
    #[error("request timestamp is not a number")]
    BadTimestamp,
    #[error("request timestamp is more than 5 minutes from now (replayed or clock skew)")]
    Stale,
    #[error("signature does not match the signing secret")]
    BadSignature,
}

/// The `X-Slack-Signature` value for `body` sent at `timestamp` (what Slack
/// computes; public so tests and tools can sign requests the same way).
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
    )
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// Checks one request against `secret` at `now` (unix seconds).
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), Refused> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(Refused::MissingHeaders);
    };
    let ts: i64 = timestamp.trim().parse().map_err(|_| Refused::BadTimestamp)?;
    if (now - ts).abs() > MAX_SKEW_SECS {
        return Err(Refused::Stale);
    }
    let given = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or(Refused::BadSignature)?;
    // `verify_slice` compares in constant time.
    mac(secret, timestamp, body)
        .verify_slice(&given)
        .map_err(|_| Refused::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const NOW: i64 = 1_531_420_618;

    #[test]
    fn matches_slacks_documented_example() {
        // The worked example in Slack's "Verifying requests" guide.
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign(SECRET, "1531420618", body), expected);
        assert_eq!(verify(SECRET, Some("1531420618"), Some(expected), body, NOW), Ok(()));
    }

    #[test]
    fn a_changed_body_or_wrong_secret_is_refused() {
        let sig = sign(SECRET, "1531420618", b"{\"a\":1}");
        assert_eq!(
            verify(SECRET, Some("1531420618"), Some(&sig), b"{\"a\":2}", NOW),
            Err(Refused::BadSignature)
        );
        assert_eq!(
            verify("other", Some("1531420618"), Some(&sig), b"{\"a\":1}", NOW),
            Err(Refused::BadSignature)
        );
        assert_eq!(
            verify(SECRET, Some("1531420618"), Some("v0=zz"), b"", NOW),
            Err(Refused::BadSignature)
        );
    }

    #[test]
    fn timestamps_more_than_five_minutes_away_are_refused_even_when_signed() {
        let old = (NOW - MAX_SKEW_SECS - 1).to_string();
        let sig = sign(SECRET, &old, b"{}");
        assert_eq!(verify(SECRET, Some(&old), Some(&sig), b"{}", NOW), Err(Refused::Stale));
        let edge = (NOW - MAX_SKEW_SECS).to_string();
        let sig = sign(SECRET, &edge, b"{}");
        assert_eq!(verify(SECRET, Some(&edge), Some(&sig), b"{}", NOW), Ok(()));
        let future = (NOW + MAX_SKEW_SECS + 1).to_string();
        let sig = sign(SECRET, &future, b"{}");
        assert_eq!(
            verify(SECRET, Some(&future), Some(&sig), b"{}", NOW),
            Err(Refused::Stale)
        );
    }

    #[test]
    fn missing_headers_are_refused() {
        assert_eq!(
            verify(SECRET, None, Some("v0=00"), b"", NOW),
            Err(Refused::MissingHeaders)
        );
        assert_eq!(verify(SECRET, Some("1"), None, b"", NOW), Err(Refused::MissingHeaders));
        assert_eq!(
            verify(SECRET, Some("soon"), Some("v0=00"), b"", NOW),
            Err(Refused::BadTimestamp)
        );
    }
}
