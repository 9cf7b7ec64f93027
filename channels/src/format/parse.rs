//! Markdown → [`Doc`]: the one place mnemo reads the model's markdown
//! (pulldown-cmark, CommonMark plus tables, strikethrough and task lists).
//! Blocks become plain text laid out the way a chat shows them — paragraphs
//! apart by a blank line, list items as `• item` / `1. item`, a rule as a
//! line, a table as a code block with its columns lined up — and inline
//! markup becomes styles. Never escapes anything (renderers do) and never
//! fails.

use super::{Doc, Run, Style, linkable};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// What a horizontal rule shows as.
const RULE: &str = "──────────";

/// The longest fence info string taken as a language tag.
const MAX_LANGUAGE_CHARS: usize = 32;

pub(super) fn parse(markdown: &str) -> Doc {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut b = Builder::default();
    for event in Parser::new_ext(markdown, options) {
        b.event(event);
    }
    Doc { runs: b.runs }
}

#[derive(Default)]
struct Builder {
    runs: Vec<Run>,
    /// One entry per open tag: the style it adds, if any.
    stack: Vec<Option<Style>>,
    /// The break owed before the next block's text (`""`, `"\n"`, `"\n\n"`).
    pending: &'static str,
    /// The next number of each open list (`None`: bullets).
    lists: Vec<Option<u64>>,
    /// A code block's text, collected until it ends.
    code: Option<String>,
    table: Option<Table>,
    /// For each open link: the plain length when it opened (an empty label
    /// shows the address).
    links: Vec<(usize, Option<String>)>,
    plain_len: usize,
}

#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    cell: String,
}

