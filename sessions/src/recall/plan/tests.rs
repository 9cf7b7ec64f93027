//! What a turn's recall picks, on hand-made indexes.

use super::*;
use crate::recall::bm25::tests::at;
use crate::recall::bm25::{Source, idf};

fn texts(index: &Bm25, picks: &[Pick]) -> Vec<String> {
    picks.iter().map(|p| index.doc(p.doc).text.clone()).collect()
}

/// What `message` picks from `user`'s index alone (no shared notes,
/// nothing left out, no vectors), after `recent`.
fn picked(user: &Bm25, message: &str, recent: &[&str]) -> Vec<String> {
    let picks = plan(
        user,
        &Bm25::default(),
        message,
        recent,
        &HashSet::new(),
        &[],
        &mut QueryTermsCache::default(),
    );
    texts(user, &picks)
}

/// `n` messages of chatter about lunch, ids from 100.
fn filler(user: &mut Bm25, n: u64) {
    for i in 0..n {
        user.add(100 + i, at(2), Source::User, format!("filler about lunch number {i}"));
    }
}

#[test]
fn the_second_round_finds_the_other_half_of_a_two_part_fact() {
    let mut user = Bm25::default();
    user.add(1, at(1), Source::User, "My sister is called Ana".into());
    filler(&mut user, 40);
    user.add(2, at(9), Source::User, "Ana moved to Lisbon last month".into());
    let found = picked(&user, "Where does my sister live?", &[]);
    assert!(found.iter().any(|t| t.contains("Lisbon")), "{found:?}");
}

#[test]
fn the_second_round_is_widened_by_the_name_in_a_hit_not_by_its_one_off_words() {
    let mut user = Bm25::default();
    // The hit's other words are rarer than the name, but no other
    // message has them: they would take every widening slot.
    user.add(
        1,
        at(1),
        Source::User,
        "I met Sam at the climbing gym, we chatted for ages about ropes, chalk, harnesses, belays and carabiners"
            .into(),
    );
    filler(&mut user, 60);
    user.add(2, at(9), Source::User, "Sam's new flat is in Porto".into());
    let found = picked(
        &user,
        "Which city does the friend I met at the climbing gym live in now?",
        &[],
    );
    assert!(found.iter().any(|t| t.contains("Porto")), "{found:?}");
}

#[test]
fn a_follow_up_whose_own_words_find_nothing_widens_from_the_recent_window() {
    let mut user = Bm25::default();
    user.add(1, at(1), Source::User, "I met Sam at the climbing gym".into());
    filler(&mut user, 60);
    user.add(2, at(9), Source::User, "Sam's new flat is in Porto".into());
    let found = picked(
        &user,
        "And where does that friend reside these days?",
        &["Do you remember the person I met at the climbing gym?"],
    );
    assert!(found.iter().any(|t| t.contains("Porto")), "{found:?}");
}

#[test]
fn a_message_said_again_is_picked_once_and_leaves_room_for_another_seed() {
    let mut user = Bm25::default();
    for i in 0..5 {
        user.add(
            10 + i,
            at(20 + i as u32),
            Source::User,
            "Thinking about learning a language again.".into(),
        );
    }
    user.add(1, at(1), Source::User, "I'm learning Swahili on weekends.".into());
    filler(&mut user, 60);
    user.add(
        2,
        at(9),
        Source::User,
        "I switched my weekend lessons to Korean.".into(),
    );
    let found = picked(&user, "Which language am I learning now?", &[]);
    let repeats = found.iter().filter(|t| t.starts_with("Thinking about")).count();
    assert_eq!(repeats, 1, "{found:?}");
    assert!(found.iter().any(|t| t.contains("Korean")), "{found:?}");
}

#[test]
fn a_text_is_keyed_the_same_by_its_words_whatever_its_script() {
    for text in [
        "Thinking about it again.",
        "  thinking, ABOUT it -- again!!",
        "Dr. O'Neil's 2nd visit: 10:30",
        "",
        "...",
        "x",
    ] {
        assert_eq!(text_key(text), unicode_text_key(text), "{text:?}");
    }
    assert_eq!(
        text_key("Thinking about it again."),
        text_key("thinking about it, again")
    );
    assert_ne!(text_key("Thinking about it again."), text_key("Thinking about it"));
    assert_eq!(text_key("Café au lait"), text_key("CAFÉ, au lait!"));
    assert_ne!(text_key("ab c"), text_key("a bc"));
}

#[test]
fn excluded_documents_are_never_picked() {
    let mut user = Bm25::default();
    user.add(1, at(1), Source::User, "the piano recital is on friday".into());
    let picks = plan(
        &user,
        &Bm25::default(),
        "when is the piano recital",
        &[],
        &HashSet::from([1]),
        &[],
        &mut QueryTermsCache::default(),
    );
    assert!(picks.is_empty());
}

