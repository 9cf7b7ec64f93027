//! One line of a user's recall store (`recall/<user>/messages.tsv`,
//! format 3): what the index needs of a message and nothing else, as
//! tab-separated fields, so writing one costs a few copies and reading one
//! parses no JSON and no date:
//!
//! ```text
//! <unix seconds>\t<nanoseconds>\t<u|a>\t<msgId>\t<terms>\t<text>\n
//! ```
//!
//! `terms` are the text's search terms ([`super::tokenize::terms`]) joined
//! by spaces (a term never holds a space, tab, newline or backslash);
//! `msgId` and `text` escape `\` `\t` `\n` `\r` as `\\` `\t` `\n` `\r`. The
//! other fields of the record (channel, thread, chat, user name) are not
//! stored: the index does not use them. The file keeps its old name;
//! format 2 (a JSON object per line) is rebuilt, not read (see
//! [`super::store`]).

use super::tokenize;
use crate::record::{Record, Role};
use crate::stable_key::key_of;
use chrono::{DateTime, Utc};
use std::borrow::Cow;

/// The identity of a message: the same record from STM and from its
/// archive batch is one document.
pub fn message_key(record: &Record) -> u64 {
    key_of_message(record.ts, record.role, &record.msg_id, &record.text)
}

/// [`message_key`] of a message read back from its line.
pub(super) fn key_of_message(ts: DateTime<Utc>, role: Role, msg_id: &str, text: &str) -> u64 {
    let ts = ts.timestamp_millis().to_le_bytes();
    let role: &[u8] = match role {
        Role::User => b"u",
        Role::Assistant => b"a",
    };
    key_of(&[&ts, role, msg_id.as_bytes(), text.as_bytes()])
}

/// `record` as a stored line (newline included) appended to `out`, and its
/// terms.
pub(super) fn line_of(record: &Record, out: &mut Vec<u8>) -> Vec<String> {
    let terms = tokenize::terms(&record.text);
    encode(record.ts, record.role, &record.msg_id, &terms, &record.text, out);
    terms
}

/// A message read back from its line.
#[derive(Debug, PartialEq)]
pub struct Stored<'a> {
    pub ts: DateTime<Utc>,
    pub role: Role,
    pub msg_id: Cow<'a, str>,
    /// Space-separated.
    pub terms: &'a str,
    pub text: String,
}

/// Appends the line of a message (newline included) to `out`.
pub fn encode(ts: DateTime<Utc>, role: Role, msg_id: &str, terms: &[String], text: &str, out: &mut Vec<u8>) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}\t{}\t", ts.timestamp(), ts.timestamp_subsec_nanos());
    out.extend_from_slice(match role {
        Role::User => b"u\t",
        Role::Assistant => b"a\t",
    });
    escape(msg_id, out);
    out.push(b'\t');
    for (i, term) in terms.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(term.as_bytes());
    }
    out.push(b'\t');
    escape(text, out);
    out.push(b'\n');
}

/// Reads a line (without its newline); the error says what is wrong,
/// never what the text is.
pub fn decode(line: &[u8]) -> Result<Stored<'_>, &'static str> {
    let mut fields = line.splitn(6, |b| *b == b'\t');
    let mut next = |what: &'static str| fields.next().ok_or(what);
    let secs = number(next("no time")?).ok_or("bad seconds")?;
    let nanos = number(next("no nanoseconds")?).ok_or("bad nanoseconds")?;
    let ts = DateTime::from_timestamp(secs, u32::try_from(nanos).map_err(|_| "bad nanoseconds")?).ok_or("bad time")?;
    let role = match next("no role")? {
        b"u" => Role::User,
        b"a" => Role::Assistant,
        _ => return Err("bad role"),
    };
    let msg_id = unescape(next("no message id")?)?;
    let terms = std::str::from_utf8(next("no terms")?).map_err(|_| "terms not UTF-8")?;
    let text = unescape(next("no text")?)?.into_owned();
    Ok(Stored {
        ts,
        role,
        msg_id,
        terms,
        text,
    })
}

fn number(field: &[u8]) -> Option<i64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

fn escape(text: &str, out: &mut Vec<u8>) {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r')) {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

fn unescape(field: &[u8]) -> Result<Cow<'_, str>, &'static str> {
    if !field.contains(&b'\\') {
        return std::str::from_utf8(field)
            .map(Cow::Borrowed)
            .map_err(|_| "text not UTF-8");
    }
    let mut out = Vec::with_capacity(field.len());
    let mut bytes = field.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        out.push(match bytes.next() {
            Some(b'\\') => b'\\',
            Some(b't') => b'\t',
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            _ => return Err("bad escape"),
        });
    }
    String::from_utf8(out).map(Cow::Owned).map_err(|_| "text not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_line_reads_back_as_written(
            secs in -62_000_000_000i64..250_000_000_000,
            nanos in 0u32..1_000_000_000,
            user in any::<bool>(),
            msg_id in ".{0,12}",
            text in "(.|\n|\t|\r|\\\\){0,40}",
            terms in prop::collection::vec("[a-z0-9]{1,8}", 0..6),
        ) {
            let ts = DateTime::from_timestamp(secs, nanos).unwrap();
            let role = if user { Role::User } else { Role::Assistant };
            let mut line = Vec::new();
            encode(ts, role, &msg_id, &terms, &text, &mut line);
            prop_assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
            prop_assert_eq!(line.last(), Some(&b'\n'));
            let stored = decode(&line[..line.len() - 1]).unwrap();
            prop_assert_eq!(stored, Stored { ts, role, msg_id: Cow::Borrowed(msg_id.as_str()), terms: &terms.join(" "), text });
        }
    }

    #[test]
    fn a_damaged_line_is_refused() {
        assert!(decode(b"12\t0\tu\tid").is_err());
        assert!(decode(b"x\t0\tu\tid\tterm\ttext").is_err());
        assert!(decode(b"12\t0\tz\tid\tterm\ttext").is_err());
        assert!(decode(b"12\t0\tu\tid\tterm\tbad \\q escape").is_err());
        assert!(decode(b"12\t0\tu\tid\tterm\ttext").is_ok());
    }
}
