//! Telegram HTML (`parse_mode = HTML`): `<b>`, `<i>`, `<s>`, `<code>`,
//! `<pre>` (with a language class), `<a href>` and `<blockquote>`, with
//! `&`, `<`, `>` and `"` escaped everywhere. Headings show as bold. Length
//! is the HTML source in UTF-16 code units — what Telegram counts, and
//! never less than what it displays — so no message is refused as too long.

use super::{Markup, Style};
use std::borrow::Cow;

/// Telegram's limit for one message.
pub const TELEGRAM_MAX_CHARS: usize = 4096;

/// The Telegram renderer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TelegramHtml;

impl Markup for TelegramHtml {
    fn max_units(&self) -> usize {
        TELEGRAM_MAX_CHARS
    }

    fn measure(&self, text: &str) -> usize {
        text.encode_utf16().count()
    }

    fn show(&self, style: &Style) -> Option<Style> {
        Some(match style {
            Style::Heading(_) => Style::Bold,
            other => other.clone(),
        })
    }

    /// Telegram refuses code or a link inside a link, anything inside code,
    /// and a quote inside anything.
    fn can_nest(&self, outer: &[Style], inner: &Style) -> bool {
        let in_link = outer.iter().any(|s| matches!(s, Style::Link { .. }));
        let blocked = match inner {
            Style::Code | Style::Link { .. } => in_link,
            Style::Quote => !outer.is_empty(),
            _ => false,
        };
        !blocked && !outer.contains(&Style::Code)
    }

    fn open(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold | Style::Heading(_) => "<b>".into(),
            Style::Italic => "<i>".into(),
            Style::Strike => "<s>".into(),
            Style::Code => "<code>".into(),
            Style::Quote => "<blockquote>".into(),
            Style::Pre { language: None } => "<pre>".into(),
            Style::Pre {
                language: Some(language),
            } => format!("<pre><code class=\"language-{}\">", escape(language)).into(),
            Style::Link { href } => format!("<a href=\"{}\">", escape(href)).into(),
        }
    }

    fn close(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold | Style::Heading(_) => "</b>",
            Style::Italic => "</i>",
            Style::Strike => "</s>",
            Style::Code => "</code>",
            Style::Quote => "</blockquote>",
            Style::Pre { language: None } => "</pre>",
            Style::Pre { language: Some(_) } => "</code></pre>",
            Style::Link { .. } => "</a>",
        }
        .into()
    }

    fn escape(&self, c: char, _styles: &[Style], _line_start: bool, out: &mut String) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// `text` with the characters Telegram's HTML parser reserves escaped
/// (`"` too, so the same function serves attribute values).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| TelegramHtml.escape(c, &[], false, &mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Chunk, Doc, Layout};
    use super::*;
    use mnemo_testkit::html_check::visible_text;
    use proptest::prelude::*;

    fn format(markdown: &str, limit: usize) -> Vec<Chunk> {
        Layout::new(&TelegramHtml, &Doc::parse(markdown)).chunks(limit)
    }

    fn html(markdown: &str) -> Vec<String> {
        format(markdown, TELEGRAM_MAX_CHARS)
            .into_iter()
            .map(|c| c.text)
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
    fn quotes_strikethrough_and_tables_use_what_telegram_supports() {
        assert_eq!(
            html("> said **this**\n\n~~gone~~"),
            vec!["<blockquote>said <b>this</b></blockquote>\n\n<s>gone</s>"]
        );
        assert_eq!(
            html("| a | b |\n|---|---|\n| 1 | <2> |"),
            vec!["<pre>a | b\n--|----\n1 | &lt;2&gt;</pre>"]
        );
    }

    #[test]
    fn headings_are_bold_and_a_code_block_in_a_quote_stands_alone() {
        assert_eq!(html("# Title\ntext"), vec!["<b>Title</b>\n\ntext"]);
        let chunks = html("> ```\n> x\n> ```");
        assert_eq!(chunks, vec!["<pre>x</pre>"]);
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
                chunk.text.starts_with("<b>") && chunk.text.ends_with("</b>"),
                "{}",
                chunk.text
            );
            assert!(chunk.text.encode_utf16().count() <= 60);
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
            assert!(chunk.text.encode_utf16().count() <= TELEGRAM_MAX_CHARS);
            assert_eq!(visible_text(&chunk.text).as_deref(), Ok(chunk.plain.as_str()));
        }
    }

    #[test]
    fn a_link_whose_tags_alone_outgrow_a_message_goes_as_its_text() {
        let text = format!("> **[see](https://e.com/{})** then", "a".repeat(100));
        let chunks = format(&text, 64);
        for chunk in &chunks {
            assert!(chunk.text.encode_utf16().count() <= 64, "{}", chunk.text);
            assert_eq!(visible_text(&chunk.text).as_deref(), Ok(chunk.plain.as_str()));
        }
        let seen: String = chunks.iter().map(|c| c.plain.as_str()).collect();
        assert_eq!(seen.split_whitespace().collect::<Vec<_>>(), ["see", "then"]);
    }

    #[test]
    fn code_block_indentation_survives_a_split() {
        let line = "    indented();\n";
        let text = format!("```\n{}```", line.repeat(20));
        for chunk in format(&text, 100) {
            assert!(chunk.text.starts_with("<pre>    indented();"), "{}", chunk.text);
            assert!(chunk.text.ends_with("</pre>"));
        }
    }

    #[test]
    fn every_prefix_of_a_reply_renders_as_valid_html() {
        let reply = "**Bold** and `code` and [link](https://e.com)\n\n```rust\nlet a = 1;\n```\n> quote ~~s~~";
        for (end, _) in reply.char_indices() {
            for chunk in format(&reply[..end], TELEGRAM_MAX_CHARS) {
                visible_text(&chunk.text).unwrap_or_else(|e| panic!("prefix {end}: {e}: {}", chunk.text));
            }
        }
    }

    /// Markdown with every construct the renderer handles, freely mixed.
    fn markdown() -> impl Strategy<Value = String> {
        "[a-zé😀 \n*_`<>&~\\[\\]()#>|-]{0,600}|([a-z ]{0,20}(\\*\\*|`|_|~~|\n> |\n- |\n\\| a \\| b \\|\n|\\[l\\]\\(https://e.com/[a-z]{0,8}\\)|\n```\n)){0,40}"
    }

    proptest! {
        #[test]
        fn chunks_fit_are_valid_html_and_keep_every_visible_char(text in markdown(), limit in 64usize..400) {
            let chunks = format(&text, limit);
            let whole = Doc::parse(&text).plain();
            let mut seen = String::new();
            for chunk in &chunks {
                prop_assert!(chunk.text.encode_utf16().count() <= limit, "{} > {limit}", chunk.text);
                let visible = visible_text(&chunk.text);
                prop_assert_eq!(visible.as_deref(), Ok(chunk.plain.as_str()));
                seen.push_str(&chunk.plain);
            }
            let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(strip(&seen), strip(&whole));
        }
    }
}
