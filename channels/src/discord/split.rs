//! Splitting a Discord reply under the message limit without breaking a code
//! block: like [`crate::chunk::split`] it cuts at the last paragraph, then
//! line, then word boundary that fits, but it also knows whether the cut falls
//! inside a ``` fence. If it does, the chunk is closed with a fence and the
//! next one reopens it with the same language, so every message renders on its
//! own. Pure text work: no network, no formatting decisions.

/// A fence as Discord recognises it.
const FENCE: &str = "```";
/// What ends a chunk that stops inside a code block.
const CLOSE: &str = "\n```";
/// The longest language tag carried over when a fence is reopened; anything
/// longer is not a language tag, so the fence reopens bare.
const MAX_LANG_CHARS: usize = 20;
/// The smallest limit that leaves room to reopen (``` + tag + newline) and
/// close (newline + ```) a fence around at least one character.
pub const MIN_LIMIT: usize = 32;

/// Splits `text` into chunks of at most `limit` characters (raised to
/// [`MIN_LIMIT`]), each with balanced code fences when the input's are.
/// Whitespace at a split point outside code is dropped; indentation inside
/// code is kept. An empty text gives no chunks.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(MIN_LIMIT);
    let mut chunks = Vec::new();
    // The fence opener a chunk starts inside of (carried from the previous one).
    let mut open: Option<String> = None;
    let mut rest = text.trim();
    while !rest.is_empty() {
        let prefix = open.as_ref().map(|o| format!("{o}\n")).unwrap_or_default();
        let prefix_chars = prefix.chars().count();
        if prefix_chars + rest.chars().count() <= limit {
            chunks.push(prefix + rest);
            break;
        }
        // Always keep room to close a fence, even if the cut ends up outside one.
        let room = limit - prefix_chars - CLOSE.len();
        let hard = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
        let mut cut = crate::chunk::best_cut(&rest[..hard]).unwrap_or(hard);
        let mut head = rest[..cut].trim_end();
        let mut after = fence_after(open.clone(), head);
        // A chunk that would end on the very line opening a fence leaves that
        // line to the next chunk instead of sending an empty code block.
        if after.is_some()
            && let Some(start) = head.rfind('\n').map(|i| i + 1)
            && fence_after(open.clone(), &head[..start]).is_none()
            && !head[..start].trim().is_empty()
        {
            cut = start;
            head = head[..start].trim_end();
            after = None;
        }
        let mut chunk = prefix + head;
        rest = &rest[cut..];
        if after.is_some() {
            chunk.push_str(CLOSE);
            // The text's own closing fence is the next line: it is the one just
            // written, so the next chunk starts after it, outside the block.
            let next = rest.trim_start_matches('\n');
            let (line, tail) = next.split_once('\n').unwrap_or((next, ""));
            if line.trim() == FENCE {
                rest = tail;
                after = None;
            }
        }
        // Only blank space before the cut (the text's own spacing): nothing to send.
        if !head.trim().is_empty() || open.is_some() || after.is_some() {
            chunks.push(chunk);
        }
        open = after;
        rest = rest.trim_start_matches('\n');
        if open.is_none() {
            rest = rest.trim_start();
        }
    }
    chunks
}

/// The fence still open after `text`, given the one open before it. Discord
/// pairs ``` marks, so a line with an odd number of them toggles the state.
fn fence_after(mut open: Option<String>, text: &str) -> Option<String> {
    for line in text.lines() {
        if !line.matches(FENCE).count().is_multiple_of(2) {
            open = match open {
                Some(_) => None,
                None => Some(opener(line)),
            };
        }
    }
    open
}

/// How to reopen the fence that `line` opened: ``` plus its language tag when
/// it has one that looks like a language (`rust`, `c++`, `objective-c`).
fn opener(line: &str) -> String {
    let tag = line.rsplit(FENCE).next().unwrap_or("").trim();
    let is_lang =
        tag.chars().count() <= MAX_LANG_CHARS && tag.chars().all(|c| c.is_alphanumeric() || "+-#_.".contains(c));
    if is_lang {
        format!("{FENCE}{tag}")
    } else {
        FENCE.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fences_balanced(chunk: &str) -> bool {
        chunk.matches(FENCE).count().is_multiple_of(2)
    }

    #[test]
    fn short_text_is_one_chunk_as_written() {
        let text = "Hello\n\n```rust\nfn main() {}\n```";
        assert_eq!(split(text, 2000), vec![text]);
        assert!(split(" \n ", 2000).is_empty());
    }

    #[test]
    fn prose_prefers_paragraph_then_line_then_word() {
        let text = "aaaa bbbb\ncccc\n\ndddd eeee ffff gggg hhhh iiii jjjj kkkk";
        let chunks = split(text, 40);
        assert_eq!(chunks[0], "aaaa bbbb\ncccc");
        assert!(chunks.iter().all(|c| c.chars().count() <= 40));
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
        // The cut falls just before the closing fence: it fits in the room
        // kept for a close, so it is used instead of an added one.
        let text = "```\nabcdefgh\nabcdefgh\nabcd\n```\nafter the block";
        assert_eq!(
            split(text, 32),
            vec!["```\nabcdefgh\nabcdefgh\nabcd\n```", "after the block"]
        );
    }

    #[test]
    fn long_language_tags_reopen_as_a_bare_fence() {
        assert_eq!(opener("```rust"), "```rust");
        assert_eq!(opener("```objective-c"), "```objective-c");
        assert_eq!(opener("``` this is not a language"), "```");
    }

    /// Prose paragraphs and ```py blocks, in any order.
    fn markdown() -> impl Strategy<Value = String> {
        let prose = "[a-eé ]{1,80}(\n[a-eé ]{1,40}){0,3}";
        let code = "(  [a-e]{0,30}\n){1,12}".prop_map(|c| format!("```py\n{c}```"));
        prop::collection::vec(prop_oneof![prose.prop_map(String::from), code], 0..8).prop_map(|b| b.join("\n\n"))
    }

    proptest! {
        #[test]
        fn chunks_fit_balance_fences_and_keep_the_text(text in markdown(), limit in MIN_LIMIT..120) {
            let chunks = split(&text, limit);
            for c in &chunks {
                prop_assert!(c.chars().count() <= limit, "too long: {c:?}");
                prop_assert!(fences_balanced(c), "unbalanced: {c:?}");
                prop_assert!(!c.trim().is_empty());
            }
            let content = |s: &str| s.replace("```py", "").replace(FENCE, "").chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(content(&chunks.concat()), content(&text));
        }
    }
}
