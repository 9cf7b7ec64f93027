//! Slack mrkdwn: bold `*b*`, italic `_i_`, strike `~s~`, `` `code` ``,
//! fenced blocks (without the language tag Slack would show as text), links
//! `<url|label>` and `> ` quotes; headings show as bold. `&`, `<` and `>`
//! are escaped everywhere, so model text can never form a link, a mention
//! or `<!channel>`. Slack's emphasis cannot span lines, so it is closed at
//! each line break and reopened after it; backticks inside code cannot end
//! it (see [`super::push_code_safe`]). Length is counted in characters.

use super::{Markup, Style};
use std::borrow::Cow;

/// Slack recommends at most 4,000 characters per message (DESIGN §6).
pub const SLACK_MAX_CHARS: usize = 4_000;

/// The Slack renderer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlackMrkdwn;

impl Markup for SlackMrkdwn {
    fn max_units(&self) -> usize {
        SLACK_MAX_CHARS
    }

    fn show(&self, style: &Style) -> Option<Style> {
        Some(match style {
            Style::Heading(_) => Style::Bold,
            other => other.clone(),
        })
    }

    /// A link label and code show no formatting inside.
    fn can_nest(&self, outer: &[Style], _inner: &Style) -> bool {
        !outer.iter().any(|s| matches!(s, Style::Code | Style::Link { .. }))
    }

    fn spans_lines(&self, style: &Style) -> bool {
        matches!(style, Style::Quote | Style::Pre { .. })
    }

    fn open(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold | Style::Heading(_) => "*".into(),
            Style::Italic => "_".into(),
            Style::Strike => "~".into(),
            Style::Code => "`".into(),
            Style::Pre { .. } => "```\n".into(),
            Style::Link { href } => format!("<{}|", escape(href)).into(),
            Style::Quote => "".into(),
        }
    }

    fn close(&self, style: &Style) -> Cow<'static, str> {
        match style {
            Style::Bold | Style::Heading(_) => "*",
            Style::Italic => "_",
            Style::Strike => "~",
            Style::Code => "`",
            Style::Pre { .. } => "\n```",
            Style::Link { .. } => ">",
            Style::Quote => "",
        }
        .into()
    }

    fn line_prefix(&self, styles: &[Style]) -> &'static str {
        if styles.contains(&Style::Quote) { "> " } else { "" }
    }

    fn escape(&self, c: char, styles: &[Style], _line_start: bool, out: &mut String) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            // A `|` would end a link's address part; the label shows `¦`.
            '|' if styles.iter().any(|s| matches!(s, Style::Link { .. })) => out.push('¦'),
            c => super::push_code_safe(c, styles, out),
        }
    }
}

