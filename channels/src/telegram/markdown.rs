//! Reading the model's markdown into styled runs of plain text: the first
//! half of turning a reply into Telegram HTML ([`super::html`] renders and
//! splits the runs). Pure text in, runs out; never escapes anything (the
//! renderer does) and never fails: what is not recognised markdown stays
//! literal text.
//!
//! Recognised: fenced code blocks → pre, `inline code`, **bold** / __bold__,
//! *italic* / _italic_, [links](https://…), `#` headings (bold) and `-`/`*`
//! bullets (•). Emphasis does not span lines, so one stray `*` can only
//! affect its own line.

/// One Telegram entity a run of text sits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    Bold,
    Italic,
    Code,
    /// A code block; `language` only when it is a plain identifier.
    Pre {
        language: Option<String>,
    },
    Link {
        href: String,
    },
}

/// Text that carries the same styles from start to end (outermost first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub text: String,
    pub styles: Vec<Style>,
}

/// Links whose address is longer than this stay plain text: a huge `href`
/// would have to be repeated in every chunk the link is split across.
const MAX_HREF_CHARS: usize = 1024;

/// Markup nested deeper than this is taken literally (it is never
/// meaningful, and it bounds the recursion on hostile input).
const MAX_NESTING: usize = 6;

/// Schemes a link may point to; anything else (`javascript:`) stays text.
const LINK_SCHEMES: [&str; 4] = ["http://", "https://", "tg://", "mailto:"];

/// Parses `markdown` into runs; adjacent runs never share the same styles.
pub(crate) fn parse(markdown: &str) -> Vec<Run> {
    let mut out = Runs::default();
    let mut lines = markdown.lines();
    let mut first = true;
    while let Some(line) = lines.next() {
        if !first {
            out.push("\n", &[]);
        }
        first = false;
        if let Some(language) = fence_open(line) {
            let mut body = Vec::new();
            for inner in lines.by_ref() {
                if is_fence(inner) {
                    break;
                }
                body.push(inner);
            }
            out.push(&body.join("\n"), &[Style::Pre { language }]);
        } else if let Some(title) = heading(line) {
            inline(title, &[Style::Bold], 1, &mut out);
        } else if let Some((indent, item)) = bullet(line) {
            out.push(indent, &[]);
            out.push("• ", &[]);
            inline(item, &[], 0, &mut out);
        } else {
            inline(line, &[], 0, &mut out);
        }
    }
    out.0
}

/// Collects runs, merging neighbours with equal styles.
#[derive(Default)]
struct Runs(Vec<Run>);

impl Runs {
    fn push(&mut self, text: &str, styles: &[Style]) {
        if text.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.styles == styles => last.text.push_str(text),
            _ => self.0.push(Run {
                text: text.to_string(),
                styles: styles.to_vec(),
            }),
        }
    }
}

fn is_fence(line: &str) -> bool {
    let trimmed = line.trim_start();
    line.len() - trimmed.len() <= 3 && trimmed.starts_with("```")
}

/// `Some(language)` when `line` opens a fenced code block.
fn fence_open(line: &str) -> Option<Option<String>> {
    if !is_fence(line) {
        return None;
    }
    let info = line.trim_start().trim_start_matches('`').trim();
    let plain = |c: char| c.is_ascii_alphanumeric() || "+-_#.".contains(c);
    let language = (!info.is_empty() && info.len() <= 32 && info.chars().all(plain)).then(|| info.to_string());
    Some(language)
}

/// The title of an ATX heading (`## Title`).
fn heading(line: &str) -> Option<&str> {
    let hashes = line.len() - line.trim_start_matches('#').len();
    let rest = &line[hashes..];
    ((1..=6).contains(&hashes) && rest.starts_with(' ')).then(|| rest.trim())
}

/// A bullet item: its indentation and its text.
fn bullet(line: &str) -> Option<(&str, &str)> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|marker| body.strip_prefix(marker))
        .map(|item| (indent, item))
}

