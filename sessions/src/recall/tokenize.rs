//! Text to search terms: lowercase, split at anything that is not a letter
//! or digit, drop English stop words, stem (Snowball English). The same
//! function serves documents and queries, so both sides always agree.
//!
//! Pure and bounded: a query is cut to [`MAX_QUERY_TERMS`] distinct terms,
//! and no term is longer than [`MAX_TERM_CHARS`], so hostile input (8,000
//! characters, markup, emoji) costs no more than an ordinary message.

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::FxHashSet;
use std::sync::{Arc, OnceLock};

/// Distinct terms a query keeps (the first ones, in order).
pub const MAX_QUERY_TERMS: usize = 64;
/// Longer runs of letters are cut: no word is this long, a hash or a blob is.
pub const MAX_TERM_CHARS: usize = 32;

/// Words too common to tell documents apart. Kept short: pronouns such as
/// "my" carry nothing, but question words are already dropped here too.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "because",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "don", "for", "from", "had",
    "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it",
    "its", "just", "me", "more", "most", "my", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or",
    "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your", "yours", "ll", "re", "ve", "s", "t", "d", "m", "ok", "okay", "yes", "yeah",
    "please", "thanks", "thank", "tell", "remind", "remember", "know", "let", "get", "got",
];

fn stop_words() -> &'static FxHashSet<&'static str> {
    static SET: OnceLock<FxHashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| STOP_WORDS.iter().copied().collect())
}

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Distinct words whose stems a thread remembers; past this the memory is
/// emptied and fills again (chat reuses few words, so it rarely is). ~2 MB
/// when full: the memory stays with the thread (a rebuild's peak).
const STEM_CACHE_WORDS: usize = 1 << 14;

/// `word` stemmed, from this thread's memory of words seen before:
/// Snowball costs far more than a lookup, and a rebuild of 10⁵ messages
/// stems the same few thousand words a million times. A word with a digit
/// (a number, an id: rarely said twice) is stemmed without being
/// remembered, so a history full of numbers does not fill the memory with
/// them (10⁵ of them held ~10 MB).
fn stem(word: &str) -> String {
    if word.bytes().any(|b| b.is_ascii_digit()) {
        return stemmer().stem(word).into_owned();
    }
    thread_local! {
        static STEMS: std::cell::RefCell<rustc_hash::FxHashMap<String, String>> =
            std::cell::RefCell::new(rustc_hash::FxHashMap::default());
    }
    STEMS.with_borrow_mut(|stems| {
        if let Some(stem) = stems.get(word) {
            return stem.clone();
        }
        if stems.len() >= STEM_CACHE_WORDS {
            stems.clear();
        }
        let stem = stemmer().stem(word).into_owned();
        stems.insert(word.to_string(), stem.clone());
        stem
    })
}

/// Every term of `text`, in order, repeats kept (documents count them).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| {
        out.push(t);
        true
    });
    out
}

/// The distinct terms of a query, in order of first appearance, at most
/// [`MAX_QUERY_TERMS`].
pub fn query_terms(text: &str) -> Vec<String> {
    // At most MAX_QUERY_TERMS short strings: a scan beats hashing and
    // copying each term into a set.
    let mut out: Vec<String> = Vec::new();
    for_each_term(text, |t| {
        if !out.contains(&t) {
            out.push(t);
        }
        out.len() < MAX_QUERY_TERMS
    });
    out
}

/// How many texts' [`query_terms`] a [`QueryTermsCache`] keeps.
const CACHED_TEXTS: usize = 16;

/// The [`query_terms`] of the texts one user's recall meets turn after
/// turn — the message just asked (the next turns' context), the window's
/// last questions, the best hits whose rare words widen the search — so a
/// turn does not tokenize and stem them again. Keyed by the text's hash and
/// length; at most [`CACHED_TEXTS`] texts (the terms only, not the texts),
/// emptied when full.
#[derive(Debug, Default)]
pub struct QueryTermsCache {
    terms: rustc_hash::FxHashMap<(u64, usize), Arc<[String]>>,
}

