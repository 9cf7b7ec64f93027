//! The model's markdown → Slack mrkdwn, and the split into messages that fit
//! Slack's limit *after* conversion. Pure text work: no network, no state.
//!
//! Slack's rules: `&`, `<`, `>` must be escaped everywhere (they start
//! entities, links and mentions); bold is `*b*`, italic `_i_`, strike `~s~`,
//! links `<url|text>`; there are no headings, so they become bold lines;
//! fenced code keeps its fences but loses the language tag Slack would show.

use crate::chunk;

/// Slack recommends at most 4,000 characters per message (DESIGN §6).
pub const SLACK_MAX_CHARS: usize = 4_000;

/// Room kept under the limit for the fence a split code block needs to be
/// closed and reopened (`"\n```"` and `"```\n"`).
const FENCE_ROOM: usize = 8;

/// Converts markdown to mrkdwn and splits it into messages of at most
/// `limit` characters, at paragraph, line, then word boundaries. A code block
/// cut in two is closed at the end of one message and reopened in the next,
/// so both render as code.
pub fn to_messages(markdown: &str, limit: usize) -> Vec<String> {
    let converted = to_mrkdwn(markdown);
    let mut out = Vec::new();
    let mut carry_fence = false;
    for piece in chunk::split(&converted, limit.saturating_sub(FENCE_ROOM).max(1)) {
        let mut message = if carry_fence { format!("```\n{piece}") } else { piece };
        let open = message.matches("```").count() % 2 == 1;
        if open {
            message.push_str("\n```");
        }
        carry_fence = open;
        out.push(message);
    }
    out
}

/// Converts the model's markdown to Slack mrkdwn.
pub fn to_mrkdwn(markdown: &str) -> String {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            // The language tag after an opening fence would show as text.
            out.push("```".to_string());
            in_code = !in_code;
        } else if in_code {
            out.push(escape(line));
        } else {
            out.push(block_line(line));
        }
    }
    out.join("\n")
}

/// One line outside code: headings, bullets, quotes and rules, then inline.
fn block_line(line: &str) -> String {
    let indent_len = line.len() - line.trim_start().len();
    let (indent, body) = line.split_at(indent_len);
    if let Some(text) = heading(body) {
        return format!("{indent}*{}*", inline(text));
    }
    if is_rule(body) {
        return "──────────".to_string();
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = body.strip_prefix(bullet) {
            return format!("{indent}• {}", inline(rest));
        }
    }
    if let Some(rest) = body.strip_prefix('>') {
        // A literal `>` at line start is Slack's quote; escaping it would not be.
        return format!("{indent}> {}", inline(rest.trim_start()));
    }
    format!("{indent}{}", inline(body))
}

fn heading(body: &str) -> Option<&str> {
    let hashes = body.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = body[hashes..].strip_prefix(' ')?;
    Some(rest.trim().trim_end_matches('#').trim_end())
}

fn is_rule(body: &str) -> bool {
    let t = body.trim();
    t.len() >= 3 && ["-", "*", "_"].iter().any(|c| t.chars().all(|x| x.to_string() == *c))
}

/// Escapes the three characters Slack treats as markup.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Inline markup: code spans (verbatim), links, bold, italic, strike.
fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if let Some((text, used)) = code_span(rest)
            .or_else(|| link(rest))
            .or_else(|| autolink(rest))
            .or_else(|| emphasis(rest, i == 0 || !prev_is_word(s, i)))
        {
            out.push_str(&text);
            i += used;
            continue;
        }
        // Not markup: escape one character and move on (`rest` is non-empty).
        let c = rest.chars().next().unwrap_or(' ');
        out.push_str(&escape(c.encode_utf8(&mut [0; 4])));
        i += c.len_utf8();
    }
    out
}

fn prev_is_word(s: &str, i: usize) -> bool {
    s[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric())
}

/// `` `code` `` kept as is (escaped), so nothing inside is reformatted.
fn code_span(rest: &str) -> Option<(String, usize)> {
    let inner = rest.strip_prefix('`')?;
    let end = inner.find('`')?;
    Some((format!("`{}`", escape(&inner[..end])), end + 2))
}

/// `[text](url)` and `![alt](url)` → `<url|text>`.
fn link(rest: &str) -> Option<(String, usize)> {
    let (bang, body) = match rest.strip_prefix("![") {
        Some(b) => (1, b),
        None => (0, rest.strip_prefix('[')?),
    };
    let close = body.find("](")?;
    let text = &body[..close];
    let after = &body[close + 2..];
    let end = after.find(')')?;
    let url = after[..end].trim();
    if url.is_empty() || url.contains(char::is_whitespace) || text.contains('\n') {
        return None;
    }
    let label = escape(text).replace('|', "¦");
    let used = bang + 1 + close + 2 + end + 1;
    if label.is_empty() {
        return Some((format!("<{}>", escape(url)), used));
    }
    Some((format!("<{}|{label}>", escape(url)), used))
}

/// `<https://…>` (a markdown autolink) stays a Slack link.
fn autolink(rest: &str) -> Option<(String, usize)> {
    let inner = rest.strip_prefix('<')?;
    if !(inner.starts_with("http://") || inner.starts_with("https://") || inner.starts_with("mailto:")) {
        return None;
    }
    let end = inner.find('>')?;
    let url = &inner[..end];
    if url.contains(char::is_whitespace) {
        return None;
    }
    Some((format!("<{}>", escape(url)), end + 2))
}

