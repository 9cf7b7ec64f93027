//! Discord markdown: `**bold**`, `*italic*`, `~~strike~~`, `` `code` ``,
//! fenced blocks with their language, masked links `[label](url)`, `> `
//! quotes and `#`–`###` headings (deeper ones, which Discord leaves raw,
//! show as bold). Characters Discord would read as markup are
//! backslash-escaped outside code, so literal `*` or `~` show as typed;
//! backticks inside code cannot end it (see [`super::push_code_safe`]).
//! Length is counted in characters.

use super::{Markup, Style};
use std::borrow::Cow;

/// Discord's limit for one message's content.
pub const DISCORD_MAX_CHARS: usize = 2000;

/// The Discord renderer.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiscordMarkdown;

impl Markup for DiscordMarkdown {
    fn max_units(&self) -> usize {
        DISCORD_MAX_CHARS
    }

    fn show(&self, style: &Style) -> Option<Style> {
        Some(match style {
            Style::Heading(level) if *level > 3 => Style::Bold,
            other => other.clone(),
        })
    }

    /// Code shows nothing inside; a link holds no link or heading.
    fn can_nest(&self, outer: &[Style], inner: &Style) -> bool {
        let in_link = outer.iter().any(|s| matches!(s, Style::Link { .. }));
        let link_in_link = in_link && matches!(inner, Style::Link { .. } | Style::Heading(_));
        !(outer.contains(&Style::Code) || link_in_link)
    }

    fn spans_lines(&self, style: &Style) -> bool {
        !matches!(style, Style::Heading(_))
    }

