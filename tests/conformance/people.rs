//! Linked identities on every store: a one-time code is kept by its hash
//! and taken once, only before it expires, and a newer code replaces the
//! account's older one; wrong codes are counted per account within the
//! lock window; a link names its home until it is undone.

use super::specs;
use super::subject::{Subject, at};
use chrono::TimeDelta;
use mnemo_sessions::SafeName;
use mnemo_sessions::people::{Account, KEEP_FAILURES, code_hash, new_code};

specs![
    a_code_is_taken_once_and_only_before_it_expires,
    wrong_codes_are_counted_per_account_within_the_window,
    a_link_names_its_home_until_it_is_undone,
];

/// An account of this spec's own (the database is shared by every spec).
fn account(s: &Subject, platform: &str, user: &str) -> Account {
    Account::new(&format!("{}-{platform}", s.store.channel()), SafeName::of(user))
}

async fn a_code_is_taken_once_and_only_before_it_expires(s: Subject) {
    let links = s.links();
    let ada = account(&s, "telegram", "42");
    let now = chrono::Utc::now();
    let first = new_code();
    links
        .put_code(&code_hash(&first), &ada, now, now + TimeDelta::minutes(10))
        .await
        .unwrap();
    assert_eq!(
        links.take_code(&code_hash(&first.to_lowercase()), now).await.unwrap(),
        Some(ada.clone())
    );
    assert_eq!(
        links.take_code(&code_hash(&first), now).await.unwrap(),
        None,
        "used once"
    );
    // A newer code replaces the account's older one.
    let (older, newer) = (new_code(), new_code());
    links
        .put_code(&code_hash(&older), &ada, now, now + TimeDelta::minutes(10))
        .await
        .unwrap();
    links
        .put_code(&code_hash(&newer), &ada, now, now + TimeDelta::minutes(10))
        .await
        .unwrap();
    assert_eq!(links.take_code(&code_hash(&older), now).await.unwrap(), None);
    // An expired code is refused, and gone.
    let later = now + TimeDelta::minutes(11);
    assert_eq!(links.take_code(&code_hash(&newer), later).await.unwrap(), None);
    assert_eq!(links.take_code(&code_hash(&newer), now).await.unwrap(), None);
}

async fn wrong_codes_are_counted_per_account_within_the_window(s: Subject) {
    let links = s.links();
    let (ada, bob) = (account(&s, "slack", "U1"), account(&s, "slack", "U2"));
    let t0 = chrono::Utc::now();
    let times: Vec<_> = (1..=3).map(|n| t0 + TimeDelta::seconds(n)).collect();
    for at in &times {
        links.failed(&ada, *at).await.unwrap();
    }
    let kept = links.failures(&ada, t0).await.unwrap();
    assert_eq!(kept.len(), 3);
    for (kept, at) in kept.iter().zip(&times) {
        assert!((*kept - *at).abs() < TimeDelta::milliseconds(1), "{kept} {at}");
    }
    assert!(links.failures(&bob, t0).await.unwrap().is_empty());
    let since = links.failures(&ada, t0 + TimeDelta::seconds(3)).await.unwrap();
    assert_eq!(since.len(), 1, "only those at or after `since`");
    // Kept long enough for any lock, then dropped at a later wrong code.
    let later = t0 + KEEP_FAILURES + TimeDelta::seconds(10);
    links.failed(&ada, later).await.unwrap();
    assert_eq!(
        links.failures(&ada, t0).await.unwrap().len(),
        1,
        "old wrong codes are dropped"
    );
}

async fn a_link_names_its_home_until_it_is_undone(s: Subject) {
    let links = s.links();
    let (home, other, third) = (
        account(&s, "telegram", "42"),
        account(&s, "slack", "U1"),
        account(&s, "discord", "7"),
    );
    links.link(&other, &home, at(1)).await.unwrap();
    links.link(&third, &home, at(2)).await.unwrap();
    assert_eq!(links.home_of(&other).await.unwrap(), Some(home.clone()));
    assert_eq!(links.home_of(&home).await.unwrap(), None, "a home is nobody's link");
    let linked: Vec<Account> = links
        .linked_to(&home)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.account)
        .collect();
    assert_eq!(linked, [other.clone(), third.clone()]);
    assert!(
        links
            .all()
            .await
            .unwrap()
            .iter()
            .any(|l| l.account == third && l.at == at(2))
    );
    assert!(links.unlink(&other).await.unwrap());
    assert!(!links.unlink(&other).await.unwrap());
    assert_eq!(links.home_of(&other).await.unwrap(), None);
    assert_eq!(links.linked_to(&home).await.unwrap().len(), 1);
}