/// Parses one line's inline markup under `styles` into `out`; `depth`
/// counts the enclosing markup.
fn inline(text: &str, styles: &[Style], depth: usize, out: &mut Runs) {
    let mut plain = String::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        let rest = &text[i..];
        let nest = depth < MAX_NESTING;
        let found = match c {
            '`' => code_span(rest).map(|(code, used)| (Span::Code(code), used)),
            '[' if nest => link(rest).map(|(label, href, used)| (Span::Nested(label, Style::Link { href }), used)),
            '*' | '_' if nest => emphasis(text, i).map(|(inner, style, used)| (Span::Nested(inner, style), used)),
            '\\' => rest[1..]
                .chars()
                .next()
                .filter(char::is_ascii_punctuation)
                .map(|p| (Span::Literal(p), 1 + p.len_utf8())),
            _ => None,
        };
        let Some((span, used)) = found else {
            plain.push(c);
            i += c.len_utf8();
            continue;
        };
        match span {
            Span::Literal(p) => plain.push(p),
            Span::Code(code) => {
                out.push(&std::mem::take(&mut plain), styles);
                out.push(code, &with(styles, Style::Code));
            }
            Span::Nested(inner, style) => {
                out.push(&std::mem::take(&mut plain), styles);
                inline(inner, &with(styles, style), depth + 1, out);
            }
        }
        i += used;
    }
    out.push(&plain, styles);
}

