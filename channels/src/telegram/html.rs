//! Telegram HTML: rendering the model's markdown (via [`super::markdown`])
//! as `<b>`, `<i>`, `<code>`, `<pre>` and `<a href>` with everything else
//! escaped, and splitting it into messages that fit Telegram's limit.
//!
//! Splitting happens on the styled text, not on the HTML string, so a cut
//! can never fall inside a tag or an entity: a tag open at a cut is closed
//! at the end of one chunk and reopened at the start of the next. A chunk's
//! size is its HTML source in UTF-16 code units — what Telegram counts, and
//! never less than the text it displays — so no chunk can be refused as too
//! long. Pure: no I/O.

use super::markdown::{self, Run, Style};

/// Telegram's limit for one message.
pub const TELEGRAM_MAX_CHARS: usize = 4096;

/// One message ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The text as Telegram HTML (`parse_mode = HTML`).
    pub html: String,
    /// The same text without markup, for when Telegram refuses the HTML.
    pub plain: String,
}

/// Formats `markdown` as Telegram HTML in chunks of at most `limit` UTF-16
/// units each, cut at paragraph, then line, then word boundaries. Blank
/// text gives no chunks.
pub fn format(markdown: &str, limit: usize) -> Vec<Chunk> {
    let runs = markdown::parse(markdown);
    let chars: Vec<(char, usize)> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, run)| run.text.chars().map(move |c| (c, i)))
        .collect();
    let text = StyledText {
        runs: &runs,
        chars: &chars,
    };
    let mut chunks = Vec::new();
    let mut start = 0;
    loop {
        start = text.skip_leading_space(start);
        if start >= chars.len() {
            return chunks;
        }
        let hard = text.fit(start, limit);
        let cut = if hard == chars.len() {
            hard
        } else {
            text.boundary(start, hard).unwrap_or(hard)
        };
        let end = text.trim_end(start, cut);
        if end > start {
            chunks.push(text.render(start, end));
        }
        start = cut;
    }
}

/// The runs, and every character with the index of the run it belongs to.
struct StyledText<'a> {
    runs: &'a [Run],
    chars: &'a [(char, usize)],
}

impl StyledText<'_> {
    fn styles(&self, at: usize) -> &[Style] {
        &self.runs[self.chars[at].1].styles
    }

    fn in_pre(&self, at: usize) -> bool {
        self.styles(at).iter().any(|s| matches!(s, Style::Pre { .. }))
    }

    /// Where the next chunk starts: past the whitespace at a cut, except
    /// the indentation of a code line.
    fn skip_leading_space(&self, mut at: usize) -> usize {
        while at < self.chars.len()
            && self.chars[at].0.is_whitespace()
            && (self.chars[at].0 == '\n' || !self.in_pre(at))
        {
            at += 1;
        }
        at
    }

    fn trim_end(&self, start: usize, mut end: usize) -> usize {
        while end > start && self.chars[end - 1].0.is_whitespace() {
            end -= 1;
        }
        end
    }

    /// The largest `end` such that `start..end` renders within `limit`
    /// (at least one character, so splitting always makes progress). The
    /// rendered size only grows with `end`: each step adds a character and
    /// moves closing tags from "pending" to "written".
    fn fit(&self, start: usize, limit: usize) -> usize {
        let mut open: &[Style] = &[];
        let mut used = 0;
        let mut pending = 0;
        let mut end = start;
        for at in start..self.chars.len() {
            let styles = self.styles(at);
            let mut next = used + escaped_units(self.chars[at].0);
            let mut next_pending = pending;
            // Tags change only where runs change; within a run only the text grows.
            if at == start || self.chars[at - 1].1 != self.chars[at].1 {
                let keep = common_prefix(open, styles);
                next += tags_units(&open[keep..], close_tag) + tags_units(&styles[keep..], open_tag);
                next_pending = tags_units(styles, close_tag);
            }
            if next + next_pending > limit {
                break;
            }
            (used, pending, open, end) = (next, next_pending, styles, at + 1);
        }
        end.max(start + 1)
    }

    /// The best place in `start+1..=hard` to end a chunk: the last paragraph
    /// break, else line break, else space.
    fn boundary(&self, start: usize, hard: usize) -> Option<usize> {
        let at = |i: usize, c: char| self.chars.get(i).is_some_and(|&(x, _)| x == c);
        let paragraph = |i: usize| at(i, '\n') && at(i + 1, '\n');
        let line = |i: usize| at(i, '\n');
        let word = |i: usize| self.chars.get(i).is_some_and(|&(x, _)| x.is_whitespace());
        let last = |is: &dyn Fn(usize) -> bool| (start + 1..=hard).rev().find(|&i| is(i));
        last(&paragraph).or_else(|| last(&line)).or_else(|| last(&word))
    }

    /// `start..end` as one self-contained message.
    fn render(&self, start: usize, end: usize) -> Chunk {
        let mut html = String::new();
        let mut plain = String::new();
        let mut open: &[Style] = &[];
        for at in start..end {
            let styles = self.styles(at);
            if styles != open {
                let keep = common_prefix(open, styles);
                open[keep..].iter().rev().for_each(|s| html.push_str(&close_tag(s)));
                styles[keep..].iter().for_each(|s| html.push_str(&open_tag(s)));
                open = styles;
            }
            let c = self.chars[at].0;
            push_escaped(&mut html, c);
            plain.push(c);
        }
        open.iter().rev().for_each(|s| html.push_str(&close_tag(s)));
        Chunk { html, plain }
    }
}

