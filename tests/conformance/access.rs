//! Access rules on every store: the gate (`mnemo::access::Gate`) decides
//! the same on the channel's `access.json` and on its row in the database
//! — a stranger paired by the operator and greeted once, the allowlist,
//! direct messages turned off — and an operator's edit takes effect
//! without a restart. The rules are edited here as the `mnemo access`
//! verbs edit them, on the store the channel uses.

use super::specs;
use super::subject::Subject;
use chrono::Utc;
use mnemo::access::{AccessFile, Admission, DmPolicy, Gate, pairing};
use mnemo::config::LimitsConfig;
use mnemo_channels::Inbound;
use std::time::Duration;

specs![
    a_stranger_is_paired_by_the_operator_then_greeted_once,
    the_allowlist_admits_its_people_and_ignores_strangers_quietly,
    disabled_direct_messages_refuse_even_the_allowlist,
];

impl Subject {
    /// The gate as the broker builds it for this store, looking at the
    /// rules on every message.
    fn gate(&self) -> Gate {
        Gate::new(self.state(), &LimitsConfig::default())
            .with_database(self.database.clone())
            .with_recheck(Duration::ZERO)
    }

    /// Changes the channel's rules where they live (what `mnemo access`
    /// does).
    async fn edit_rules<T>(&self, change: impl FnOnce(&mut AccessFile) -> T) -> T {
        let channel = self.store.channel();
        match &self.database {
            Some(db) => mnemo::access::db::edit(db, channel, change).await.unwrap().0.0,
            None => {
                let path = mnemo_sessions::Layout::new(self.state(), channel).access_path();
                mnemo::access::file::update(&path, change).unwrap().0
            }
        }
    }

    fn dm(&self, user: &str, msg_id: &str) -> Inbound {
        crate::support::dm(self.store.channel(), user, msg_id, "hello")
    }
}

fn said(admission: &Admission) -> Option<&str> {
    match admission {
        Admission::Refused { reply } => reply.as_deref(),
        Admission::Proceed { greeting } => greeting.as_deref(),
        Admission::Unavailable | Admission::Group { .. } => None,
    }
}

async fn a_stranger_is_paired_by_the_operator_then_greeted_once(s: Subject) {
    let gate = s.gate();
    let first = gate.admit(&s.dm("ada", "1"), Utc::now()).await;
    assert!(matches!(first, Admission::Refused { .. }), "{first:?}");
    let reply = said(&first).unwrap_or_default().to_string();
    assert!(reply.contains("Your pairing code is"), "{reply}");
    let again = gate.admit(&s.dm("ada", "2"), Utc::now()).await;
    assert!(
        said(&again).is_some_and(|r| r.starts_with("Still waiting for approval")),
        "{again:?}"
    );
    let code = s.edit_rules(|rules| rules.pending[0].code.clone()).await;
    assert!(reply.contains(&code), "{reply}");
    s.edit_rules(|rules| pairing::approve(rules, &code, Utc::now()).map(|_| ()))
        .await
        .unwrap();
    let greeted = gate.admit(&s.dm("ada", "3"), Utc::now()).await;
    assert!(
        matches!(&greeted, Admission::Proceed { greeting: Some(_) }),
        "approved and greeted: {greeted:?}"
    );
    let next = gate.admit(&s.dm("ada", "4"), Utc::now()).await;
    assert_eq!(next, Admission::Proceed { greeting: None }, "greeted once");
    let other = gate.admit(&s.dm("bob", "5"), Utc::now()).await;
    assert!(
        matches!(other, Admission::Refused { .. }),
        "ada's approval is hers: {other:?}"
    );
}

async fn the_allowlist_admits_its_people_and_ignores_strangers_quietly(s: Subject) {
    s.edit_rules(|rules| {
        rules.dm_policy = DmPolicy::Allowlist;
        rules.allow_from.insert("ada".into());
    })
    .await;
    let gate = s.gate();
    let ada = gate.admit(&s.dm("ada", "1"), Utc::now()).await;
    assert_eq!(ada, Admission::Proceed { greeting: None });
    let bob = gate.admit(&s.dm("bob", "2"), Utc::now()).await;
    assert_eq!(bob, Admission::Refused { reply: None }, "a stranger hears nothing");
    // The operator's edit is seen without a restart.
    s.edit_rules(|rules| {
        rules.allow_from.insert("bob".into());
    })
    .await;
    let bob = gate.admit(&s.dm("bob", "3"), Utc::now()).await;
    assert_eq!(bob, Admission::Proceed { greeting: None });
}

async fn disabled_direct_messages_refuse_even_the_allowlist(s: Subject) {
    s.edit_rules(|rules| {
        rules.dm_policy = DmPolicy::Disabled;
        rules.allow_from.insert("ada".into());
    })
    .await;
    let ada = s.gate().admit(&s.dm("ada", "1"), Utc::now()).await;
    assert!(matches!(ada, Admission::Refused { .. }), "{ada:?}");
}