    fn open(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold => "**".into(),
            Style::Italic => "*".into(),
            Style::Strike => "~~".into(),
            Style::Code => "`".into(),
            Style::Pre { language } => format!("```{}\n", language.as_deref().unwrap_or("")).into(),
            Style::Link { .. } => "[".into(),
            Style::Quote => "".into(),
            Style::Heading(level) => format!("{} ", "#".repeat(usize::from(*level))).into(),
        }
    }

    fn close(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold => "**".into(),
            Style::Italic => "*".into(),
            Style::Strike => "~~".into(),
            Style::Code => "`".into(),
            Style::Pre { .. } => "\n```".into(),
            // A bracket in the address would end Discord's link early.
            Style::Link { href } => format!("]({})", href.replace('(', "%28").replace(')', "%29")).into(),
            Style::Quote | Style::Heading(_) => "".into(),
        }
    }

    fn line_prefix(&self, styles: &[Style]) -> &'static str {
        if styles.contains(&Style::Quote) { "> " } else { "" }
    }

    fn escape(&self, c: char, styles: &[Style], line_start: bool, out: &mut String) {
        let in_code = styles.iter().any(|s| matches!(s, Style::Code | Style::Pre { .. }));
        let markup = matches!(c, '\\' | '*' | '~' | '`' | '|')
            || (line_start && matches!(c, '>' | '#' | '-' | '+'))
            || (c == ']' && styles.iter().any(|s| matches!(s, Style::Link { .. })));
        if markup && !in_code {
            out.push('\\');
        }
        super::push_code_safe(c, styles, out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Doc, Layout, render};
    use super::*;
    use proptest::prelude::*;

    const FENCE: &str = "```";

    fn discord(markdown: &str) -> String {
        render(&DiscordMarkdown, markdown)
    }

    fn split(markdown: &str, limit: usize) -> Vec<String> {
        let doc = Doc::parse(markdown);
        Layout::new(&DiscordMarkdown, &doc)
            .chunks(limit)
            .into_iter()
            .map(|c| c.text)
            .collect()
    }

    fn fences_balanced(chunk: &str) -> bool {
        chunk.matches(FENCE).count().is_multiple_of(2)
    }

    #[test]
    fn what_discord_renders_keeps_its_markdown_form() {
        assert_eq!(
            discord("# Title\n**bold** _it_ ~~no~~ `x`\n> quote\n\n- item\n\n[link](https://example.org)"),
            "# Title\n\n**bold** *it* ~~no~~ `x`\n\n> quote\n\n• item\n\n[link](https://example.org)"
        );
    }

    #[test]
    fn deep_headings_become_bold_and_literal_markup_is_escaped() {
        assert_eq!(discord("#### Notes\ntext"), "**Notes**\n\ntext");
        assert_eq!(discord("#hashtag"), "\\#hashtag");
        assert_eq!(discord("2 * 3 * 4 and snake_case"), "2 \\* 3 \\* 4 and snake_case");
    }

    #[test]
    fn a_link_address_with_brackets_stays_one_link() {
        assert_eq!(
            discord("[Rust](https://en.wikipedia.org/wiki/Rust_(language))"),
            "[Rust](https://en.wikipedia.org/wiki/Rust_%28language%29)"
        );
    }

    #[test]
    fn tables_go_in_a_code_block() {
        assert_eq!(
            discord("Scores:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nend"),
            "Scores:\n\n```\na | b\n--|--\n1 | 2\n```\n\nend"
        );
    }

    #[test]
    fn code_blocks_are_left_alone() {
        let md = "```md\n#### not a heading\n---\n| not | a table |\n```";
        assert_eq!(discord(md), md);
    }

    #[test]
    fn a_cut_inside_code_closes_the_fence_and_reopens_it_with_its_language() {
        let code: String = (0..30).map(|i| format!("    let x{i} = {i};\n")).collect();
        let text = format!("Here:\n\n```rust\n{code}```\n\nDone.");
        let chunks = split(&text, 200);
        assert!(chunks.len() > 2, "{chunks:?}");
        for (i, c) in chunks.iter().enumerate() {
            assert!(c.chars().count() <= 200, "chunk {i} too long");
            assert!(fences_balanced(c), "chunk {i} unbalanced: {c}");
        }
        assert!(
            chunks[1].starts_with("```rust\n    let"),
            "indentation kept: {}",
            chunks[1]
        );
        assert!(chunks.last().is_some_and(|c| c.ends_with("Done.")));
    }

    #[test]
    fn a_chunk_never_ends_on_the_line_that_opens_a_fence() {
        let text = format!("{}\n```py\n{}\n```", "word ".repeat(7).trim_end(), "x = 1\n".repeat(10));
        let chunks = split(&text, 45);
        assert!(!chunks[0].contains(FENCE), "{chunks:?}");
        assert!(chunks[1].starts_with("```py\nx = 1"), "{chunks:?}");
    }

    #[test]
    fn the_texts_own_closing_fence_is_not_doubled() {
        let text = "```\nabcdefgh\nabcdefgh\nabcd\n```\nafter the block";
        assert_eq!(
            split(text, 32),
            vec!["```\nabcdefgh\nabcdefgh\nabcd\n```", "after the block"]
        );
    }

    #[test]
    fn every_prefix_of_a_streaming_reply_renders_with_balanced_fences_and_markers() {
        let reply = "**Bold** and `code` and [link](https://e.com)\n\n```rust\nlet a = 1;\n```\n> quote ~~s~~";
        for (end, _) in reply.char_indices() {
            for chunk in split(&reply[..end], DISCORD_MAX_CHARS) {
                assert!(fences_balanced(&chunk), "prefix {end}: {chunk}");
                assert!(
                    chunk.replace("\\*", "").matches("**").count() % 2 == 0,
                    "prefix {end}: {chunk}"
                );
            }
        }
    }

    #[test]
    fn a_growing_message_closes_at_a_clean_boundary_and_continues_in_a_new_one() {
        let paragraph = "word ".repeat(30);
        let text = format!("{p}\n\n**{p}**", p = paragraph.trim());
        let doc = Doc::parse(&text);
        let layout = Layout::new(&DiscordMarkdown, &doc);
        let (first, next) = layout.next_chunk(0, 200).expect("a message");
        assert_eq!(first.text, paragraph.trim(), "closed at the paragraph break");
        let (second, end) = layout.next_chunk(next, 200).expect("the rest");
        assert_eq!(second.text, format!("**{}**", paragraph.trim()));
        assert_eq!(end, layout.len());
        assert!(layout.next_chunk(end, 200).is_none());
    }

    /// Prose paragraphs and ```py blocks, in any order.
    fn markdown() -> impl Strategy<Value = String> {
        let prose = "[a-eé*~ ]{1,80}(\n[a-eé ]{1,40}){0,3}";
        let code = "(  [a-e]{0,30}\n){1,12}".prop_map(|c| format!("```py\n{c}```"));
        prop::collection::vec(prop_oneof![prose.prop_map(String::from), code], 0..8).prop_map(|b| b.join("\n\n"))
    }

    proptest! {
        #[test]
        fn chunks_fit_balance_fences_and_keep_the_text(text in markdown(), limit in 48usize..120) {
            let doc = Doc::parse(&text);
            let chunks = Layout::new(&DiscordMarkdown, &doc).chunks(limit);
            for c in &chunks {
                prop_assert!(c.text.chars().count() <= limit, "too long: {:?}", c.text);
                prop_assert!(fences_balanced(&c.text), "unbalanced: {:?}", c.text);
                prop_assert!(!c.text.trim().is_empty());
            }
            let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            let seen: String = chunks.iter().map(|c| c.plain.as_str()).collect();
            prop_assert_eq!(strip(&seen), strip(&doc.plain()));
        }
    }
}