fn common_prefix(a: &[Style], b: &[Style]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn open_tag(style: &Style) -> String {
    match style {
        Style::Bold => "<b>".into(),
        Style::Italic => "<i>".into(),
        Style::Code => "<code>".into(),
        Style::Pre { language: None } => "<pre>".into(),
        Style::Pre {
            language: Some(language),
        } => format!("<pre><code class=\"language-{}\">", escape(language)),
        Style::Link { href } => format!("<a href=\"{}\">", escape(href)),
    }
}

fn close_tag(style: &Style) -> String {
    match style {
        Style::Bold => "</b>",
        Style::Italic => "</i>",
        Style::Code => "</code>",
        Style::Pre { language: None } => "</pre>",
        Style::Pre { language: Some(_) } => "</code></pre>",
        Style::Link { .. } => "</a>",
    }
    .into()
}

/// `text` with the characters Telegram's HTML parser reserves escaped
/// (`"` too, so the same function serves attribute values).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| push_escaped(&mut out, c));
    out
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        c => out.push(c),
    }
}

fn escaped_units(c: char) -> usize {
    match c {
        '&' | '"' => 6,
        '<' | '>' => 4,
        c => c.len_utf16(),
    }
}

/// The size of the opening (or closing) tags of `styles`.
fn tags_units(styles: &[Style], tag: fn(&Style) -> String) -> usize {
    styles.iter().map(|s| units(&tag(s))).sum()
}

fn units(text: &str) -> usize {
    text.encode_utf16().count()
}

#[cfg(test)]
#[path = "../../tests/telegram/html_check.rs"]
mod html_check;

#[cfg(test)]
mod tests {
    use super::html_check::visible_text;
    use super::*;
    use proptest::prelude::*;

    fn html(markdown: &str) -> Vec<String> {
        format(markdown, TELEGRAM_MAX_CHARS)
            .into_iter()
            .map(|c| c.html)
            .collect()
    }

    #[test]
    fn markdown_becomes_telegram_tags_and_the_rest_is_escaped() {
        assert_eq!(
            html("**Hi** <you> & _me_: `a<b` [docs](https://e.com/?a=1&b=\"2\")"),
            vec![
                "<b>Hi</b> &lt;you&gt; &amp; <i>me</i>: <code>a&lt;b</code> \
                 <a href=\"https://e.com/?a=1&amp;b=&quot;2&quot;\">docs</a>"
            ]
        );
    }

