//! The markdown body of a long-term profile as data: the four known sections
//! (`## Preferences`, `## Facts`, `## Ongoing topics`, `## Notes`) with their
//! `- key: value` bullets, and everything else (text before the first
//! heading, other headings, prose) kept verbatim so a hand-edited profile
//! loses nothing when facts are merged into it.
//!
//! Pure text: no file access. The visible cut marker and the one-line
//! cleaning of model output live here too, because topic notes use them.

use crate::summarizer::FactSection;

/// One live fact: what the profile shows, a bullet of a known section.
/// The fact log ([`crate::facts`]) records how each came and went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveFact {
    pub section: FactSection,
    pub key: String,
    pub value: String,
}

/// Sections in the order a new profile lists them.
const ORDER: [FactSection; 4] = [
    FactSection::Preferences,
    FactSection::Facts,
    FactSection::Topics,
    FactSection::Notes,
];

/// Longest key or value kept from the summarizer, in characters. A model
/// that rambles must not be able to fill the profile with one fact.
pub(crate) const MAX_FACT_CHARS: usize = 300;

/// Start of the marker line that says how many entries a cap dropped.
const CUT_PREFIX: &str = "> mnemo: ";
const CUT_MIDDLE: &str = " older entries dropped to stay under ";

pub(crate) fn heading(section: FactSection) -> &'static str {
    match section {
        FactSection::Preferences => "## Preferences",
        FactSection::Facts => "## Facts",
        FactSection::Topics => "## Ongoing topics",
        FactSection::Notes => "## Notes",
    }
}

fn section_of(heading_line: &str) -> Option<FactSection> {
    let title = heading_line.strip_prefix("## ")?.trim().to_lowercase();
    match title.as_str() {
        "preferences" => Some(FactSection::Preferences),
        "facts" => Some(FactSection::Facts),
        "ongoing topics" | "topics" => Some(FactSection::Topics),
        "notes" => Some(FactSection::Notes),
        _ => None,
    }
}

/// The marker line for `dropped` entries cut to stay under `max_chars`.
pub(crate) fn cut_marker(dropped: usize, max_chars: usize) -> String {
    format!("{CUT_PREFIX}{dropped}{CUT_MIDDLE}{max_chars} characters.")
}

/// The count in a marker line, if `line` is one.
pub(crate) fn parse_cut_marker(line: &str) -> Option<usize> {
    let rest = line.strip_prefix(CUT_PREFIX)?;
    let (count, tail) = rest.split_once(CUT_MIDDLE)?;
    tail.ends_with(" characters.").then_some(())?;
    count.parse().ok()
}

/// Model output made safe for one bullet line: whitespace (newlines too)
/// collapsed, other control characters (NUL, escapes) removed, trimmed,
/// clipped to [`MAX_FACT_CHARS`] with a visible `…`.
pub(crate) fn one_line(text: &str) -> String {
    let visible: String = text.chars().filter(|c| c.is_whitespace() || !c.is_control()).collect();
    let collapsed = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= MAX_FACT_CHARS {
        return collapsed;
    }
    let mut clipped: String = collapsed.chars().take(MAX_FACT_CHARS - 1).collect();
    clipped.push('…');
    clipped
}

/// `text` on one line (whitespace collapsed) and at most `max` characters,
/// with `…[+N chars]` naming what was cut.
///
/// One pass over `text` that copies only what is kept: recall clips every
/// candidate message of a turn, and a long one used to be collapsed and
/// copied whole first (~180k instructions a recall-on turn in the bench).
pub fn clipped_line(text: &str, max: usize) -> String {
    if is_collapsed_ascii(text) {
        // Already one line: a byte is a character, nothing to collapse.
        if text.len() <= max {
            return text.to_string();
        }
        return format!("{}…[+{} chars]", &text[..max], text.len() - max);
    }
    let mut line = String::with_capacity(text.len().min(max.saturating_mul(4)) + 16);
    // Characters of the whole collapsed line, and of it kept in `line`.
    let (mut total, mut kept) = (0usize, 0usize);
    for word in text.split_whitespace() {
        let chars = word.chars().count();
        let sep = usize::from(total > 0);
        if kept == total && kept < max {
            if sep == 1 {
                line.push(' ');
                kept += 1;
            }
            if kept + chars <= max {
                line.push_str(word);
                kept += chars;
            } else {
                let room = max - kept;
                line.extend(word.chars().take(room));
                kept += room;
            }
        }
        total += sep + chars;
    }
    if total > max {
        line.push_str(&format!("…[+{} chars]", total - max));
    }
    line
}