impl Builder {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => match &mut self.table {
                Some(table) => table.cell.push_str(&code),
                None => {
                    let mut styles = self.styles();
                    styles.push(Style::Code);
                    self.push(&code, styles);
                }
            },
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::SoftBreak | Event::HardBreak => match &mut self.table {
                Some(table) => table.cell.push(' '),
                None => self.text("\n"),
            },
            Event::Rule => {
                self.flush_break();
                self.push(RULE, self.block_styles());
                self.want("\n\n");
            }
            Event::FootnoteReference(label) => self.text(&format!("[{label}]")),
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        let style = match tag {
            Tag::Paragraph | Tag::HtmlBlock | Tag::MetadataBlock(_) => {
                self.flush_break();
                None
            }
            Tag::Heading { level, .. } => {
                self.flush_break();
                Some(Style::Heading(level as u8))
            }
            Tag::BlockQuote(_) => {
                self.flush_break();
                Some(Style::Quote)
            }
            Tag::CodeBlock(kind) => {
                self.flush_break();
                self.code = Some(String::new());
                Some(Style::Pre {
                    language: language(&kind),
                })
            }
            Tag::List(first) => {
                if !self.lists.is_empty() {
                    self.want("\n");
                }
                self.lists.push(first);
                None
            }
            Tag::Item => {
                self.flush_break();
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => "• ".to_string(),
                };
                self.push(&format!("{}{marker}", "  ".repeat(depth)), self.block_styles());
                None
            }
            Tag::Table(_) => {
                self.flush_break();
                self.table = Some(Table::default());
                None
            }
            Tag::Emphasis => Some(Style::Italic),
            Tag::Strong => Some(Style::Bold),
            Tag::Strikethrough => Some(Style::Strike),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                let href = linkable(&dest_url).then(|| dest_url.to_string());
                self.links.push((self.plain_len, href.clone()));
                href.map(|href| Style::Link { href })
            }
            _ => None,
        };
        self.stack.push(style);
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::CodeBlock => {
                let code = self.code.take().unwrap_or_default();
                self.push(code.trim_end_matches('\n'), self.styles());
            }
            TagEnd::Link | TagEnd::Image => {
                if let Some((at, Some(href))) = self.links.pop()
                    && at == self.plain_len
                {
                    self.push(&href, self.styles());
                }
            }
            TagEnd::TableCell => {
                if let Some(t) = &mut self.table {
                    let cell = std::mem::take(&mut t.cell);
                    t.row.push(cell.trim().to_string());
                }
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                }
            }
            TagEnd::Table => {
                if let Some(table) = self.table.take() {
                    let mut styles = self.styles();
                    styles.push(Style::Pre { language: None });
                    self.push(&layout(&table.rows), styles);
                }
            }
            TagEnd::HtmlBlock => self.trim_trailing_newlines(),
            _ => {}
        }
        self.stack.pop();
        match tag {
            TagEnd::Item => self.want("\n"),
            TagEnd::List(_) => {
                self.lists.pop();
                self.want(if self.lists.is_empty() { "\n\n" } else { "\n" });
            }
            TagEnd::Paragraph
            | TagEnd::Heading(_)
            | TagEnd::BlockQuote(_)
            | TagEnd::CodeBlock
            | TagEnd::HtmlBlock
            | TagEnd::Table
            | TagEnd::MetadataBlock(_) => self.want("\n\n"),
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        if let Some(code) = &mut self.code {
            code.push_str(text);
        } else if let Some(table) = &mut self.table {
            table.cell.push_str(text);
        } else {
            self.flush_break();
            self.push(text, self.styles());
        }
    }

    fn styles(&self) -> Vec<Style> {
        self.stack.iter().flatten().cloned().collect()
    }

    /// The styles of text that belongs to the layout rather than the words
    /// (breaks, bullets): only a surrounding quote.
    fn block_styles(&self) -> Vec<Style> {
        self.styles().into_iter().filter(|s| *s == Style::Quote).collect()
    }

    fn want(&mut self, brk: &'static str) {
        if brk.len() > self.pending.len() {
            self.pending = brk;
        }
    }

    fn flush_break(&mut self) {
        let brk = std::mem::take(&mut self.pending);
        if !self.runs.is_empty() && !brk.is_empty() {
            self.push(brk, self.block_styles());
        }
    }

    /// Appends `text` in `styles`, merging with the last run when equal.
    fn push(&mut self, text: &str, styles: Vec<Style>) {
        if text.is_empty() {
            return;
        }
        self.plain_len += text.len();
        match self.runs.last_mut() {
            Some(last) if last.styles == styles => last.text.push_str(text),
            _ => self.runs.push(Run {
                text: text.to_string(),
                styles,
            }),
        }
    }

    fn trim_trailing_newlines(&mut self) {
        while let Some(last) = self.runs.last_mut() {
            let kept = last.text.trim_end_matches('\n').len();
            self.plain_len -= last.text.len() - kept;
            last.text.truncate(kept);
            if !last.text.is_empty() {
                break;
            }
            self.runs.pop();
        }
    }
}

/// The language of a fenced block when its info string is a plain
/// identifier (`rust`, `c++`, `objective-c`).
fn language(kind: &CodeBlockKind<'_>) -> Option<String> {
    let CodeBlockKind::Fenced(info) = kind else { return None };
    let word = info.split_whitespace().next()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "+-_#.".contains(c);
    (word.len() <= MAX_LANGUAGE_CHARS && word.chars().all(plain)).then(|| word.to_string())
}