    #[test]
    fn code_blocks_become_pre_with_the_language_class() {
        assert_eq!(
            html("```python\nif a < b:\n    pass\n```"),
            vec!["<pre><code class=\"language-python\">if a &lt; b:\n    pass</code></pre>"]
        );
    }

    #[test]
    fn blank_text_gives_no_chunks() {
        assert!(format(" \n\n ", 100).is_empty());
    }

    #[test]
    fn long_replies_split_at_paragraphs_first() {
        let paragraph = "word ".repeat(150);
        let text = [paragraph.trim(), paragraph.trim(), paragraph.trim()].join("\n\n");
        let chunks = format(&text, 1600);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].plain, [paragraph.trim(), paragraph.trim()].join("\n\n"));
        assert_eq!(chunks[1].plain, paragraph.trim());
    }

    #[test]
    fn a_tag_open_at_a_cut_is_closed_and_reopened() {
        let text = format!("**{}**", "bold ".repeat(40).trim());
        let chunks = format(&text, 60);
        assert!(chunks.len() > 1);
        for chunk in &chunks {
            assert!(
                chunk.html.starts_with("<b>") && chunk.html.ends_with("</b>"),
                "{}",
                chunk.html
            );
            assert!(chunk.html.encode_utf16().count() <= 60);
        }
    }

    #[test]
    fn escaping_is_counted_so_no_chunk_exceeds_the_limit() {
        let text = "<&> ".repeat(3000);
        let chunks = format(&text, TELEGRAM_MAX_CHARS);
        assert!(
            chunks.len() >= 9,
            "each '<&> ' renders as 15 units: {} chunks",
            chunks.len()
        );
        for chunk in &chunks {
            assert!(chunk.html.encode_utf16().count() <= TELEGRAM_MAX_CHARS);
            assert_eq!(visible_text(&chunk.html).as_deref(), Ok(chunk.plain.as_str()));
        }
    }

    #[test]
    fn code_block_indentation_survives_a_split() {
        let line = "    indented();\n";
        let text = format!("```\n{}```", line.repeat(20));
        for chunk in format(&text, 100) {
            assert!(chunk.html.starts_with("<pre>    indented();"), "{}", chunk.html);
            assert!(chunk.html.ends_with("</pre>"));
        }
    }

    #[test]
    fn a_ten_thousand_character_reply_fits_in_valid_messages() {
        let text = (0..200)
            .map(|i| format!("**Point {i}**: some _detail_ & `x<{i}>` words."))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.chars().count() > 9_000);
        let chunks = format(&text, TELEGRAM_MAX_CHARS);
        assert!(chunks.len() >= 3);
        for chunk in chunks {
            assert!(chunk.html.chars().count() <= TELEGRAM_MAX_CHARS);
            visible_text(&chunk.html).unwrap();
        }
    }

    proptest! {
        #[test]
        fn chunks_fit_are_valid_html_and_keep_every_visible_char(
            text in "[a-zé😀 \n*_`<>&\\[\\]()#-]{0,600}|([a-z ]{0,20}(\\*\\*|`|_|\\[l\\]\\(https://e.com/[a-z]{0,8}\\)|\n```\n)){0,40}",
            limit in 64usize..400,
        ) {
            let chunks = format(&text, limit);
            let whole: String = markdown::parse(&text).iter().map(|r| r.text.as_str()).collect();
            let mut seen = String::new();
            for chunk in &chunks {
                prop_assert!(chunk.html.encode_utf16().count() <= limit, "{} > {limit}", chunk.html);
                let visible = visible_text(&chunk.html);
                prop_assert_eq!(visible.as_deref(), Ok(chunk.plain.as_str()));
                seen.push_str(&chunk.plain);
            }
            let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(strip(&seen), strip(&whole));
        }
    }
}
