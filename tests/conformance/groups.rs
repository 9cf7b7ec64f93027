//! A shared group's memory on every store: kept under the group's own
//! name, apart from each member's; what it only observed is context, never
//! a question waiting for an answer (so no restart answers it); its status
//! is the group's; `clear group` clears the group's memory and nothing of a
//! member's.

use super::specs;
use super::subject::{Subject, at, chat_place, question};
use mnemo_sessions::commands::{self, Caller, NO_GROUP_MEMORY, SessionCommand};
use mnemo_sessions::store::Look;
use mnemo_sessions::{Record, SafeName, pending};

specs![
    a_group_remembers_apart_from_its_members_and_observed_messages_wait_for_nothing,
    clear_group_clears_the_group_s_memory_only,
];

fn said(msg_id: &str, m: i64, who: &str, text: &str) -> Record {
    Record {
        user_name: Some(who.to_string()),
        chat_id: Some("g1".into()),
        ..question(msg_id, m, text)
    }
}

async fn run(s: &Subject, user: &SafeName, command: &SessionCommand) -> String {
    let place = chat_place();
    let caller = Caller {
        user,
        display_name: None,
        max_profile_chars: s.store.config().ltm.max_profile_chars,
        here: Some(commands::Here {
            place: &place,
            timezone: chrono_tz::UTC,
            max_reminders: 3,
        }),
    };
    let mut mine = s.store.user(user).await.unwrap();
    commands::try_execute(mine.as_mut(), caller, command, at(100))
        .await
        .unwrap()
        .text
}

async fn a_group_remembers_apart_from_its_members_and_observed_messages_wait_for_nothing(s: Subject) {
    let group = SafeName::group("g1");
    let seen = pending::observed_id("o1");
    s.store
        .intake(
            &group,
            &said(&seen, 1, "Bob", "the team offsite is in Porto"),
            at(1),
            10,
        )
        .await
        .unwrap();
    s.store
        .intake(&group, &said("q1", 2, "Ada", "where is the offsite?"), at(2), 10)
        .await
        .unwrap();
    s.store
        .intake(
            &SafeName::of("ada"),
            &question("p1", 3, "my locker code is 7731"),
            at(3),
            10,
        )
        .await
        .unwrap();
    for look in [Look::Everywhere, Look::Unfolded] {
        let mut found = s.store.pending(at(10), at(0), look).await.unwrap();
        found.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        let found: Vec<(SafeName, Vec<String>)> = found
            .into_iter()
            .map(|(user, questions)| (user, questions.into_iter().map(|q| q.msg_id).collect()))
            .collect();
        assert_eq!(
            found,
            [
                (group.clone(), vec!["q1".to_string()]),
                (SafeName::of("ada"), vec!["p1".to_string()]),
            ],
            "{look:?}: the observed message waits for no answer"
        );
    }
    // The group recalls what it observed, with who said it; Ada's own
    // memory does not hold it, and the group's does not hold hers.
    let mut mine = s.store.user(&group).await.unwrap();
    let view = mine.view(10, at(4)).await.unwrap();
    let names: Vec<Option<&str>> = view.recent.iter().map(|r| r.user_name.as_deref()).collect();
    assert_eq!(names, [Some("Bob"), Some("Ada")]);
    let found = mine.search("Porto", 5).await.unwrap();
    assert!(found.iter().any(|i| i.text.contains("Porto")), "{found:?}");
    assert!(mine.search("locker", 5).await.unwrap().is_empty());
    drop(mine);
    let mut ada = s.user("ada").await;
    assert!(ada.search("Porto", 5).await.unwrap().is_empty());
    drop(ada);
    let status = run(&s, &group, &SessionCommand::Status).await;
    assert!(status.starts_with("This group's shared memory:"), "{status}");
    assert!(status.contains("2 messages in short-term memory"), "{status}");
}

async fn clear_group_clears_the_group_s_memory_only(s: Subject) {
    let group = SafeName::group("g1");
    s.store
        .intake(&group, &said("q1", 1, "Ada", "we ship on friday"), at(1), 10)
        .await
        .unwrap();
    s.chat("ada", 2, 4, "my own words").await;
    // From a member's own memory (a DM, a group without shared memory) it
    // deletes nothing.
    assert_eq!(
        run(&s, &SafeName::of("ada"), &SessionCommand::ClearGroup).await,
        NO_GROUP_MEMORY
    );
    assert_eq!(s.user("ada").await.status().await.unwrap().stm_messages, 4);
    let cleared = run(&s, &group, &SessionCommand::ClearGroup).await;
    assert!(cleared.starts_with("Deleted this group's shared memory"), "{cleared}");
    assert_eq!(
        s.store.user(&group).await.unwrap().status().await.unwrap().stm_messages,
        0
    );
    assert_eq!(s.user("ada").await.status().await.unwrap().stm_messages, 4);
    let again = run(&s, &group, &SessionCommand::ClearGroup).await;
    assert_eq!(again, "This group's memory was already empty.");
}
