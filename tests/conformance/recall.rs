//! What a turn's recall picks, on any store: a message said again takes
//! one place, and the other half of a fact told in two places is found
//! through the person both halves name, a name widening the second round
//! before rarer words, the hit of the question's rarest word among the
//! hits the second round starts from, and those hits the question's, not
//! the recent window's (issue 41).

use super::specs;
use super::subject::{Subject, at, record};
use mnemo_sessions::recall::Recalled;
use mnemo_sessions::store::UserMemory;
use std::sync::Arc;

specs![
    a_message_said_again_is_recalled_once,
    the_other_half_of_a_fact_is_found_through_the_person_it_names,
    a_name_in_the_best_hit_widens_before_rarer_words,
    a_hit_of_a_rare_question_word_seeds_the_second_round_before_newer_hits_of_common_ones,
    the_recent_window_does_not_choose_whom_the_second_round_follows,
];

async fn a_message_said_again_is_recalled_once(s: Subject) {
    let mut ada = s.user("ada").await;
    for i in 0..6 {
        let text = if i % 2 == 0 {
            "Thinking about the heliotrope bakery again."
        } else {
            "thinking about the Heliotrope bakery, again"
        };
        ada.append(&record(2 * i, text), at(2 * i)).await.unwrap();
    }
    ada.append(&record(20, "The heliotrope bakery sells rye on Sundays."), at(20))
        .await
        .unwrap();
    let recalled = ada.recall("the heliotrope bakery?", &[], 500).await.unwrap();
    let texts = texts_of(&recalled);
    let repeats = texts
        .iter()
        .filter(|t| t.to_lowercase().starts_with("thinking"))
        .count();
    assert_eq!(repeats, 1, "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("rye")), "{texts:?}");
    assert_eq!(recalled.omitted, 0, "a repeat is not counted as left out: {recalled:?}");
}

async fn the_other_half_of_a_fact_is_found_through_the_person_it_names(s: Subject) {
    // A history long enough for a name to be rare in it (the second round
    // only widens by words rare in the user's history).
    s.chat("ada", 0, 60, "filler about the lunch menu").await;
    let mut ada = s.user("ada").await;
    for (i, text) in [
        (100, "I met Sam at the climbing gym, we chatted for ages."),
        (102, "Sam sent me a funny video of a cat."),
        (104, "Sam's new flat is in Porto, near the river."),
    ] {
        ada.append(&record(i, text), at(i)).await.unwrap();
    }
    let recalled = ada
        .recall(
            "Which city does the friend I met at the climbing gym live in now?",
            &[],
            500,
        )
        .await
        .unwrap();
    let texts = texts_of(&recalled);
    assert!(texts.iter().any(|t| t.contains("climbing gym")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("Porto")), "{texts:?}");
}

async fn a_name_in_the_best_hit_widens_before_rarer_words(s: Subject) {
    s.chat("ada", 0, 60, "filler about the lunch menu").await;
    let mut ada = s.user("ada").await;
    let mut texts = vec![
        "I met Sam at the climbing gym, we talked ropes, chalk, harnesses, belays, carabiners and quickdraws."
            .to_string(),
        "Sam sent me a funny video of a cat.".to_string(),
        "Sam's new flat is in Porto, near the river.".to_string(),
    ];
    // Each of the hit's other words is in one more message: rarer than the
    // name (in three), they would take every widening place before it.
    for gear in ["ropes", "chalk", "harnesses", "belays", "carabiners", "quickdraws"] {
        texts.push(format!("The outdoor shop has {gear} on sale."));
    }
    tell(ada.as_mut(), &texts).await;
    let recalled = ada
        .recall(
            "Which city does the friend I met at the climbing gym live in now?",
            &[],
            800,
        )
        .await
        .unwrap();
    let texts = texts_of(&recalled);
    assert!(texts.iter().any(|t| t.contains("Porto")), "{texts:?}");
}

async fn a_hit_of_a_rare_question_word_seeds_the_second_round_before_newer_hits_of_common_ones(s: Subject) {
    s.chat("ada", 0, 60, "filler about the lunch menu").await;
    let mut ada = s.user("ada").await;
    let mut texts = vec![
        "My old flatmate Nia finally called me back.".to_string(),
        "Nia introduced me to her brother Dmitri at the party.".to_string(),
        "Dmitri is opening a bakery in Lisbon next year.".to_string(),
    ];
    // Newer than the chain's middle, each with one of the question's
    // common words ("old", "busy" stemmed as "business" is): by match
    // alone and newest first they would be the best hits after the first
    // link, and "Dmitri" would never widen a round.
    for i in 0..8 {
        texts.push(format!("Spent evening {i} sorting old photos into albums."));
        texts.push(format!("Work was busy on day {i}, meetings back to back."));
    }
    tell(ada.as_mut(), &texts).await;
    let recalled = ada
        .recall("Where is my old flatmate's brother starting his business?", &[], 800)
        .await
        .unwrap();
    let texts = texts_of(&recalled);
    assert!(texts.iter().any(|t| t.contains("brother")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("bakery")), "{texts:?}");
}

async fn the_recent_window_does_not_choose_whom_the_second_round_follows(s: Subject) {
    s.chat("ada", 0, 60, "filler about the lunch menu").await;
    let mut ada = s.user("ada").await;
    let mut texts = vec!["Quentin from my book club lent me a thriller.".to_string()];
    for i in 0..4 {
        texts.push(format!("Had lunch with Quentin on day {i}."));
    }
    texts.push("Quentin adopted a rabbit from the shelter, photos all week.".to_string());
    // Found by the words of the message before the question alone; rich
    // in rare words they share, they would widen the second round so far
    // that the name's hits fall under its cut.
    texts.push("Today I signed the lease for the flat in Quitoburg, near the canal bridge.".to_string());
    texts.push("The Quitoburg flat lease is signed, the canal bridge view is lovely.".to_string());
    tell(ada.as_mut(), &texts).await;
    let before = Arc::new(record(200, "When did I sign the lease for the flat in Quitoburg?"));
    ada.append(&before, at(200)).await.unwrap();
    let recalled = ada
        .recall(
            "What animal does the person from my book club have now?",
            &[before],
            800,
        )
        .await
        .unwrap();
    let texts = texts_of(&recalled);
    assert!(texts.iter().any(|t| t.contains("book club")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("rabbit")), "{texts:?}");
}

/// `texts` told as the user's messages from minute 100 on, two minutes
/// apart (`record`'s even ids are the user's).
async fn tell(user: &mut dyn UserMemory, texts: &[String]) {
    for (i, text) in texts.iter().enumerate() {
        let i = 100 + 2 * i as i64;
        user.append(&record(i, text), at(i)).await.unwrap();
    }
}

/// What was recalled, as text.
fn texts_of(recalled: &Recalled) -> Vec<&str> {
    recalled.items.iter().map(|i| i.text.as_str()).collect()
}