/// Escapes the three characters Slack treats as markup.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| SlackMrkdwn.escape(c, &[], false, &mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Doc, Layout, render};
    use super::*;
    use proptest::prelude::*;

    fn mrkdwn(markdown: &str) -> String {
        render(&SlackMrkdwn, markdown)
    }

    fn messages(markdown: &str, limit: usize) -> Vec<String> {
        let doc = Doc::parse(markdown);
        Layout::new(&SlackMrkdwn, &doc)
            .chunks(limit)
            .into_iter()
            .map(|c| c.text)
            .collect()
    }

    #[test]
    fn bold_italic_and_strike_use_slack_delimiters() {
        assert_eq!(mrkdwn("**bold** and __also__"), "*bold* and *also*");
        assert_eq!(mrkdwn("*it* and _it_"), "_it_ and _it_");
        assert_eq!(mrkdwn("~~gone~~"), "~gone~");
        assert_eq!(mrkdwn("**a *b* c**"), "*a _b_ c*");
    }

    #[test]
    fn arithmetic_and_snake_case_are_left_alone() {
        assert_eq!(mrkdwn("2 * 3 * 4"), "2 * 3 * 4");
        assert_eq!(mrkdwn("call my_var_name now"), "call my_var_name now");
    }

    #[test]
    fn links_become_angle_links_with_escaped_parts() {
        assert_eq!(
            mrkdwn("see [the docs](https://x.io/a?b=1&c=2)"),
            "see <https://x.io/a?b=1&amp;c=2|the docs>"
        );
        assert_eq!(mrkdwn("<https://x.io>"), "<https://x.io|https://x.io>");
        assert_eq!(mrkdwn("![chart](https://x.io/c.png)"), "<https://x.io/c.png|chart>");
        assert_eq!(mrkdwn("[a|b](https://x.io)"), "<https://x.io|a¦b>");
    }

    #[test]
    fn markup_characters_are_escaped_so_they_cannot_ping_or_link() {
        assert_eq!(
            mrkdwn("a < b && c > d <!channel>"),
            "a &lt; b &amp;&amp; c &gt; d &lt;!channel&gt;"
        );
    }

    #[test]
    fn code_is_kept_verbatim_but_escaped() {
        assert_eq!(mrkdwn("use `a **b** <c>`"), "use `a **b** &lt;c&gt;`");
        let md = "```rust\nlet x = **y** < 3;\n```";
        assert_eq!(mrkdwn(md), "```\nlet x = **y** &lt; 3;\n```");
    }

    #[test]
    fn headings_bullets_quotes_and_rules_have_slack_forms() {
        assert_eq!(mrkdwn("## Plan ##"), "*Plan*");
        assert_eq!(mrkdwn("- one\n  * two"), "• one\n  • two");
        assert_eq!(mrkdwn("> quoted **x**\n> more"), "> quoted *x*\n> more");
        assert_eq!(mrkdwn("---"), "──────────");
    }

    #[test]
    fn emphasis_is_closed_at_each_line_break() {
        assert_eq!(mrkdwn("**two\nlines**"), "*two*\n*lines*");
    }

    #[test]
    fn long_replies_split_under_the_limit_after_escaping() {
        // 3,000 `<` become 12,000 characters once escaped.
        let md = "<".repeat(3_000);
        let out = messages(&md, SLACK_MAX_CHARS);
        assert!(out.len() >= 3);
        assert!(out.iter().all(|m| m.chars().count() <= SLACK_MAX_CHARS));
        assert!(out.iter().all(|m| !m.contains('<')));
    }

    #[test]
    fn a_code_block_cut_in_two_is_closed_and_reopened() {
        let body = (0..400).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        let out = messages(&format!("```\n{body}\n```"), 1_000);
        assert!(out.len() > 1);
        for m in &out {
            assert_eq!(m.matches("```").count(), 2, "each message is a whole code block: {m:?}");
        }
    }

    #[test]
    fn every_prefix_of_a_streaming_reply_renders_with_balanced_fences() {
        let reply = "**Bold** and `code` <x>\n\n```\nlet a = 1;\n```\n> quote ~~s~~";
        for (end, _) in reply.char_indices() {
            for m in messages(&reply[..end], SLACK_MAX_CHARS) {
                assert!(m.matches("```").count() % 2 == 0, "prefix {end}: {m}");
                assert!(!m.contains('<'), "prefix {end}: {m}");
            }
        }
    }

    /// Prose with Slack's markup characters, and fenced blocks.
    fn markdown() -> impl Strategy<Value = String> {
        let prose = "[a-z<>&*_~ \n]{1,200}";
        let code = "([a-z<& ]{0,30}\n){1,12}".prop_map(|c| format!("```\n{c}```"));
        prop::collection::vec(prop_oneof![prose.prop_map(String::from), code], 0..6).prop_map(|b| b.join("\n\n"))
    }

    proptest! {
        #[test]
        fn messages_fit_balance_fences_and_keep_every_visible_char(text in markdown(), limit in 20usize..200) {
            let doc = Doc::parse(&text);
            let chunks = Layout::new(&SlackMrkdwn, &doc).chunks(limit);
            for m in &chunks {
                prop_assert!(m.text.chars().count() <= limit, "too long: {:?}", m.text);
                prop_assert!(!m.text.contains('<'), "raw < in {:?}", m.text);
                prop_assert!(m.text.matches("```").count() % 2 == 0, "unbalanced: {:?}", m.text);
            }
            let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            let seen: String = chunks.iter().map(|c| c.plain.as_str()).collect();
            prop_assert_eq!(strip(&seen), strip(&doc.plain()));
        }
    }
}
