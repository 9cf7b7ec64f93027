//! Recall on Postgres: the turn's message as a full-text query over the
//! user's stored messages (`tsvector`, English stems and stop words, the
//! same language rules as the file store's index), scoped to the user in
//! the statement itself ([`crate::PgTurn::recall`]).
//!
//! Embeddings (pgvector) are not searched by this version of the store:
//! [`crate::PgStore::vectors`] reports what the server offers, and a
//! channel with `recall.embeddings` set is told at start that full text
//! carries recall alone.

/// Distinct words a query keeps (the first ones), as the file store.
const MAX_TERMS: usize = 64;
/// Longer runs of letters are cut, as the file store's tokenizer does.
const MAX_TERM_CHARS: usize = 32;

/// `message` as a `to_tsquery` text: its distinct words (letters and
/// digits only, lowercased, cut at 32 characters, at most 64) joined with
/// `|`, so any of them matches and the rank orders. Nothing but letters,
/// digits and `|` reaches the query parser, so no input can change the
/// query's shape. `None` when the message has no word.
pub fn tsquery(message: &str) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for word in message.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let word: String = word.chars().take(MAX_TERM_CHARS).flat_map(char::to_lowercase).collect();
        if !words.contains(&word) {
            words.push(word);
            if words.len() == MAX_TERMS {
                break;
            }
        }
    }
    (!words.is_empty()).then(|| words.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_its_distinct_words_or_ed() {
        assert_eq!(
            tsquery("Where is Dr. Okafor's office?").as_deref(),
            Some("where | is | dr | okafor | s | office")
        );
        assert_eq!(tsquery("a A a").as_deref(), Some("a"));
        assert_eq!(tsquery("?! -- ...").as_deref(), None);
    }

    #[test]
    fn query_syntax_in_a_message_is_only_words() {
        let q = tsquery("x' & !y | (z:*) <-> 'w'\0").unwrap();
        assert!(q.chars().all(|c| c.is_alphanumeric() || c == ' ' || c == '|'), "{q}");
        assert_eq!(q, "x | y | z | w");
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        let long = "b".repeat(10_000);
        assert_eq!(tsquery(&long).unwrap().chars().count(), MAX_TERM_CHARS);
        let many: String = (0..1000).map(|i| format!("w{i} ")).collect();
        assert_eq!(tsquery(&many).unwrap().split(" | ").count(), MAX_TERMS);
    }
}
