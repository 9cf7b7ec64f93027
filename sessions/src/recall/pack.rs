//! Recalled documents to text: each item labelled with its date and source
//! (`[2026-03-07, you]`, `[2026-03-07, assistant]`, `[summary 2026-W10]`,
//! `[note: slug]`, `[2026-03-07, fact; was: …]`, `[2026-03-01, fact; until
//! 2026-03-07]`), packed in priority order under a token budget
//! (characters / 4, as the context builder counts), then shown oldest
//! first. What does not fit is counted, never dropped silently.
//!
//! Pure text; reads nothing.

use super::bm25::{Doc, Source};
use crate::profile::clipped_line;
use crate::record::Role;
use chrono::{DateTime, Datelike, Utc};
use std::fmt;

/// Longest text of one recalled item, in characters.
const ITEM_CHARS: usize = 600;
/// Longest earlier value quoted in a fact's label.
const WAS_CHARS: usize = 120;

/// One recalled item, ready to show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Item {
    pub at: DateTime<Utc>,
    /// `[2026-03-07, you]`, `[summary 2026-W10]`, `[note: slug]`, …
    pub label: String,
    pub text: String,
}

impl Item {
    pub fn of(doc: &Doc) -> Item {
        Item::from_source(doc.at, &doc.source, &doc.text)
    }

