//! The model's markdown as platform text: one parse, one splitter, three
//! renderers. [`Doc::parse`] reads the markdown once (pulldown-cmark) into
//! runs of plain text, each carrying the styles it sits in;
//! [`Layout`] splits those runs into messages under a platform's limit and
//! renders each message on its own, so every message is valid for its
//! platform whatever the cut. The renderers ([`TelegramHtml`],
//! [`SlackMrkdwn`], [`DiscordMarkdown`]) only say how a style opens and
//! closes, how a character is escaped and how length is counted.
//!
//! Pure text work: no network, no state, never fails. What markdown does not
//! recognise stays literal text (escaped for the platform), so any prefix of
//! a reply — an unclosed `**` or code fence mid-stream — renders as valid
//! platform text too.

mod discord;
mod parse;
mod slack;
mod split;
mod telegram;

pub use discord::{DISCORD_MAX_CHARS, DiscordMarkdown};
pub use slack::{SLACK_MAX_CHARS, SlackMrkdwn};
pub use split::Layout;
pub use telegram::{TELEGRAM_MAX_CHARS, TelegramHtml};

use std::borrow::Cow;

/// One formatting entity a run of text sits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Style {
    Bold,
    Italic,
    Strike,
    /// Inline code.
    Code,
    /// A code block (or a table, laid out in columns); `language` only when
    /// the fence's info is a plain identifier.
    Pre {
        language: Option<String>,
    },
    Link {
        href: String,
    },
    Quote,
    /// A heading, level 1–6.
    Heading(u8),
}

/// Text that carries the same styles from start to end (outermost first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub text: String,
    pub styles: Vec<Style>,
}

/// A parsed reply: runs in order; adjacent runs never share the same styles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Doc {
    pub runs: Vec<Run>,
}

impl Doc {
    /// Parses the model's markdown. Never fails.
    pub fn parse(markdown: &str) -> Self {
        parse::parse(markdown)
    }

    /// The text a reader sees, without any markup.
    pub fn plain(&self) -> String {
        self.runs.iter().map(|r| r.text.as_str()).collect()
    }
}

/// One message ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The message in the platform's markup.
    pub text: String,
    /// The same words without markup (what the reader sees), for when a
    /// platform refuses the markup.
    pub plain: String,
}

/// How one platform writes styled text. The splitter calls these; a
/// renderer never sees the markdown and never decides where to cut.
pub trait Markup {
    /// The longest message the platform takes, in [`Markup::measure`] units.
    fn max_units(&self) -> usize;

    /// The length of `text` as the platform counts it.
    fn measure(&self, text: &str) -> usize {
        text.chars().count()
    }

    /// How the platform shows `style` (another style, or `None`: not shown).
    fn show(&self, style: &Style) -> Option<Style> {
        Some(style.clone())
    }

    /// Whether `inner` may sit inside the styles `outer` (already shown).
    fn can_nest(&self, outer: &[Style], inner: &Style) -> bool;

    /// Whether `style` may stay open across a line break; one that may not
    /// is closed before each `\n` and reopened after it.
    fn spans_lines(&self, _style: &Style) -> bool {
        true
    }

    fn open(&self, style: &Style) -> Cow<'static, str>;
    fn close(&self, style: &Style) -> Cow<'static, str>;

    /// What starts every line inside `styles` (a quote's `> `).
    fn line_prefix(&self, _styles: &[Style]) -> &'static str {
        ""
    }

    /// Writes `c`, shown in `styles`, escaped for the platform;
    /// `line_start` when it is the first character of a line.
    fn escape(&self, c: char, styles: &[Style], line_start: bool, out: &mut String);
}

/// Splits `markdown` into messages of the platform's markup, each at most
/// [`Markup::max_units`] long. Blank text gives no messages.
pub fn to_chunks<M: Markup>(markup: &M, markdown: &str) -> Vec<Chunk> {
    Layout::new(markup, &Doc::parse(markdown)).chunks(markup.max_units())
}

/// `markdown` in the platform's markup as one text, with no length limit
/// (for captions and other short texts).
pub fn render<M: Markup>(markup: &M, markdown: &str) -> String {
    let doc = Doc::parse(markdown);
    Layout::new(markup, &doc).render_all().text
}

/// The styles a run shows on a platform: mapped by [`Markup::show`], with
/// repeats and nestings the platform refuses dropped; a code block stands
/// alone (nothing may contain it, and it contains nothing).
fn shown<M: Markup>(markup: &M, styles: &[Style]) -> Vec<Style> {
    let mut out: Vec<Style> = Vec::new();
    for style in styles {
        let Some(style) = markup.show(style) else { continue };
        if matches!(style, Style::Pre { .. }) {
            return vec![style];
        }
        if !out.contains(&style) && markup.can_nest(&out, &style) {
            out.push(style);
        }
    }
    out
}

/// A backtick inside code as platforms that delimit code with backticks
/// must write it so it cannot end the code: in a block followed by a
/// zero-width space (so no three form a fence), in inline code as `ˋ`
/// (which no backtick run can contain). Anything else as it is.
fn push_code_safe(c: char, styles: &[Style], out: &mut String) {
    let code = |inline: bool| {
        styles.iter().any(|s| {
            if inline {
                *s == Style::Code
            } else {
                matches!(s, Style::Pre { .. })
            }
        })
    };
    match c {
        '`' if code(false) => out.push_str("`\u{200B}"),
        '`' if code(true) => out.push('ˋ'),
        c => out.push(c),
    }
}

/// Schemes a link may point to; anything else (`javascript:`) stays text.
const LINK_SCHEMES: [&str; 4] = ["http://", "https://", "tg://", "mailto:"];

/// Links whose address is longer than this stay plain text: a huge `href`
/// would be repeated in every message the link is split across.
const MAX_HREF_CHARS: usize = 1024;

fn linkable(href: &str) -> bool {
    let lower = href.to_ascii_lowercase();
    LINK_SCHEMES.iter().any(|s| lower.starts_with(s))
        && href.chars().count() <= MAX_HREF_CHARS
        && !href.contains(char::is_whitespace)
}
