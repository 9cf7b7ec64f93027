//! Splitting a long reply into messages that fit a platform's limit, at the
//! most natural boundary available: paragraph, then line, then word, and
//! only as a last resort inside a word (never inside a UTF-8 character).
//! Limits are counted in `char`s, as the platforms count them.

/// Splits `text` into chunks of at most `limit` characters. Whitespace at a
/// split point is dropped; nothing else is. An empty text gives no chunks.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let mut chunks = Vec::new();
    let mut rest = text.trim_end();
    while !rest.is_empty() {
        if rest.chars().count() <= limit {
            chunks.push(rest.to_string());
            break;
        }
        // Byte offset just past `limit` characters.
        let hard = rest.char_indices().nth(limit).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..hard];
        let cut = best_cut(window).unwrap_or(hard);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        if !head.is_empty() {
            chunks.push(head.to_string());
        }
        rest = tail.trim_start();
    }
    chunks
}

/// The last paragraph break, else line break, else space in `window`, as a
/// byte offset where the next chunk starts; `None` when the window has none
/// (or only at its very start, which would make no progress). Shared by the
/// adapters that split with extra rules of their own (Discord's fences).
pub fn best_cut(window: &str) -> Option<usize> {
    ["\n\n", "\n", " "]
        .iter()
        .find_map(|sep| window.rfind(sep).filter(|&i| i > 0).map(|i| i + sep.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_one_chunk() {
        assert_eq!(split("hello", 10), vec!["hello"]);
        assert!(split("   ", 10).is_empty());
    }

    #[test]
    fn prefers_paragraph_then_line_then_word() {
        let text = "aaaa bbbb\ncccc\n\ndddd";
        assert_eq!(split(text, 16), vec!["aaaa bbbb\ncccc", "dddd"]);
        assert_eq!(split("aaaa bbbb\ncccc dddd", 12), vec!["aaaa bbbb", "cccc dddd"]);
        assert_eq!(split("aaaa bbbb cccc", 10), vec!["aaaa bbbb", "cccc"]);
    }

    #[test]
    fn a_word_longer_than_the_limit_is_cut_on_char_boundaries() {
        assert_eq!(split("ééééé", 2), vec!["éé", "éé", "é"]);
    }

    proptest! {
        #[test]
        fn chunks_fit_and_keep_every_non_space_char(text in "[a-zé \n]{0,400}", limit in 1usize..60) {
            let chunks = split(&text, limit);
            for c in &chunks {
                prop_assert!(c.chars().count() <= limit);
                prop_assert!(!c.is_empty());
            }
            let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(strip(&chunks.concat()), strip(&text));
        }
    }
}