impl QueryTermsCache {
    /// [`query_terms`] of `text`, from the cache when it has them.
    /// Shared with the cache, not copied: a turn asks for the same few
    /// texts' terms several times.
    pub fn terms(&mut self, text: &str) -> Arc<[String]> {
        let key = (crate::stable_key::key_of(&[text.as_bytes()]), text.len());
        if let Some(terms) = self.terms.get(&key) {
            return terms.clone();
        }
        let terms: Arc<[String]> = query_terms(text).into();
        if self.terms.len() >= CACHED_TEXTS {
            self.terms.clear();
        }
        self.terms.insert(key, terms.clone());
        terms
    }
}

/// Calls `f` with each term until it returns false. An apostrophe splits
/// like any separator: "sister's" gives "sister" and "s", a stop word.
fn for_each_term(text: &str, mut f: impl FnMut(String) -> bool) {
    let mut word = String::new();
    let mut length = 0usize;
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() {
            // The common case, without Unicode case tables.
            if length < MAX_TERM_CHARS {
                word.push(c.to_ascii_lowercase());
                length += 1;
            }
            continue;
        }
        if c.is_alphanumeric() {
            if length < MAX_TERM_CHARS {
                word.extend(c.to_lowercase());
                length += 1;
            }
            continue;
        }
        if word.is_empty() {
            continue;
        }
        let keep = !stop_words().contains(word.as_str()) && (length > 1 || word.chars().all(|c| c.is_ascii_digit()));
        if keep && !f(stem(&word)) {
            return;
        }
        word.clear();
        length = 0;
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn cached_query_terms_are_the_query_terms_and_the_cache_stays_small() {
        let mut cache = QueryTermsCache::default();
        let texts: Vec<String> = (0..40)
            .map(|i| format!("Where did my sister's {i} cats move, Lisbon or Porto? ({i})"))
            .collect();
        for round in 0..2 {
            for text in &texts {
                assert_eq!(*cache.terms(text), *query_terms(text), "round {round}: {text}");
                assert!(cache.terms.len() <= CACHED_TEXTS);
            }
        }
        // Same length, other words: not confused.
        assert_eq!(*cache.terms("piano lesson"), *query_terms("piano lesson"));
        assert_eq!(*cache.terms("lesson piano"), *query_terms("lesson piano"));
        assert_ne!(cache.terms("piano tuners"), cache.terms("guitar cases"));
    }
    use super::*;

    #[test]
    fn words_are_lowercased_stemmed_and_stop_words_dropped() {
        assert_eq!(
            terms("The Dentist appointments are on Tuesdays"),
            ["dentist", "appoint", "tuesday"]
        );
    }

    #[test]
    fn possessives_and_contractions_leave_only_the_word() {
        assert_eq!(terms("my sister's cat won't eat"), ["sister", "cat", "won", "eat"]);
    }

    #[test]
    fn numbers_survive_even_single_digits() {
        assert_eq!(terms("room 7 on floor 12"), ["room", "7", "floor", "12"]);
    }

    #[test]
    fn stop_words_emoji_and_markup_give_no_terms_or_only_real_words() {
        assert!(terms("what is it that you and I were on about?").is_empty());
        assert!(terms("🎉🎉🔥 👍").is_empty());
        assert_eq!(terms("<b>hello</b> <@U123>"), ["hello", "u123"]);
    }

    #[test]
    fn a_query_keeps_each_term_once_in_order_of_first_appearance() {
        assert_eq!(
            query_terms("Cats, dentist; cat DENTISTS and cats teeth"),
            ["cat", "dentist", "teeth"]
        );
    }

    #[test]
    fn a_huge_query_keeps_a_bounded_number_of_short_terms() {
        let text: String = (0..2000).map(|i| format!("word{i} ")).collect::<String>() + &"x".repeat(8000);
        let q = query_terms(&text);
        assert_eq!(q.len(), MAX_QUERY_TERMS);
        assert!(
            terms(&"y".repeat(8000))
                .iter()
                .all(|t| t.chars().count() <= MAX_TERM_CHARS)
        );
    }
}
