//! `limits.maxReplyChars`: the longest answer mnemo stores and sends. A
//! longer model answer is cut at the last paragraph, line or word boundary
//! that fits, with a visible marker saying so, so one runaway answer can
//! neither flood a chat with hundreds of messages nor hold the user's queue
//! for long, nor fill the log. Pure text in, text out.

use std::borrow::Cow;

/// Says that the answer was cut; `{}` is the limit.
fn marker(limit: usize) -> String {
    format!("\n\n[answer cut here: it was longer than {limit} characters]")
}

/// `text` if it has at most `limit` characters, else its longest prefix at
/// a boundary plus the marker, `limit` characters at most in all.
pub fn cut(text: &str, limit: usize) -> Cow<'_, str> {
    if text.chars().count() <= limit {
        return Cow::Borrowed(text);
    }
    let marker = marker(limit);
    let budget = limit.saturating_sub(marker.chars().count());
    let end = text.char_indices().nth(budget).map_or(text.len(), |(i, _)| i);
    let window = &text[..end];
    // A boundary in the last quarter keeps the cut readable; further back
    // it would throw away too much.
    let at = best_cut(window).filter(|&i| i >= end - end / 4).unwrap_or(end);
    let kept = window[..at].trim_end();
    let mut out = String::with_capacity(kept.len() + marker.len());
    out.push_str(kept);
    out.push_str(&marker);
    if out.chars().count() > limit {
        // A limit shorter than the marker: the marker alone, clipped.
        return Cow::Owned(marker.trim_start().chars().take(limit).collect());
    }
    Cow::Owned(out)
}

/// How many characters of a streamed answer may be shown before it is
/// known whether it will be cut: what [`cut_streamed`] always keeps.
pub fn shown_while_streaming(limit: usize) -> usize {
    limit.saturating_sub(marker(limit).chars().count()).saturating_sub(1)
}

/// [`cut`] for an answer shown while it was written: cut at the last word
/// boundary (not the last paragraph), so every whole word of the first
/// [`shown_while_streaming`] characters — all a live reply showed — stays.
pub fn cut_streamed(text: &str, limit: usize) -> Cow<'_, str> {
    if text.chars().count() <= limit {
        return Cow::Borrowed(text);
    }
    let marker = marker(limit);
    let budget = limit.saturating_sub(marker.chars().count());
    let end = text.char_indices().nth(budget).map_or(text.len(), |(i, _)| i);
    let window = &text[..end];
    let at = window
        .rfind(char::is_whitespace)
        .filter(|&i| i >= end - end / 4)
        .unwrap_or(end);
    let kept = window[..at].trim_end();
    if kept.is_empty() {
        return cut(text, limit);
    }
    Cow::Owned(format!("{kept}{marker}"))
}

/// The end of the last paragraph, else line, else word in `window`.
fn best_cut(window: &str) -> Option<usize> {
    ["\n\n", "\n", " "]
        .iter()
        .find_map(|sep| window.rfind(sep).filter(|&i| i > 0).map(|i| i + sep.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_answer_is_untouched() {
        assert!(matches!(cut("hello", 10), Cow::Borrowed("hello")));
    }

    #[test]
    fn a_long_answer_is_cut_at_a_boundary_within_the_limit_and_says_so() {
        let text = "word ".repeat(10_000);
        let out = cut(&text, 1000);
        assert!(out.chars().count() <= 1000, "{}", out.chars().count());
        assert!(out.ends_with("[answer cut here: it was longer than 1000 characters]"));
        assert!(out.starts_with("word word"));
        assert!(!out.contains("wor\n"), "cut inside a word");
    }

    #[test]
    fn multibyte_text_is_cut_on_a_character_boundary() {
        let text = "é".repeat(5000);
        let out = cut(&text, 100);
        assert!(out.chars().count() <= 100);
        assert!(out.starts_with("éé"));
    }

    #[test]
    fn a_streamed_cut_keeps_every_whole_word_that_could_have_been_shown() {
        let text = "para one.\n\n".to_string() + &"word ".repeat(10_000);
        let shown: String = text.chars().take(shown_while_streaming(1000)).collect();
        let out = cut_streamed(&text, 1000);
        assert!(out.chars().count() <= 1000);
        assert!(out.ends_with("[answer cut here: it was longer than 1000 characters]"));
        let whole_words = &shown[..shown.rfind(' ').unwrap()];
        assert!(out.starts_with(whole_words.trim_end()), "{out}");
    }

    #[test]
    fn a_limit_below_the_marker_still_holds() {
        assert!(cut(&"x".repeat(50), 10).chars().count() <= 10);
    }
}