/// Whether `text` is ASCII already in the form [`clipped_line`] gives it:
/// no whitespace but single spaces between words. Most chat messages are,
/// and a scan of their bytes costs far less than splitting them into words.
fn is_collapsed_ascii(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.first() == Some(&b' ') || bytes.last() == Some(&b' ') {
        return false;
    }
    let mut previous = 0u8;
    for &byte in bytes {
        if !byte.is_ascii() || matches!(byte, b'\t' | b'\n' | 0x0b | 0x0c | b'\r') || (byte == b' ' && previous == b' ')
        {
            return false;
        }
        previous = byte;
    }
    true
}

/// How keys (and values) are compared: case-insensitive, spacing ignored.
pub(crate) fn normalized(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// For free-form bullet lists (topic notes, fallback summaries): drops the
/// first (oldest) `- ` lines until `body` fits `max_chars`, keeping one
/// marker line at the top with the running count of drops. Other lines are
/// never dropped.
pub(crate) fn cap_bullet_lines(body: &str, max_chars: usize) -> String {
    let mut dropped = 0;
    let mut lines: Vec<&str> = Vec::new();
    for line in body.lines() {
        match parse_cut_marker(line) {
            Some(n) => dropped += n,
            None => lines.push(line),
        }
    }
    let render = |lines: &[&str], dropped: usize| {
        let mut out = String::new();
        if dropped > 0 {
            out.push_str(&cut_marker(dropped, max_chars));
            out.push('\n');
        }
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
        out
    };
    let mut out = render(&lines, dropped);
    while out.chars().count() > max_chars {
        let Some(first) = lines.iter().position(|l| l.starts_with("- ")) else {
            break;
        };
        lines.remove(first);
        dropped += 1;
        out = render(&lines, dropped);
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// `- key: value`, with indented continuation lines kept with it so a
    /// cut drops them together.
    Bullet {
        key: String,
        value: String,
        continuation: Vec<String>,
    },
    Other(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    heading: String,
    kind: Option<FactSection>,
    lines: Vec<Line>,
}

/// What merging one fact did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Merged {
    Added,
    Replaced,
    Unchanged,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Body {
    preamble: Vec<String>,
    /// Entries dropped by caps so far (from the marker line).
    pub(crate) dropped: usize,
    sections: Vec<Section>,
}

impl Body {
    pub(crate) fn parse(text: &str) -> Body {
        let mut body = Body::default();
        for raw in text.lines() {
            let line = raw.trim_end();
            if let Some(n) = parse_cut_marker(line) {
                body.dropped += n;
                continue;
            }
            if line.starts_with("## ") {
                body.sections.push(Section {
                    heading: line.to_string(),
                    kind: section_of(line),
                    lines: Vec::new(),
                });
                continue;
            }
            let Some(section) = body.sections.last_mut() else {
                body.preamble.push(line.to_string());
                continue;
            };
            let is_continuation = !line.is_empty() && line.starts_with(char::is_whitespace);
            match (section.kind, section.lines.last_mut()) {
                (Some(_), Some(Line::Bullet { continuation, .. })) if is_continuation => {
                    continuation.push(line.to_string());
                }
                (Some(_), _) if line.starts_with("- ") || line.starts_with("* ") => {
                    let item = line[2..].trim();
                    let (key, value) = item.split_once(": ").unwrap_or((item, ""));
                    section.lines.push(Line::Bullet {
                        key: key.trim().to_string(),
                        value: value.trim().to_string(),
                        continuation: Vec::new(),
                    });
                }
                _ => section.lines.push(Line::Other(line.to_string())),
            }
        }
        body
    }

    /// The body as markdown; `max_chars` is only quoted in the cut marker.
    pub(crate) fn render(&self, max_chars: usize) -> String {
        let mut out = String::new();
        let preamble_end = self.preamble.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
        for line in &self.preamble[..preamble_end] {
            out.push_str(line);
            out.push('\n');
        }
        if self.dropped > 0 {
            push_paragraph_break(&mut out);
            out.push_str(&cut_marker(self.dropped, max_chars));
            out.push('\n');
        }
        for section in &self.sections {
            push_paragraph_break(&mut out);
            out.push_str(&section.heading);
            out.push('\n');
            let end = section
                .lines
                .iter()
                .rposition(|l| l != &Line::Other(String::new()))
                .map_or(0, |i| i + 1);
            for line in &section.lines[..end] {
                match line {
                    Line::Bullet {
                        key,
                        value,
                        continuation,
                    } => {
                        out.push_str("- ");
                        out.push_str(key);
                        if !value.is_empty() {
                            out.push_str(": ");
                            out.push_str(value);
                        }
                        out.push('\n');
                        for more in continuation {
                            out.push_str(more);
                            out.push('\n');
                        }
                    }
                    Line::Other(text) => {
                        out.push_str(text);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }

    /// Merges one fact: a bullet with the same key (case-insensitive) in the
    /// same section is replaced (and moves to the end, as the newest), an
    /// identical one is left alone, a new one is appended. `None` when the
    /// key is empty after cleaning.
    pub(crate) fn merge(&mut self, section: FactSection, key: &str, value: &str) -> Option<Merged> {
        // `: ` separates key from value on re-read, so it cannot stay in a key.
        let key = one_line(key).replace(": ", " - ");
        let key = key.trim_end_matches(':').trim().to_string();
        let value = one_line(value);
        if key.is_empty() {
            return None;
        }
        let wanted = normalized(&key);
        let lines = &mut self.section_mut(section).lines;
        let same_key = |l: &Line| matches!(l, Line::Bullet { key: k, .. } if normalized(k) == wanted);
        let existing: Vec<&Line> = lines.iter().filter(|l| same_key(l)).collect();
        if let [Line::Bullet { value: old, .. }] = existing.as_slice()
            && normalized(old) == normalized(&value)
        {
            return Some(Merged::Unchanged);
        }
        let replaced = !existing.is_empty();
        lines.retain(|l| !same_key(l));
        let at = lines
            .iter()
            .rposition(|l| l != &Line::Other(String::new()))
            .map_or(0, |i| i + 1);
        lines.insert(
            at,
            Line::Bullet {
                key,
                value,
                continuation: Vec::new(),
            },
        );
        Some(if replaced { Merged::Replaced } else { Merged::Added })
    }

    /// Drops the oldest bullets until the rendered body fits `max_chars`:
    /// each step removes the first (oldest) bullet of the known section that
    /// has the most, so no one section is wiped out while others stay full.
    /// Returns the bullets dropped this time (the fact log records them).
    /// Text that is not a bullet is never dropped, so a body of prose alone
    /// may stay over the cap.
    pub(crate) fn cap(&mut self, max_chars: usize) -> Vec<LiveFact> {
        let mut dropped_now = Vec::new();
        while self.render(max_chars).chars().count() > max_chars {
            let fullest = self
                .sections
                .iter_mut()
                .filter(|s| s.kind.is_some())
                .max_by_key(|s| s.lines.iter().filter(|l| matches!(l, Line::Bullet { .. })).count());
            let Some(section) = fullest else { break };
            let Some(first) = section.lines.iter().position(|l| matches!(l, Line::Bullet { .. })) else {
                break;
            };
            if let (Some(kind), Line::Bullet { key, value, .. }) = (section.kind, section.lines.remove(first)) {
                dropped_now.push(LiveFact {
                    section: kind,
                    key,
                    value,
                });
            }
            self.dropped += 1;
        }
        dropped_now
    }

    /// Every bullet of the known sections, as `(section, key, value)`.
    pub(crate) fn all_bullets(&self) -> Vec<(FactSection, &str, &str)> {
        self.sections
            .iter()
            .filter_map(|s| s.kind.map(|kind| (kind, &s.lines)))
            .flat_map(|(kind, lines)| {
                lines.iter().filter_map(move |l| match l {
                    Line::Bullet { key, value, .. } => Some((kind, key.as_str(), value.as_str())),
                    Line::Other(_) => None,
                })
            })
            .collect()
    }

    /// Removes every bullet (of a known section) whose key is one of `keys`
    /// (compared like [`Body::merge`] does); returns how many went.
    pub(crate) fn remove_keys(&mut self, keys: &[&str]) -> usize {
        let wanted: Vec<String> = keys.iter().map(|k| normalized(k)).collect();
        let mut removed = 0;
        for section in self.sections.iter_mut().filter(|s| s.kind.is_some()) {
            let before = section.lines.len();
            section
                .lines
                .retain(|l| !matches!(l, Line::Bullet { key, .. } if wanted.contains(&normalized(key))));
            removed += before - section.lines.len();
        }
        removed
    }

    /// Bullets of one section, as `(key, value)`.
    pub(crate) fn bullets(&self, section: FactSection) -> Vec<(&str, &str)> {
        self.sections
            .iter()
            .filter(|s| s.kind == Some(section))
            .flat_map(|s| &s.lines)
            .filter_map(|l| match l {
                Line::Bullet { key, value, .. } => Some((key.as_str(), value.as_str())),
                Line::Other(_) => None,
            })
            .collect()
    }

    /// The section's first block, created in canonical order if missing.
    fn section_mut(&mut self, kind: FactSection) -> &mut Section {
        if let Some(i) = self.sections.iter().position(|s| s.kind == Some(kind)) {
            return &mut self.sections[i];
        }
        let rank = |k: FactSection| ORDER.iter().position(|o| *o == k);
        let mine = rank(kind);
        let at = self
            .sections
            .iter()
            .position(|s| s.kind.and_then(rank) > mine)
            .unwrap_or(self.sections.len());
        self.sections.insert(
            at,
            Section {
                heading: heading(kind).to_string(),
                kind: Some(kind),
                lines: Vec::new(),
            },
        );
        &mut self.sections[at]
    }
}

fn push_paragraph_break(out: &mut String) {
    if !out.is_empty() {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `clipped_line` is: the collapsed line, cut to `max` characters.
    fn clipped_line_reference(text: &str, max: usize) -> String {
        let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let total = line.chars().count();
        if total <= max {
            return line;
        }
        let kept: String = line.chars().take(max).collect();
        format!("{kept}…[+{} chars]", total - max)
    }

    proptest::proptest! {
        #[test]
        fn clipped_line_is_the_collapsed_line_cut_to_max(
            text in "([ \t\n]{0,3}[a-zé日\u{1F600}]{0,6}){0,12}",
            max in 0usize..40,
        ) {
            proptest::prop_assert_eq!(clipped_line(&text, max), clipped_line_reference(&text, max));
        }

        /// Mostly texts that are already one ASCII line (the fast path),
        /// and the ASCII whitespace that is not.
        #[test]
        fn clipped_line_of_ascii_is_the_collapsed_line_cut_to_max(
            text in "[ \t\n\r\x0b\x0c]?([a-z.!?]{1,6}( | | | | |  |\n|\t|\x0b|\x0c|\r)?){0,12}",
            max in 0usize..60,
        ) {
            proptest::prop_assert_eq!(clipped_line(&text, max), clipped_line_reference(&text, max));
        }
    }

    const HAND_WRITTEN: &str = "Kevin's notes, kept by ops.\n\n## Preferences\n- Language: Traditional Chinese\n- Timezone: UTC+8\n  (moved in 2025)\n\n## Hobbies\n- chess: yes\n\n## Ongoing Topics\n- TOEIC 860 preparation\n";

    #[test]
    fn a_hand_written_profile_round_trips() {
        let body = Body::parse(HAND_WRITTEN);
        assert_eq!(body.render(4000), HAND_WRITTEN);
        assert_eq!(body.bullets(FactSection::Topics), vec![("TOEIC 860 preparation", "")]);
        assert_eq!(body.bullets(FactSection::Preferences)[1], ("Timezone", "UTC+8"));
    }

    #[test]
    fn merge_adds_replaces_and_skips_repeats() {
        let mut body = Body::parse(HAND_WRITTEN);
        assert_eq!(
            body.merge(FactSection::Preferences, "language", "traditional chinese"),
            Some(Merged::Unchanged)
        );
        assert_eq!(
            body.merge(FactSection::Preferences, "LANGUAGE", "English"),
            Some(Merged::Replaced)
        );
        assert_eq!(body.merge(FactSection::Facts, "job", "teacher"), Some(Merged::Added));
        assert_eq!(body.merge(FactSection::Facts, " \n ", "x"), None);
        let text = body.render(4000);
        assert!(!text.contains("Traditional Chinese"));
        assert!(
            text.contains("## Preferences\n- Timezone: UTC+8\n  (moved in 2025)\n- LANGUAGE: English\n"),
            "{text}"
        );
        // Facts comes after Preferences and before the unknown and later sections.
        assert!(text.find("## Facts").unwrap() > text.find("## Preferences").unwrap());
        assert!(text.find("## Facts").unwrap() < text.find("## Ongoing Topics").unwrap());
        assert!(text.contains("## Hobbies\n- chess: yes\n"));
    }

    #[test]
    fn model_output_cannot_break_the_bullet_format() {
        let mut body = Body::default();
        body.merge(
            FactSection::Notes,
            "a: b\nc",
            &format!("line1\nline2 {}", "x".repeat(1000)),
        );
        let text = body.render(100_000);
        let reread = Body::parse(&text);
        let bullets = reread.bullets(FactSection::Notes);
        assert_eq!(bullets.len(), 1);
        assert_eq!(bullets[0].0, "a - b c");
        assert!(bullets[0].1.starts_with("line1 line2 x") && bullets[0].1.ends_with('…'));
        assert_eq!(bullets[0].1.chars().count(), MAX_FACT_CHARS);
    }

    #[test]
    fn cap_drops_oldest_bullets_of_the_fullest_section_and_says_so() {
        let mut body = Body::default();
        for i in 0..30 {
            body.merge(FactSection::Facts, &format!("fact{i:02}"), "some value here");
        }
        body.merge(FactSection::Preferences, "language", "English");
        let dropped = body.cap(400).len();
        let text = body.render(400);
        assert!(dropped > 0 && text.chars().count() <= 400, "{text}");
        assert!(text.starts_with(&cut_marker(dropped, 400)));
        assert!(!text.contains("fact00") && text.contains("fact29") && text.contains("language: English"));
        // The count accumulates over later cuts.
        let mut again = Body::parse(&text);
        again.merge(FactSection::Facts, "fact30", "some value here");
        let more = again.cap(400).len();
        assert_eq!(Body::parse(&again.render(400)).dropped, dropped + more);
    }

    #[test]
    fn cap_never_drops_prose() {
        let mut body = Body::parse(&format!("{}\n## Notes\n- a: b\n", "p".repeat(50)));
        assert_eq!(body.cap(10).len(), 1);
        assert!(body.render(10).starts_with(&"p".repeat(50)));
    }
}
