//! Strings from a platform (display names, ids) made safe to print on an
//! operator's terminal or in a log line: control characters, and the
//! Unicode controls that reorder text (bidi overrides), are escaped as
//! `\n`, `\u{1b}` …, and the result is bounded. A stranger's name can then
//! neither forge a line in `mnemo access list` nor drive the terminal.

/// The longest printable form kept, in characters, before `…`.
pub const MAX_PRINTABLE_CHARS: usize = 64;

/// `raw` with every control character escaped, cut to
/// [`MAX_PRINTABLE_CHARS`] characters (plus `…` when cut).
pub fn printable(raw: &str) -> String {
    let mut out = String::new();
    let mut kept = 0;
    for c in raw.chars() {
        let piece = if c.is_control() || is_reordering(c) {
            c.escape_default().collect::<String>()
        } else {
            c.to_string()
        };
        let n = piece.chars().count();
        if kept + n > MAX_PRINTABLE_CHARS {
            out.push('…');
            return out;
        }
        kept += n;
        out.push_str(&piece);
    }
    out
}

/// Bidi embeddings, overrides and isolates, and the line/paragraph
/// separators: invisible, yet they change what a line shows.
fn is_reordering(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_names_kept() {
        assert_eq!(printable("Ada Lovelace 🙂"), "Ada Lovelace 🙂");
        assert_eq!(printable("Eve\npending X\r\x1b[2J"), "Eve\\npending X\\r\\u{1b}[2J");
        assert_eq!(printable("a\u{202E}b"), "a\\u{202e}b");
    }

    #[test]
    fn long_names_are_bounded() {
        let out = printable(&"x".repeat(1000));
        assert_eq!(out.chars().count(), MAX_PRINTABLE_CHARS + 1);
        assert!(out.ends_with('…'));
    }
}