/// `**b**`/`__b__` → `*b*`, `*i*`/`_i_` → `_i_`, `~~s~~` → `~s~`. A
/// delimiter counts only when it hugs text (`2 * 3 * 4` is not italic) and,
/// for `_`, not inside a word (`snake_case_name` stays as it is).
fn emphasis(rest: &str, at_word_start: bool) -> Option<(String, usize)> {
    const KINDS: [(&str, &str); 5] = [("**", "*"), ("__", "*"), ("~~", "~"), ("*", "_"), ("_", "_")];
    for (delim, slack) in KINDS {
        let Some(body) = rest.strip_prefix(delim) else { continue };
        if delim.starts_with('_') && !at_word_start {
            continue;
        }
        if body.starts_with(char::is_whitespace) || body.starts_with(delim) {
            continue;
        }
        let Some(end) = closing(body, delim) else { continue };
        let inner = &body[..end];
        return Some((format!("{slack}{}{slack}", inline(inner)), delim.len() * 2 + end));
    }
    None
}

/// Where the closing `delim` of an emphasis starts in `body`, if it closes
/// on this line after non-space text and (for `_`) not inside a word.
fn closing(body: &str, delim: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(pos) = body[from..].find(delim).map(|p| p + from) {
        let before = body[..pos].chars().next_back();
        let after = body[pos + delim.len()..].chars().next();
        let hugs = before.is_some_and(|c| !c.is_whitespace());
        let single_not_double = delim.len() == 2 || after != delim.chars().next();
        let word_ok = !delim.starts_with('_') || !after.is_some_and(|c| c.is_alphanumeric());
        if body[..pos].contains('\n') {
            return None;
        }
        if hugs && single_not_double && word_ok && pos > 0 {
            return Some(pos);
        }
        from = pos + delim.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bold_italic_and_strike_use_slack_delimiters() {
        assert_eq!(to_mrkdwn("**bold** and __also__"), "*bold* and *also*");
        assert_eq!(to_mrkdwn("*it* and _it_"), "_it_ and _it_");
        assert_eq!(to_mrkdwn("~~gone~~"), "~gone~");
        assert_eq!(to_mrkdwn("**a *b* c**"), "*a _b_ c*");
    }

    #[test]
    fn arithmetic_and_snake_case_are_left_alone() {
        assert_eq!(to_mrkdwn("2 * 3 * 4"), "2 * 3 * 4");
        assert_eq!(to_mrkdwn("call my_var_name now"), "call my_var_name now");
    }

    #[test]
    fn links_become_angle_links_with_escaped_parts() {
        assert_eq!(
            to_mrkdwn("see [the docs](https://x.io/a?b=1&c=2)"),
            "see <https://x.io/a?b=1&amp;c=2|the docs>"
        );
        assert_eq!(to_mrkdwn("<https://x.io>"), "<https://x.io>");
        assert_eq!(to_mrkdwn("![chart](https://x.io/c.png)"), "<https://x.io/c.png|chart>");
    }

    #[test]
    fn markup_characters_are_escaped_so_they_cannot_ping_or_link() {
        assert_eq!(
            to_mrkdwn("a < b && c > d <!channel>"),
            "a &lt; b &amp;&amp; c &gt; d &lt;!channel&gt;"
        );
    }

    #[test]
    fn code_is_kept_verbatim_but_escaped() {
        assert_eq!(to_mrkdwn("use `a **b** <c>`"), "use `a **b** &lt;c&gt;`");
        let md = "```rust\nlet x = **y** < 3;\n```";
        assert_eq!(to_mrkdwn(md), "```\nlet x = **y** &lt; 3;\n```");
    }

    #[test]
    fn headings_bullets_quotes_and_rules_have_slack_forms() {
        assert_eq!(to_mrkdwn("## Plan ##"), "*Plan*");
        assert_eq!(to_mrkdwn("- one\n  * two"), "• one\n  • two");
        assert_eq!(to_mrkdwn("> quoted **x**"), "> quoted *x*");
        assert_eq!(to_mrkdwn("---"), "──────────");
    }

    #[test]
    fn long_replies_split_under_the_limit_after_escaping() {
        // 3,000 `<` become 12,000 characters once escaped.
        let md = "<".repeat(3_000);
        let messages = to_messages(&md, SLACK_MAX_CHARS);
        assert!(messages.len() >= 3);
        assert!(messages.iter().all(|m| m.chars().count() <= SLACK_MAX_CHARS));
        assert!(messages.iter().all(|m| !m.contains('<')));
    }

    #[test]
    fn a_code_block_cut_in_two_is_closed_and_reopened() {
        let body = (0..400).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        let messages = to_messages(&format!("```\n{body}\n```"), 1_000);
        assert!(messages.len() > 1);
        for m in &messages {
            assert_eq!(m.matches("```").count(), 2, "each message is a whole code block: {m:?}");
        }
    }

    proptest! {
        #[test]
        fn messages_fit_and_never_carry_a_raw_opening_angle_bracket(text in "[a-z<>&*_` \n]{0,600}", limit in 20usize..200) {
            for m in to_messages(&text, limit) {
                prop_assert!(m.chars().count() <= limit);
                prop_assert!(!m.contains('<'), "raw < in {:?}", m);
            }
        }
    }
}
