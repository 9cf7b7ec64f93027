//! The one splitter: a [`Doc`] laid out for one platform and cut into
//! messages under a limit. Cuts are made on the styled text, never on the
//! rendered string, so a cut can never fall inside a tag, an entity or an
//! escape; each message is rendered on its own, closing at its end what is
//! open and reopening it at the start of the next, so every message is
//! valid alone. A cut prefers, within the last half of what fits: a
//! paragraph break, then a line break outside any formatting, then any line
//! break (inside a code block), then a space outside formatting, then any
//! space; only a single word longer than a message is cut inside. Where a
//! single character does not fit with its styles' tags (a link whose
//! address alone is longer than a message), that message goes as its text
//! alone, escaped and untagged: nothing visible is lost and no message is
//! over the limit.
//!
//! Streaming (a reply that grows) uses [`Layout::next_chunk`]: it renders
//! the text from a position and says where the next message must start when
//! the rest does not fit, so the current message can be closed at a clean
//! boundary and the stream continued in a new one. Pure: no I/O.

use super::{Chunk, Doc, Markup, Style, shown};

/// A document laid out for one platform: each character with the styles it
/// shows there.
pub struct Layout<'m, M: Markup> {
    markup: &'m M,
    chars: Vec<char>,
    /// Index into `stacks` for each character.
    style_of: Vec<usize>,
    stacks: Vec<Vec<Style>>,
}

impl<'m, M: Markup> Layout<'m, M> {
    pub fn new(markup: &'m M, doc: &Doc) -> Self {
        let mut layout = Layout {
            markup,
            chars: Vec::new(),
            style_of: Vec::new(),
            stacks: Vec::new(),
        };
        for run in &doc.runs {
            let styles = shown(markup, &run.styles);
            // A line break ends every style that cannot span lines (and what
            // is nested in it).
            let spanning = styles.iter().take_while(|s| markup.spans_lines(s)).count();
            let line_break = styles[..spanning].to_vec();
            layout.stacks.push(styles);
            layout.stacks.push(line_break);
            let (inline, newline) = (layout.stacks.len() - 2, layout.stacks.len() - 1);
            for c in run.text.chars() {
                layout.chars.push(c);
                layout.style_of.push(if c == '\n' { newline } else { inline });
            }
        }
        layout
    }

