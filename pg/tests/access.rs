//! The access rules' rows (`mnemo_pg::access`) against a real PostgreSQL:
//! a revision per write (also a write by hand), the poll that sends the
//! document only when it changed, and the read-modify-write that loses no
//! writer's change when several race — also on a channel with no row yet.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

use mnemo_pg::access::{self, AccessRow, Edit, Poll};
use mnemo_pg::migrate;
use mnemo_pg::{PgError, PgStore};
use mnemo_testkit::pg;
use std::time::Duration;

async fn migrated() -> (PgStore, String) {
    let url = pg::database().url();
    let store = PgStore::connect(&url, 16, Duration::from_secs(10)).unwrap();
    migrate::migrate(&store).await.unwrap();
    (store, url)
}

/// `sql` on its own connection, as an operator would run it.
async fn by_hand(url: &str, sql: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
}

/// Appends `item` to the document's `items` list.
async fn push(store: &PgStore, channel: &str, item: &str) -> Result<Option<i64>, PgError> {
    let ((), revision) = access::update(store, channel, |doc| {
        let mut value: serde_json::Value = serde_json::from_str(doc.unwrap_or("{}")).unwrap();
        let items = value
            .as_object_mut()
            .unwrap()
            .entry("items")
            .or_insert(serde_json::json!([]));
        items.as_array_mut().unwrap().push(item.into());
        Ok::<_, PgError>(Edit {
            out: (),
            write: Some(value.to_string()),
        })
    })
    .await?;
    Ok(revision)
}

#[tokio::test]
async fn writes_get_new_revisions_and_a_poll_sends_the_document_only_when_it_changed() {
    let (store, url) = migrated().await;
    assert_eq!(access::read(&store, "tg").await.unwrap(), None);
    assert_eq!(access::poll(&store, "tg", None).await.unwrap(), Poll::Missing);

    let first = push(&store, "tg", "a").await.unwrap().unwrap();
    let row = access::read(&store, "tg").await.unwrap().unwrap();
    assert_eq!(row.revision, first);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&row.doc).unwrap(),
        serde_json::json!({"items": ["a"]})
    );
    assert_eq!(access::poll(&store, "tg", Some(first)).await.unwrap(), Poll::Same);
    assert_eq!(
        access::poll(&store, "tg", None).await.unwrap(),
        Poll::Changed(row.clone()),
        "a cache that saw no row gets the document"
    );

    let second = push(&store, "tg", "b").await.unwrap().unwrap();
    assert!(second > first);
    assert!(matches!(
        access::poll(&store, "tg", Some(first)).await.unwrap(),
        Poll::Changed(AccessRow { revision, .. }) if revision == second
    ));

    // An operator's edit by hand gets a new revision too (the trigger), so
    // the brokers' caches see it.
    by_hand(
        &url,
        "UPDATE mnemo_access SET doc = '{\"dmPolicy\": \"open\"}' WHERE channel = 'tg'",
    )
    .await;
    let edited = access::read(&store, "tg").await.unwrap().unwrap();
    assert!(edited.revision > second, "{edited:?}");
    assert!(matches!(
        access::poll(&store, "tg", Some(second)).await.unwrap(),
        Poll::Changed(_)
    ));

    // A deleted row is missing again, and a new one never reuses a revision.
    by_hand(&url, "DELETE FROM mnemo_access WHERE channel = 'tg'").await;
    assert_eq!(
        access::poll(&store, "tg", Some(edited.revision)).await.unwrap(),
        Poll::Missing
    );
    let again = push(&store, "tg", "c").await.unwrap().unwrap();
    assert!(again > edited.revision);
    assert_eq!(access::channels(&store).await.unwrap(), ["tg"]);
}

#[tokio::test]
async fn racing_writers_lose_nothing_also_on_a_channel_with_no_row_yet() {
    let (store, _) = migrated().await;
    let writers: Vec<_> = (0..12)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { push(&store, "slack", &format!("w{i}")).await.unwrap() })
        })
        .collect();
    let mut revisions = Vec::new();
    for w in writers {
        revisions.push(w.await.unwrap().unwrap());
    }
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), 12, "each write its own revision");
    let doc: serde_json::Value =
        serde_json::from_str(&access::read(&store, "slack").await.unwrap().unwrap().doc).unwrap();
    let mut items: Vec<String> = serde_json::from_value(doc["items"].clone()).unwrap();
    items.sort();
    let mut want: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    want.sort();
    assert_eq!(items, want, "no writer's change lost");
}

#[tokio::test]
async fn a_change_that_writes_nothing_or_fails_leaves_the_row_as_it_was() {
    let (store, _) = migrated().await;
    // Nothing to write on a channel without a row: still no row.
    let (seen, revision) = access::update(&store, "discord", |doc| {
        Ok::<_, PgError>(Edit {
            out: doc.map(str::to_string),
            write: None,
        })
    })
    .await
    .unwrap();
    assert_eq!((seen, revision), (None, None));
    assert_eq!(access::read(&store, "discord").await.unwrap(), None);

    let written = push(&store, "discord", "x").await.unwrap();
    let failed = access::update(&store, "discord", |_| {
        Err::<Edit<()>, _>(PgError::Pool("the change refused".into()))
    })
    .await;
    assert!(failed.is_err());
    let row = access::read(&store, "discord").await.unwrap().unwrap();
    assert_eq!(Some(row.revision), written, "a failed change writes nothing");
    let (seen, revision) = access::update(&store, "discord", |doc| {
        Ok::<_, PgError>(Edit {
            out: doc.map(str::to_string),
            write: None,
        })
    })
    .await
    .unwrap();
    assert_eq!((seen, revision), (Some(row.doc), written));
}