/// Table rows as lines with every column padded to its widest cell, the
/// header underlined: monospace in a code block, so the columns line up.
fn layout(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        rows.iter()
            .filter_map(|r| r.get(c))
            .map(|cell| cell.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    let line = |row: &Vec<String>| {
        let cells: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(c, w)| format!("{:<w$}", row.get(c).map_or("", String::as_str)))
            .collect();
        cells.join(" | ").trim_end().to_string()
    };
    let mut lines: Vec<String> = Vec::with_capacity(rows.len() + 1);
    for (i, row) in rows.iter().enumerate() {
        lines.push(line(row));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat((*w).max(1))).collect();
            lines.push(rule.join("-|-"));
        }
    }
    lines.join("\n")
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

    fn runs(markdown: &str) -> Vec<Run> {
        parse(markdown).runs
    }

    #[test]
    fn plain_text_is_one_unstyled_run() {
        assert_eq!(runs("just words & symbols"), vec![run("just words & symbols", &[])]);
    }

    #[test]
    fn bold_italic_strike_and_code_become_styles() {
        assert_eq!(
            runs("a **b** _c_ `d` ~~e~~"),
            vec![
                run("a ", &[]),
                run("b", &[Style::Bold]),
                run(" ", &[]),
                run("c", &[Style::Italic]),
                run(" ", &[]),
                run("d", &[Style::Code]),
                run(" ", &[]),
                run("e", &[Style::Strike]),
            ]
        );
    }

    #[test]
    fn emphasis_nests_and_markup_inside_code_stays_literal() {
        assert_eq!(
            runs("**bold *both***"),
            vec![run("bold ", &[Style::Bold]), run("both", &[Style::Bold, Style::Italic])]
        );
        assert_eq!(runs("`a **b** c`"), vec![run("a **b** c", &[Style::Code])]);
    }

    #[test]
    fn arithmetic_snake_case_and_stray_markers_stay_literal() {
        for text in ["2 * 3 * 4", "snake_case_name", "a ** b", "unclosed *star", "`open code"] {
            assert_eq!(runs(text), vec![run(text, &[])], "{text}");
        }
        assert_eq!(runs(r"\*not italic\*"), vec![run("*not italic*", &[])]);
    }

    #[test]
    fn links_keep_their_address_and_unsafe_schemes_stay_text() {
        assert_eq!(
            runs("see [the **docs**](https://e.com/a?b=1&c=2) now"),
            vec![
                run("see ", &[]),
                run("the ", &[link("https://e.com/a?b=1&c=2")]),
                run("docs", &[link("https://e.com/a?b=1&c=2"), Style::Bold]),
                run(" now", &[]),
            ]
        );
        assert_eq!(runs("[click](javascript:alert(1))"), vec![run("click", &[])]);
        assert_eq!(
            runs("<https://x.io>"),
            vec![run("https://x.io", &[link("https://x.io")])]
        );
    }

    #[test]
    fn fenced_blocks_become_pre_with_their_language_and_unclosed_ones_run_to_the_end() {
        assert_eq!(
            runs("before\n```rust\nfn main() {\n\n    let a = *b;\n}\n```\nafter"),
            vec![
                run("before\n\n", &[]),
                run(
                    "fn main() {\n\n    let a = *b;\n}",
                    &[Style::Pre {
                        language: Some("rust".into())
                    }]
                ),
                run("\n\nafter", &[]),
            ]
        );
        assert_eq!(
            runs("```\ncode *x*"),
            vec![run("code *x*", &[Style::Pre { language: None }])]
        );
    }

    #[test]
    fn headings_lists_quotes_and_rules_are_laid_out_as_a_chat_shows_them() {
        assert_eq!(
            runs("## Title\n- one\n  * two\n\n1. first\n2. second"),
            vec![
                run("Title", &[Style::Heading(2)]),
                run("\n\n• one\n  • two\n\n1. first\n2. second", &[]),
            ]
        );
        assert_eq!(
            runs("> quoted **x**\n\n---\nend"),
            vec![
                run("quoted ", &[Style::Quote]),
                run("x", &[Style::Quote, Style::Bold]),
                run("\n\n──────────\n\nend", &[]),
            ]
        );
    }

    #[test]
    fn tables_become_a_code_block_with_aligned_columns() {
        assert_eq!(
            runs("| name | n |\n|---|---|\n| ab | 1 |\n| c | 22 |"),
            vec![run(
                "name | n\n-----|---\nab   | 1\nc    | 22",
                &[Style::Pre { language: None }]
            )]
        );
    }
}
