//! The words of a message as PostgreSQL's full text takes them: what
//! recall, `/session search` and the memory tools look for. Nothing but
//! letters, digits and `|` reaches the query parser.

/// Distinct words a query keeps (the first ones), as the file store.
pub(crate) const MAX_TERMS: usize = 64;
/// Longer runs of letters are cut, as the file store's tokenizer does.
pub(crate) const MAX_TERM_CHARS: usize = 32;

/// The distinct words of `message`: letters and digits only, lowercased,
/// cut at 32 characters, at most 64, in order.
pub fn words(message: &str) -> Vec<String> {
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
    words
}

/// `message` as a `to_tsquery` text: its [`words`] joined with `|`, so any
/// of them matches and the rank orders. Nothing but letters, digits and `|`
/// reaches the query parser, so no input can change the query's shape.
/// `None` when the message has no word.
pub fn tsquery(message: &str) -> Option<String> {
    let words = words(message);
    (!words.is_empty()).then(|| words.join(" | "))
}
