//! Usage on the seam: tokens added per user, day and purpose sum, on the
//! user's day and on the channel's; a second broker (or a restart) sees
//! the same numbers; the report lists each user's rows and the channel's
//! totals; `/session clear all` deletes the user's rows, never another's
//! nor the channel's total.

use super::specs;
use super::subject::Subject;
use chrono::NaiveDate;
use mnemo_sessions::SafeName;
use mnemo_sessions::usage::{Days, Purpose, Spent, UsageRow};

specs![
    spending_sums_per_user_and_day_and_on_the_channels_day,
    another_broker_sees_and_adds_to_the_same_count,
    the_report_lists_users_and_the_channel_total_since_a_day,
    clear_all_deletes_the_users_usage_only,
    export_bundles_the_users_usage_as_the_files_hold_it,
];

async fn export_bundles_the_users_usage_as_the_files_hold_it(s: Subject) {
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 100, 20))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&ada), on(6), spent(Purpose::Summary, 300, 30))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&bob), on(5), spent(Purpose::Answer, 4242, 4343))
        .await
        .unwrap();
    let bundle = s.say("ada", "export").await.export.unwrap();
    let files = super::lifecycle::unpack(&bundle);
    let (_, ledger) = files
        .iter()
        .find(|(name, _)| name.contains("usage/"))
        .unwrap_or_else(|| panic!("{:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>()));
    let ledger: serde_json::Value = serde_json::from_str(ledger).unwrap();
    assert_eq!(
        ledger,
        serde_json::json!({
            "2026-12-05": {"answer": {"in": 100, "out": 20}},
            "2026-12-06": {"summary": {"in": 300, "out": 30}}
        })
    );
    assert!(
        files.iter().all(|(_, text)| !text.contains("4242")),
        "never another user's"
    );
    let preview = s.say("ada", "clear all").await.text;
    assert!(!preview.contains(" 0 "), "{preview}");
}

fn day(d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 12, d).unwrap()
}

fn spent(purpose: Purpose, tokens_in: u64, tokens_out: u64) -> Spent {
    Spent {
        purpose,
        tokens_in,
        tokens_out,
    }
}

/// The user's day and the channel's the same.
fn on(d: u32) -> Days {
    Days {
        user: day(d),
        channel: day(d),
    }
}

async fn spending_sums_per_user_and_day_and_on_the_channels_day(s: Subject) {
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 100, 20))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 50, 5))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Summary, 300, 30))
        .await
        .unwrap();
    // Late in the evening west of the channel: the user's day is still the 5th, the channel's the 6th.
    let west = Days {
        user: day(5),
        channel: day(6),
    };
    s.store
        .add_usage(Some(&bob), west, spent(Purpose::Answer, 7, 3))
        .await
        .unwrap();
    // The channel's own work (digests) is no user's.
    s.store
        .add_usage(None, on(5), spent(Purpose::Digest, 1000, 100))
        .await
        .unwrap();

    assert_eq!(s.store.usage(&ada, day(5)).await.unwrap(), 505);
    assert_eq!(s.store.usage(&bob, day(5)).await.unwrap(), 10);
    assert_eq!(s.store.usage(&bob, day(6)).await.unwrap(), 0);
    assert_eq!(s.store.usage(&SafeName::of("cy"), day(5)).await.unwrap(), 0);
    assert_eq!(s.store.channel_usage(day(5)).await.unwrap(), 505 + 1100);
    assert_eq!(s.store.channel_usage(day(6)).await.unwrap(), 10);
    assert_eq!(s.store.channel_usage(day(7)).await.unwrap(), 0);
}

async fn another_broker_sees_and_adds_to_the_same_count(s: Subject) {
    let ada = SafeName::of("ada");
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 100, 20))
        .await
        .unwrap();
    let other = s.another_broker();
    assert_eq!(other.usage(&ada, day(5)).await.unwrap(), 120);
    other
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 1, 2))
        .await
        .unwrap();
    assert_eq!(other.usage(&ada, day(5)).await.unwrap(), 123);
    assert_eq!(other.channel_usage(day(5)).await.unwrap(), 123);
    if s.store.shared() {
        // Brokers sharing a store see each other's spending at once.
        assert_eq!(s.store.usage(&ada, day(5)).await.unwrap(), 123);
        // Adds at the same instant sum, none lost.
        let adds = (0..20).map(|i| {
            let store = if i % 2 == 0 { s.store.clone() } else { other.clone() };
            let ada = ada.clone();
            tokio::spawn(async move { store.add_usage(Some(&ada), on(5), spent(Purpose::Tools, 10, 0)).await })
        });
        for add in adds.collect::<Vec<_>>() {
            add.await.unwrap().unwrap();
        }
        assert_eq!(s.store.usage(&ada, day(5)).await.unwrap(), 323);
        assert_eq!(other.channel_usage(day(5)).await.unwrap(), 323);
    }
}

async fn the_report_lists_users_and_the_channel_total_since_a_day(s: Subject) {
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    s.store
        .add_usage(Some(&ada), on(3), spent(Purpose::Answer, 9, 9))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 100, 20))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&bob), on(5), spent(Purpose::Summary, 40, 4))
        .await
        .unwrap();
    s.store
        .add_usage(None, on(5), spent(Purpose::Digest, 1000, 100))
        .await
        .unwrap();
    let row = |user: Option<&SafeName>, purpose, tokens_in, tokens_out| UsageRow {
        user: user.cloned(),
        day: day(5),
        purpose,
        tokens_in,
        tokens_out,
    };
    assert_eq!(
        s.store.usage_report(day(4)).await.unwrap(),
        [
            row(Some(&ada), Purpose::Answer, 100, 20),
            row(Some(&bob), Purpose::Summary, 40, 4),
            row(None, Purpose::Answer, 100, 20),
            row(None, Purpose::Summary, 40, 4),
            row(None, Purpose::Digest, 1000, 100),
        ]
    );
    assert_eq!(s.store.usage_report(day(1)).await.unwrap().len(), 7);
    assert!(s.store.usage_report(day(6)).await.unwrap().is_empty());
}

async fn clear_all_deletes_the_users_usage_only(s: Subject) {
    let (ada, bob) = (SafeName::of("ada"), SafeName::of("bob"));
    // On Postgres a user exists once something of theirs is stored.
    s.chat("ada", 0, 2, "hello").await;
    s.chat("bob", 0, 2, "hello").await;
    s.store
        .add_usage(Some(&ada), on(5), spent(Purpose::Answer, 100, 20))
        .await
        .unwrap();
    s.store
        .add_usage(Some(&bob), on(5), spent(Purpose::Answer, 1, 1))
        .await
        .unwrap();
    s.say("ada", "clear all confirm").await;
    assert_eq!(s.store.usage(&ada, day(5)).await.unwrap(), 0);
    assert_eq!(s.store.usage(&bob, day(5)).await.unwrap(), 2);
    // The channel's total names no one and stays (operator accounting).
    assert_eq!(s.store.channel_usage(day(5)).await.unwrap(), 122);
    let report = s.store.usage_report(day(1)).await.unwrap();
    assert!(report.iter().all(|r| r.user.as_ref() != Some(&ada)), "{report:?}");
    // A restarted broker does not bring them back.
    assert_eq!(s.another_broker().usage(&ada, day(5)).await.unwrap(), 0);
}