    /// The number of characters laid out (positions for [`Self::next_chunk`]).
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The whole document as messages of at most `limit` units each.
    pub fn chunks(&self, limit: usize) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        let mut start = 0;
        while let Some((chunk, next)) = self.next_chunk(start, limit) {
            chunks.push(chunk);
            start = next;
        }
        chunks
    }

    /// The message that starts at character `start` (leading blanks
    /// skipped), at most `limit` units long, and where the next one starts
    /// (`self.len()` when this one holds the rest). `None` when only blanks
    /// remain. A message always holds at least one character, so a caller
    /// looping on it always makes progress.
    pub fn next_chunk(&self, start: usize, limit: usize) -> Option<(Chunk, usize)> {
        let start = self.skip_blank(start);
        if start >= self.chars.len() {
            return None;
        }
        if let Some(rest) = self.rest_if_it_fits(start, limit) {
            return Some((rest, self.chars.len()));
        }
        // Where even one character does not fit with its styles' tags (a
        // link whose address alone is longer than a message), the message
        // goes without the tags: the text stays whole and under the limit.
        let bare = self.size(start, start + 1, true) > limit;
        let hard = self.fit(start, limit, bare);
        let cut = if hard == self.chars.len() {
            hard
        } else {
            self.boundary(start, hard).unwrap_or(hard)
        };
        let end = self.trim_end(start, cut).max(start + 1);
        Some((self.render(start, end, !bare), cut))
    }

    /// Everything from `start` on as one message, if it fits in `limit`:
    /// what the search below would find, with one rendering instead of
    /// three (most replies are one message). Rendered size only grows with
    /// the end, so when the rest fits styled, so does its first character
    /// (the message keeps its tags) and the search's first probe, the whole
    /// rest, is its answer. Each character costs at least one unit, so a
    /// rest longer than `limit` characters is not rendered at all.
    fn rest_if_it_fits(&self, start: usize, limit: usize) -> Option<Chunk> {
        let len = self.chars.len();
        if len - start > limit {
            return None;
        }
        let rest = self.render(start, len, true);
        if self.markup.measure(&rest.text) > limit {
            return None;
        }
        let end = self.trim_end(start, len).max(start + 1);
        Some(if end == len {
            rest
        } else {
            self.render(start, end, true)
        })
    }

    /// The whole document as one message, whatever its length.
    pub fn render_all(&self) -> Chunk {
        let start = self.skip_blank(0);
        let end = self.trim_end(start, self.chars.len());
        self.render(start, end.max(start).min(self.chars.len()), true)
    }

    fn styles(&self, at: usize) -> &[Style] {
        &self.stacks[self.style_of[at]]
    }

    fn in_pre(&self, at: usize) -> bool {
        self.styles(at).iter().any(|s| matches!(s, Style::Pre { .. }))
    }

    /// Past the blanks at a cut, except the indentation of a code line.
    fn skip_blank(&self, mut at: usize) -> usize {
        while at < self.chars.len() && self.chars[at].is_whitespace() && (self.chars[at] == '\n' || !self.in_pre(at)) {
            at += 1;
        }
        at
    }

    fn trim_end(&self, start: usize, mut end: usize) -> usize {
        while end > start && self.chars[end - 1].is_whitespace() {
            end -= 1;
        }
        end
    }

    /// The largest `end` such that `start..end` renders within `limit`
    /// (at least `start + 1`). Every character costs at least one unit, so
    /// the answer lies within `limit` characters; rendered size only grows
    /// with `end`, so a binary search finds it.
    fn fit(&self, start: usize, limit: usize, bare: bool) -> usize {
        let (mut lo, mut hi) = (start + 1, self.chars.len().min(start + limit.max(1)));
        if self.size(start, hi, !bare) <= limit {
            return hi;
        }
        // Invariant: `lo` fits (or is the minimum), `hi` does not.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.size(start, mid, !bare) <= limit {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn size(&self, start: usize, end: usize, styled: bool) -> usize {
        self.markup.measure(&self.render(start, end, styled).text)
    }

    /// The best place in `start+1..=hard` to end a message (see the module
    /// doc for the order), as the position where the next one starts.
    fn boundary(&self, start: usize, hard: usize) -> Option<usize> {
        let is = |i: usize, c: char| self.chars.get(i) == Some(&c);
        let clean = |i: usize| self.styles(i).is_empty() && (i == 0 || self.styles(i - 1).is_empty());
        let space = |i: usize| self.chars.get(i).is_some_and(|c| c.is_whitespace());
        let kinds: [&dyn Fn(usize) -> bool; 5] = [
            &|i| is(i, '\n') && is(i + 1, '\n') && clean(i),
            &|i| is(i, '\n') && clean(i),
            &|i| is(i, '\n'),
            &|i| space(i) && clean(i),
            &|i| space(i),
        ];
        let half = start + (hard - start) / 2;
        let last = |from: usize, kind: &dyn Fn(usize) -> bool| (from..=hard).rev().find(|&i| i < self.len() && kind(i));
        kinds
            .iter()
            .find_map(|kind| last(half.max(start + 1), kind))
            .or_else(|| kinds.iter().find_map(|kind| last(start + 1, kind)))
    }

    /// `start..end` as one self-contained message; without `styled`, as
    /// its text alone (escaped, no tags).
    fn render(&self, start: usize, end: usize, styled: bool) -> Chunk {
        let m = self.markup;
        let mut text = String::new();
        let mut plain = String::new();
        let mut open: &[Style] = &[];
        let mut line_start = true;
        for at in start..end {
            let styles: &[Style] = if styled { self.styles(at) } else { &[] };
            let keep = common_prefix(open, styles);
            open[keep..].iter().rev().for_each(|s| text.push_str(&m.close(s)));
            if line_start {
                text.push_str(m.line_prefix(styles));
            }
            styles[keep..].iter().for_each(|s| text.push_str(&m.open(s)));
            let c = self.chars[at];
            m.escape(c, styles, line_start, &mut text);
            plain.push(c);
            open = styles;
            line_start = c == '\n';
        }
        open.iter().rev().for_each(|s| text.push_str(&m.close(s)));
        Chunk { text, plain }
    }
}

fn common_prefix(a: &[Style], b: &[Style]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
