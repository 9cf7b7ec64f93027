//! Recall on Postgres: the turn's message as a full-text query over the
//! user's stored messages (`tsvector`, English stems and stop words, the
//! same language rules as the file store's index), scoped to the user in
//! the statement itself ([`crate::PgTurn::recall`]). Two round trips
//! (prepared once per connection):
//! 1. the question's stemmed terms and how many of the user's messages
//!    each matches (counted up to [`RARE`], from the per-user index; not
//!    counted for a user with fewer messages than that in all), pipelined
//!    with the searches of the user's topic notes and fact log (a few of
//!    each go ahead of the messages, see [`crate::memory`]);
//! 2. one statement: the search by the rare terms ranked by all of them
//!    ([`plan`]; the newest [`RANKED`] matches at most are ranked) and, as
//!    the file store's recall does, a second round widened by the rarest
//!    plain words of the best three hits that are not in the question (the
//!    other half of a fact told in two places), its hits weighted 0.6;
//!    pipelined with the matching pieces of the user's daily and weekly
//!    summaries.
//!
//! With `recall.embeddings` and pgvector, the user's nearest message
//! vectors are fused with this ranking ([`crate::vectors`]); without
//! pgvector full text carries recall alone, and the broker says so at
//! start.

/// Distinct words a query keeps (the first ones), as the file store.
const MAX_TERMS: usize = 64;
/// Longer runs of letters are cut, as the file store's tokenizer does.
const MAX_TERM_CHARS: usize = 32;

/// A query term narrows the search only if it matches fewer of the user's
/// messages than this (counted up to it): the database's stand-in for
/// BM25's inverse document frequency, so "build" in half of a long history
/// does not make every turn rank that half.
pub const RARE: i64 = 500;

/// At most this many matches are ranked, the newest first, when every
/// term of the question is common.
pub const RANKED: i64 = 2_000;

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

/// The terms to search and to rank by, from each stemmed term of the
/// question and how many of the user's messages it matches (up to
/// [`RARE`]): search by the rare ones (all, when none is rare), rank by
/// all that match anything. `None` when no term matches anything.
pub fn plan(counts: &[(String, i64)]) -> Option<(String, String)> {
    let matched: Vec<&str> = counts.iter().filter(|(_, n)| *n > 0).map(|(t, _)| t.as_str()).collect();
    if matched.is_empty() {
        return None;
    }
    let rare: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| *n > 0 && *n < RARE)
        .map(|(t, _)| t.as_str())
        .collect();
    let search = if rare.is_empty() { &matched } else { &rare };
    Some((search.join(" | "), matched.join(" | ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rare_terms_narrow_the_search_and_all_matching_terms_rank() {
        let counts = |v: &[(&str, i64)]| v.iter().map(|(t, n)| (t.to_string(), *n)).collect::<Vec<_>>();
        let planned = plan(&counts(&[("build", RARE), ("dentist", 3), ("zebra", 0)]));
        assert_eq!(planned, Some(("dentist".into(), "build | dentist".into())));
        let planned = plan(&counts(&[("build", RARE), ("step", RARE)]));
        assert_eq!(
            planned,
            Some(("build | step".into(), "build | step".into())),
            "all common: all search"
        );
        assert_eq!(plan(&counts(&[("zebra", 0)])), None);
        assert_eq!(plan(&[]), None);
    }

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