    /// The item for a piece of `source` dated `at`.
    pub(crate) fn from_source(at: DateTime<Utc>, source: &Source, text: &str) -> Item {
        let day = Day(at);
        let label = match source {
            Source::User => return Item::message(at, Role::User, text),
            Source::Assistant => return Item::message(at, Role::Assistant, text),
            Source::Summary(period) => format!("[summary {period}]"),
            Source::Rolling => format!("[summary of recent conversation, {day}]"),
            Source::Profile => "[profile]".to_string(),
            Source::Note(slug) => return Item::note(at, slug, text),
            Source::SharedNote(slug) => return Item::shared_note(at, slug, text),
            Source::Document { name, page } => return Item::document(at, name, *page, text),
            Source::Fact { was: Some(old), .. } => {
                format!("[{day}, fact; was: {}]", clipped_line(old, WAS_CHARS))
            }
            Source::Fact { until: Some(end), .. } => format!("[{day}, fact; until {end}]"),
            Source::Fact { .. } => format!("[{day}, fact]"),
        };
        Item {
            at,
            label,
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    /// A recalled message of the conversation: `[2026-03-07, you] …` or
    /// `[2026-03-07, assistant] …`.
    /// A piece of the daily or weekly summary of `period` (`2026-03-07`,
    /// `2026-W10`), labelled as the file store's recall labels it.
    pub fn summary(at: DateTime<Utc>, period: &str, text: &str) -> Item {
        Item {
            at,
            label: format!("[summary {period}]"),
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    pub fn message(at: DateTime<Utc>, role: Role, text: &str) -> Item {
        let day = Day(at);
        let label = match role {
            Role::User => format!("[{day}, you]"),
            Role::Assistant => format!("[{day}, assistant]"),
        };
        Item {
            at,
            label,
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    /// One of the user's topic notes: `[note: slug] …`.
    pub fn note(at: DateTime<Utc>, slug: &str, text: &str) -> Item {
        Item {
            at,
            label: format!("[note: {slug}]"),
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    /// One of the operator's shared notes: `[shared note: slug] …`.
    pub fn shared_note(at: DateTime<Utc>, slug: &str, text: &str) -> Item {
        Item {
            at,
            label: format!("[shared note: {slug}]"),
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    /// A piece of a document the user sent:
    /// `[document lease.pdf, p. 3, sent 2026-03-07] …`.
    pub fn document(at: DateTime<Utc>, name: &str, page: Option<u32>, text: &str) -> Item {
        let day = Day(at);
        let label = match page {
            Some(page) => format!("[document {name}, p. {page}, sent {day}]"),
            None => format!("[document {name}, sent {day}]"),
        };
        Item {
            at,
            label,
            text: clipped_line(text, ITEM_CHARS),
        }
    }

    /// `label text` on one line.
    pub fn line(&self) -> String {
        let mut line = String::with_capacity(self.label.len() + 1 + self.text.len());
        self.push_line(&mut line);
        line
    }

    /// [`Item::line`] appended to `out`.
    fn push_line(&self, out: &mut String) {
        out.push_str(&self.label);
        out.push(' ');
        out.push_str(&self.text);
    }

    /// Characters of [`Item::line`], without building it.
    fn line_chars(&self) -> usize {
        self.label.chars().count() + 1 + self.text.chars().count()
    }
}

/// The day of `at` as `%Y-%m-%d` prints it, without parsing that format
/// for every recalled item.
struct Day(DateTime<Utc>);

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let date = self.0.date_naive();
        let (year, month, day) = match u32::try_from(date.year()) {
            Ok(year) if year <= 9999 => (year, date.month(), date.day()),
            // chrono signs a year before 0 or of more than four digits.
            _ => return write!(f, "{}", date.format("%Y-%m-%d")),
        };
        let digit = |n: u32| b'0' + (n % 10) as u8;
        let text = [
            digit(year / 1000),
            digit(year / 100),
            digit(year / 10),
            digit(year),
            b'-',
            digit(month / 10),
            digit(month),
            b'-',
            digit(day / 10),
            digit(day),
        ];
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

/// Items that fit in `max_tokens`, and how many did not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recalled {
    /// Oldest first.
    pub items: Vec<Item>,
    /// Candidates left out for the budget.
    pub omitted: usize,
}

impl Recalled {
    /// The items as lines, plus a marker naming what was left out; `None`
    /// when nothing was recalled.
    pub fn render(&self) -> Option<String> {
        if self.items.is_empty() {
            return None;
        }
        let mut out = String::new();
        for item in &self.items {
            if !out.is_empty() {
                out.push('\n');
            }
            item.push_line(&mut out);
        }
        if self.omitted > 0 {
            out.push('\n');
            out.push_str(&omitted_marker(self.omitted));
        }
        Some(out)
    }

    /// Estimated tokens of [`Recalled::render`].
    pub fn estimated_tokens(&self) -> usize {
        self.render().map_or(0, |t| t.chars().count().div_ceil(4))
    }
}

fn omitted_marker(n: usize) -> String {
    format!("[{n} more recalled item{} did not fit]", if n == 1 { "" } else { "s" })
}

/// Takes items in priority order while they fit in `max_tokens` (the
/// marker for what is left out included). A text said again (the same
/// words, whatever the case and punctuation) takes one place, the best
/// ranked: ten "thinking about learning a language again" would leave no
/// room for the one that answers.
pub fn pack(candidates: Vec<Item>, max_tokens: usize) -> Recalled {
    let budget = max_tokens.saturating_mul(4);
    let reserve = omitted_marker(candidates.len()).chars().count() + 1;
    let mut used = 0usize;
    let mut out = Recalled::default();
    let mut said = std::collections::HashSet::new();
    for item in candidates {
        if !said.insert(super::plan::text_key(&item.text)) {
            continue;
        }
        let cost = item.line_chars() + 1;
        if used + cost + reserve <= budget {
            used += cost;
            out.items.push(item);
        } else {
            out.omitted += 1;
        }
    }
    if out.items.is_empty() {
        out.omitted = 0;
    }
    out.items.sort_by_key(|i| i.at);
    if out.omitted > 0 {
        tracing::info!(
            kept = out.items.len(),
            omitted = out.omitted,
            max_tokens,
            "recall over budget: items left out"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(day: u32, text: &str) -> Item {
        Item {
            at: chrono::NaiveDate::from_ymd_opt(2026, 3, day)
                .unwrap()
                .and_hms_opt(9, 0, 0)
                .unwrap()
                .and_utc(),
            label: format!("[2026-03-{day:02}, you]"),
            text: text.into(),
        }
    }

    #[test]
    fn packing_keeps_the_budget_shows_oldest_first_and_counts_the_rest() {
        let candidates = vec![
            item(5, &"a".repeat(200)),
            item(1, &"b".repeat(200)),
            item(3, &"c".repeat(200)),
        ];
        let recalled = pack(candidates, 130);
        assert_eq!(recalled.items.len(), 2);
        assert_eq!(recalled.omitted, 1);
        assert!(recalled.items[0].at < recalled.items[1].at);
        let text = recalled.render().unwrap();
        assert!(text.ends_with("[1 more recalled item did not fit]"));
        assert!(recalled.estimated_tokens() <= 130);
    }

    #[test]
    fn a_text_said_again_takes_one_place() {
        let candidates = vec![
            item(5, "Thinking about a language again."),
            item(3, "thinking about a language, again"),
            item(2, "I switched my lessons to Korean."),
            item(1, "Thinking about a language again."),
        ];
        let recalled = pack(candidates, 500);
        let texts: Vec<&str> = recalled.items.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(
            texts,
            ["I switched my lessons to Korean.", "Thinking about a language again."]
        );
        assert_eq!(recalled.items[1].at.day(), 5, "the best ranked stays");
        assert_eq!(recalled.omitted, 0, "a repeat is not left out for the budget");
    }

    #[test]
    fn a_day_prints_as_chrono_prints_it() {
        for (y, m, d) in [
            (2026, 3, 7),
            (1, 1, 1),
            (0, 12, 31),
            (9999, 12, 31),
            (10000, 1, 1),
            (-5, 6, 30),
        ] {
            let at = chrono::NaiveDate::from_ymd_opt(y, m, d)
                .unwrap()
                .and_hms_opt(23, 59, 59)
                .unwrap()
                .and_utc();
            assert_eq!(Day(at).to_string(), at.format("%Y-%m-%d").to_string(), "{y}-{m}-{d}");
        }
    }

    #[test]
    fn a_long_item_is_clipped_visibly() {
        assert!(clipped_line(&"x".repeat(700), ITEM_CHARS).ends_with("…[+100 chars]"));
    }
}
