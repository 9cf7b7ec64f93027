//! A turn's memory: intake stores a message once, the view shows the
//! recent records in order with what folded them, a question is settled
//! only by its own answer, and what a restart finds unsettled.

use super::specs;
use super::subject::{Subject, answer, at, question};
use mnemo_sessions::SafeName;
use mnemo_sessions::store::{Intake, Look};

specs![
    intake_stores_a_message_once_and_the_view_shows_it,
    the_view_holds_the_last_records_in_order,
    a_question_is_settled_only_by_its_own_answer,
    a_restart_finds_the_unsettled_questions_of_every_user,
];

async fn intake_stores_a_message_once_and_the_view_shows_it(s: Subject) {
    let ada = SafeName::of("ada");
    let q = question("q1", 1, "where is my dentist?");
    assert_eq!(s.store.intake(&ada, &q, at(1), 10).await.unwrap(), Intake::Queue);
    // A platform's repeat: never stored twice. A store several brokers
    // share queues it again (a dead broker may have left it); its turn
    // finds it settled or answers it once.
    let again = s.store.intake(&ada, &q, at(2), 10).await.unwrap();
    let expected = if s.store.shared() {
        Intake::Queue
    } else {
        Intake::Repeat
    };
    assert_eq!(again, expected);
    let view = s.user("ada").await.view(10, at(3)).await.unwrap();
    let ids: Vec<&str> = view.recent.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, ["q1"]);
    assert_eq!(view.recent[0].text, "where is my dentist?");
    assert!(view.summary.is_none() && view.profile.is_none());
}

async fn the_view_holds_the_last_records_in_order(s: Subject) {
    s.chat("ada", 0, 12, "line").await;
    let mut mine = s.user("ada").await;
    let view = mine.view(4, at(20)).await.unwrap();
    let texts: Vec<&str> = view.recent.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(texts, ["line 8", "line 9", "line 10", "line 11"]);
    let appended = mine.append(&question("q", 21, "one more"), at(21)).await.unwrap();
    assert!(!appended.fold_due, "13 messages, the threshold is 20");
    assert!(!appended.over_bound);
}

async fn a_question_is_settled_only_by_its_own_answer(s: Subject) {
    let ada = SafeName::of("ada");
    for (id, m) in [("q1", 1), ("q2", 2)] {
        s.store
            .intake(&ada, &question(id, m, "a question"), at(m), 10)
            .await
            .unwrap();
    }
    let mut mine = s.user("ada").await;
    assert!(!mine.is_settled("q1", at(3)).await.unwrap());
    mine.append(&answer("q1", 3, "an answer"), at(3)).await.unwrap();
    assert!(mine.is_settled("q1", at(4)).await.unwrap());
    assert!(
        !mine.is_settled("q2", at(4)).await.unwrap(),
        "q1's answer settles q1 only"
    );
    assert!(mine.question_view("q1", 10, at(4)).await.unwrap().is_none());
    let view = mine.question_view("q2", 10, at(4)).await.unwrap().unwrap();
    assert_eq!(view.recent.len(), 3);
}

async fn a_restart_finds_the_unsettled_questions_of_every_user(s: Subject) {
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    for (user, id, m) in [(&ada, "a1", 1), (&bob, "b1", 2), (&ada, "a2", 3), (&ada, "a3", 4)] {
        s.store
            .intake(user, &question(id, m, "a question"), at(m), 10)
            .await
            .unwrap();
    }
    s.user("ada")
        .await
        .append(&answer("a2", 5, "answered"), at(5))
        .await
        .unwrap();
    let mut found = s.store.pending(at(10), at(0), Look::Everywhere).await.unwrap();
    found.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let found: Vec<(String, Vec<String>)> = found
        .into_iter()
        .map(|(user, questions)| {
            let user = user.decode().unwrap();
            (user, questions.into_iter().map(|q| q.msg_id).collect())
        })
        .collect();
    assert_eq!(
        found,
        [
            ("ada".to_string(), vec!["a1".to_string(), "a3".to_string()]),
            ("bob".to_string(), vec!["b1".to_string()]),
        ]
    );
    // Only questions stored in the window: none before minute 1, none
    // after minute 3.
    let early = s.store.pending(at(3), at(1), Look::Everywhere).await.unwrap();
    let ids: Vec<String> = early.into_iter().flat_map(|(_, q)| q).map(|q| q.msg_id).collect();
    assert_eq!(ids, ["b1"]);
}
