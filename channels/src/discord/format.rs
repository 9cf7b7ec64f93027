//! The model's markdown as Discord markdown. Discord renders most of it as is
//! (bold, italics, strikethrough, inline code, fences, quotes, lists, masked
//! links, `#`–`###` headings); this module rewrites only what Discord would
//! show as raw symbols: deeper headings, horizontal rules and tables. Code
//! blocks pass through untouched. Pure text work: no splitting, no network.

/// Rewrites `markdown` for Discord.
pub fn to_discord(markdown: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut in_code = false;
    let mut table: Vec<&str> = Vec::new();
    for line in markdown.lines() {
        if !in_code && is_table_row(line) {
            table.push(line);
            continue;
        }
        flush_table(&mut table, &mut out);
        if !line.matches("```").count().is_multiple_of(2) {
            in_code = !in_code;
            out.push(line.to_string());
        } else if in_code {
            out.push(line.to_string());
        } else if is_rule(line) {
            out.push(String::new());
        } else {
            out.push(deep_heading_as_bold(line).unwrap_or_else(|| line.to_string()));
        }
    }
    flush_table(&mut table, &mut out);
    out.join("\n")
}

/// A markdown table row: Discord has no tables, so they go in a code block
/// where their columns at least line up in a monospace font.
fn is_table_row(line: &str) -> bool {
    let t = line.trim();
    t.len() > 1 && t.starts_with('|') && t.ends_with('|')
}

fn flush_table(table: &mut Vec<&str>, out: &mut Vec<String>) {
    if table.is_empty() {
        return;
    }
    out.push("```".to_string());
    out.extend(table.drain(..).map(str::to_string));
    out.push("```".to_string());
}

/// `---`, `***`, `___` (three or more, spaces allowed) on a line of their own.
fn is_rule(line: &str) -> bool {
    let t: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3 && ["-", "*", "_"].iter().any(|m| t.chars().all(|c| c.to_string() == *m))
}

/// `#### Title` (levels 4–6, which Discord leaves raw) as `**Title**`.
fn deep_heading_as_bold(line: &str) -> Option<String> {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    let title = line[hashes..].strip_prefix(' ')?.trim();
    ((4..=6).contains(&hashes) && !title.is_empty()).then(|| format!("**{title}**"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_discord_renders_passes_through() {
        let md = "# Title\n**bold** _it_ ~~no~~ `x`\n> quote\n- item\n[link](https://example.org)";
        assert_eq!(to_discord(md), md);
    }

    #[test]
    fn deep_headings_become_bold_and_rules_disappear() {
        assert_eq!(to_discord("#### Notes\ntext\n---\nmore"), "**Notes**\ntext\n\nmore");
        assert_eq!(to_discord("#hashtag"), "#hashtag");
    }

    #[test]
    fn tables_go_in_a_code_block() {
        let md = "Scores:\n| a | b |\n|---|---|\n| 1 | 2 |\nend";
        assert_eq!(
            to_discord(md),
            "Scores:\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\nend"
        );
    }

    #[test]
    fn code_blocks_are_left_alone() {
        let md = "```md\n#### not a heading\n---\n| not | a table |\n```";
        assert_eq!(to_discord(md), md);
    }
}