#[test]
fn a_question_of_stop_words_recalls_nothing() {
    let mut user = Bm25::default();
    user.add(1, at(1), Source::User, "what is it".into());
    assert!(
        plan(
            &user,
            &Bm25::default(),
            "what is it?",
            &[],
            &HashSet::new(),
            &[],
            &mut QueryTermsCache::default()
        )
        .is_empty()
    );
}

#[test]
fn a_dense_hit_bm25_missed_is_picked_and_one_both_rank_comes_first() {
    let mut user = Bm25::default();
    user.add(1, at(1), Source::User, "I parked the automobile on level three".into());
    user.add(2, at(2), Source::User, "my car is blue".into());
    user.add(3, at(3), Source::User, "the car wash was closed".into());
    let dense = [
        Pick {
            side: Side::User,
            doc: 1,
        },
        Pick {
            side: Side::User,
            doc: 0,
        },
    ];
    let picks = plan(
        &user,
        &Bm25::default(),
        "where is my car",
        &[],
        &HashSet::new(),
        &dense,
        &mut QueryTermsCache::default(),
    );
    let docs: Vec<u32> = picks.iter().map(|p| p.doc).collect();
    assert_eq!(docs[0], 1, "in both lists: {docs:?}");
    assert!(docs.contains(&0), "found by the embeddings alone: {docs:?}");
    let without = plan(
        &user,
        &Bm25::default(),
        "where is my car",
        &[],
        &HashSet::new(),
        &[],
        &mut QueryTermsCache::default(),
    );
    assert!(!without.iter().any(|p| p.doc == 0));
}

#[test]
fn a_neighbour_is_taken_for_a_query_word_the_hit_lacks() {
    let mut user = Bm25::default();
    let sister = user.add(1, at(1), Source::User, "My sister is called Ana".into());
    let moved = user.add(2, at(1), Source::User, "She moved to Lisbon".into());
    let sunny = user.add(3, at(1), Source::User, "Lisbon is sunny".into());
    let elsewhere = user.add(4, at(2), Source::User, "Ana phoned".into());
    let terms = tokenize::query_terms("Where in Lisbon does Ana live?");
    let query: Vec<Listing> = terms.iter().filter_map(|t| user.postings_of(t)).collect();
    let none = |_: &Doc| false;
    // Each half of the fact brings the other; the neighbour that only
    // repeats a word the hit has, or is of another day, does not come.
    assert_eq!(neighbours(&user, sister, &query, &none), [moved]);
    assert_eq!(neighbours(&user, moved, &query, &none), [sister]);
    assert_eq!(neighbours(&user, sunny, &query, &none), Vec::<u32>::new());
    assert!(!neighbours(&user, sunny, &query, &none).contains(&elsewhere));
    // Left out of the context already: not taken again.
    assert_eq!(
        neighbours(&user, sister, &query, &|d: &Doc| d.key == 2),
        Vec::<u32>::new()
    );
}

#[test]
fn one_busy_day_does_not_take_every_slot() {
    let picks: Vec<(Pick, chrono::NaiveDate)> = (0..5)
        .map(|doc| {
            let day = if doc < 4 { at(1) } else { at(2) };
            (Pick { side: Side::User, doc }, day.date_naive())
        })
        .collect();
    let spread = spread(picks);
    assert_eq!(spread.iter().map(|p| p.doc).collect::<Vec<_>>(), [0, 1, 4, 2, 3]);
}

#[test]
fn the_widening_limit_is_the_idf_floor_as_a_document_count() {
    for docs in [2usize, 5, 25, 100, 1_000, 100_000] {
        let limit = widening_df_limit(docs);
        let idf = |df: usize| (1.0 + (docs as f32 - df as f32 + 0.5) / (df as f32 + 0.5)).ln();
        if limit > 0 {
            assert!(idf(limit) >= widening_floor(docs), "{docs}: {limit}");
        }
        assert!(idf(limit + 1) < widening_floor(docs), "{docs}: {limit}");
    }
    assert!(widening_df_limit(5) < 2, "a tiny history has no rare words");
    let mut index = Bm25::default();
    for i in 0..40u64 {
        let text = if i % 4 == 0 { "rare words here" } else { "filler words" };
        index.add(i, at(1), Source::User, text.into());
    }
    assert!((idf(40, 10) - index.idf("rare")).abs() < 1e-6, "the index's own weight");
    assert!(idf(40, 1) > idf(40, 10) && idf(40, 10) > idf(40, 40));
    assert_eq!(idf(40, 0), 0.0);
    assert_eq!(widening_df_limit(25), 9);
}