/// What an inline marker turned out to start.
enum Span<'a> {
    Literal(char),
    Code(&'a str),
    Nested(&'a str, Style),
}

/// `styles` plus `style`, keeping only combinations Telegram accepts: a
/// style already in effect is not repeated, a link inside a link keeps the
/// outer address, and code inside a link stays plain link text (links and
/// code cannot contain each other).
fn with(styles: &[Style], style: Style) -> Vec<Style> {
    let in_link = styles.iter().any(|s| matches!(s, Style::Link { .. }));
    let mut out = styles.to_vec();
    let redundant = out.contains(&style) || (in_link && matches!(style, Style::Code | Style::Link { .. }));
    if !redundant {
        out.push(style);
    }
    out
}

/// `` `code` `` (any run of backticks, closed by the same run): the code and
/// the bytes used.
fn code_span(rest: &str) -> Option<(&str, usize)> {
    let ticks = rest.len() - rest.trim_start_matches('`').len();
    let fence = &rest[..ticks];
    let body = &rest[ticks..];
    let mut from = 0;
    while let Some(at) = body[from..].find(fence) {
        let at = from + at;
        let after = body[at + ticks..].chars().next();
        if after != Some('`') {
            let code = &body[..at];
            let code = match code.strip_prefix(' ').and_then(|c| c.strip_suffix(' ')) {
                Some(inner) if !inner.trim().is_empty() => inner,
                _ => code,
            };
            return (!code.is_empty()).then_some((code, ticks + at + ticks));
        }
        from = at + ticks + body[at + ticks..].len() - body[at + ticks..].trim_start_matches('`').len();
    }
    None
}

/// `[label](href)`: the label, the address and the bytes used, when the
/// address has an allowed scheme.
fn link(rest: &str) -> Option<(&str, String, usize)> {
    let label_end = closing(rest, '[', ']')?;
    let label = &rest[1..label_end];
    let after = &rest[label_end + 1..];
    if !after.starts_with('(') || label.trim().is_empty() {
        return None;
    }
    let target_end = closing(after, '(', ')')?;
    let href = after[1..target_end].split_whitespace().next()?;
    let allowed = LINK_SCHEMES.iter().any(|s| href.to_ascii_lowercase().starts_with(s));
    (allowed && href.chars().count() <= MAX_HREF_CHARS)
        .then(|| (label, href.to_string(), label_end + 1 + target_end + 1))
}

/// The byte index of the `close` that balances the `open` at index 0.
fn closing(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Emphasis opening at byte `at` of `line`: `**bold**`, `__bold__`,
/// `*italic*`, `_italic_`. Returns the inner text, the style and the bytes
/// used. The inner text may not start or end with a space (so `2 * 3 * 4`
/// stays arithmetic), and underscores only count at word edges (so
/// `snake_case_name` stays a name).
fn emphasis(line: &str, at: usize) -> Option<(&str, Style, usize)> {
    let rest = &line[at..];
    let mark = rest.chars().next()?;
    let double: String = [mark, mark].iter().collect();
    let (delim, style) = if rest.starts_with(&double) {
        (double.as_str(), Style::Bold)
    } else {
        (&rest[..1], Style::Italic)
    };
    let word_char = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric());
    if mark == '_' && word_char(line[..at].chars().next_back()) {
        return None;
    }
    let body = &rest[delim.len()..];
    if body.starts_with(char::is_whitespace) || body.starts_with(mark) {
        return None;
    }
    let mut from = 0;
    while let Some(found) = body[from..].find(delim) {
        let end = from + found;
        let inner = &body[..end];
        let next = body[end + delim.len()..].chars().next();
        let underscore_in_word = mark == '_' && word_char(next);
        let closes =
            !(inner.is_empty() || inner.ends_with(char::is_whitespace) || next == Some(mark) || underscore_in_word);
        if closes {
            return Some((inner, style, delim.len() * 2 + end));
        }
        from = end + mark.len_utf8();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, styles: &[Style]) -> Run {
        Run {
            text: text.to_string(),
            styles: styles.to_vec(),
        }
    }

    fn link(href: &str) -> Style {
        Style::Link { href: href.to_string() }
    }

    #[test]
    fn plain_text_is_one_unstyled_run() {
        assert_eq!(
            parse("just words & <symbols>"),
            vec![run("just words & <symbols>", &[])]
        );
    }

    #[test]
    fn bold_italic_and_code_become_styles() {
        assert_eq!(
            parse("a **b** _c_ `d` *e* __f__"),
            vec![
                run("a ", &[]),
                run("b", &[Style::Bold]),
                run(" ", &[]),
                run("c", &[Style::Italic]),
                run(" ", &[]),
                run("d", &[Style::Code]),
                run(" ", &[]),
                run("e", &[Style::Italic]),
                run(" ", &[]),
                run("f", &[Style::Bold]),
            ]
        );
    }

    #[test]
    fn emphasis_nests_and_markup_inside_code_stays_literal() {
        assert_eq!(
            parse("**bold *both***"),
            vec![run("bold ", &[Style::Bold]), run("both", &[Style::Bold, Style::Italic])]
        );
        assert_eq!(parse("`a **b** c`"), vec![run("a **b** c", &[Style::Code])]);
        assert_eq!(parse("`` a ` b ``"), vec![run("a ` b", &[Style::Code])]);
    }

    #[test]
    fn arithmetic_snake_case_and_stray_markers_stay_literal() {
        for text in ["2 * 3 * 4", "snake_case_name", "a ** b", "unclosed *star", "`open code"] {
            assert_eq!(parse(text), vec![run(text, &[])], "{text}");
        }
    }

    #[test]
    fn backslash_escapes_a_marker() {
        assert_eq!(parse(r"\*not italic\*"), vec![run("*not italic*", &[])]);
    }

    #[test]
    fn links_keep_their_address_and_styled_label() {
        assert_eq!(
            parse("see [the **docs**](https://example.com/a?b=1&c=2) now"),
            vec![
                run("see ", &[]),
                run("the ", &[link("https://example.com/a?b=1&c=2")]),
                run("docs", &[link("https://example.com/a?b=1&c=2"), Style::Bold]),
                run(" now", &[]),
            ]
        );
    }

    #[test]
    fn links_with_unsafe_schemes_stay_text() {
        let text = "[click](javascript:alert(1))";
        assert_eq!(parse(text), vec![run(text, &[])]);
    }

    #[test]
    fn code_inside_a_link_is_plain_link_text() {
        assert_eq!(parse("[`x`](https://e.com)"), vec![run("x", &[link("https://e.com")])]);
    }

    #[test]
    fn fenced_blocks_become_pre_with_their_language() {
        let text = "before\n```rust\nfn main() {\n\n    let a = *b;\n}\n```\nafter";
        assert_eq!(
            parse(text),
            vec![
                run("before\n", &[]),
                run(
                    "fn main() {\n\n    let a = *b;\n}",
                    &[Style::Pre {
                        language: Some("rust".into())
                    }]
                ),
                run("\nafter", &[]),
            ]
        );
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        assert_eq!(
            parse("```\ncode *x*"),
            vec![run("code *x*", &[Style::Pre { language: None }])]
        );
    }

    #[test]
    fn headings_are_bold_and_bullets_are_dots() {
        assert_eq!(
            parse("## Title\n- one\n  * two"),
            vec![run("Title", &[Style::Bold]), run("\n• one\n  • two", &[])]
        );
    }

    #[test]
    fn a_link_inside_a_link_keeps_the_outer_address() {
        assert_eq!(
            parse("[a [b](https://in.example)](https://out.example)"),
            vec![run("a b", &[link("https://out.example")])]
        );
    }

    #[test]
    fn deep_nesting_is_taken_literally_past_the_bound() {
        let depth = 5_000;
        let text = "[".repeat(depth) + "x" + &"](https://a.example)".repeat(depth);
        let runs = parse(&text);
        let plain: String = runs.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(plain.matches('[').count(), depth - MAX_NESTING);
        assert!(runs.iter().all(|r| r.styles == [link("https://a.example")]));
    }
}
