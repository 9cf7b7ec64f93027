//! `mnemo store migrate|status`: the Postgres store's schema and state,
//! for the database the config's `store` names (`store.kind: postgres`).
//! `store copy` is `copy.rs` (it works whatever `store.kind` says).

use super::{GlobalArgs, Setup, StoreCommand};
use crate::config::StoreKind;
use anyhow::{Context as _, Result, bail};
use mnemo_pg::{PgStore, migrate};
use std::process::ExitCode;

pub async fn run(global: &GlobalArgs, command: StoreCommand) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    match command {
        StoreCommand::Copy(args) => super::copy::run(&setup, args).await,
        StoreCommand::Migrate => {
            let store = open(&setup)?;
            eprintln!("mnemo: migrating {}", setup.database_place());
            migrate_now(&store).await
        }
        StoreCommand::Status { json } => {
            let store = open(&setup)?;
            let place = setup.database_place();
            eprintln!("mnemo: status of {place}");
            status(&store, &place, json).await
        }
    }
}

async fn migrate_now(store: &PgStore) -> Result<ExitCode> {
    let done = migrate::migrate(store).await.context("migrating the database")?;
    if done.applied.is_empty() {
        println!("The database schema is at version {}: nothing to do.", done.to);
    } else {
        for step in &done.applied {
            println!("applied {step}");
        }
        println!("The database schema is now at version {} (was {}).", done.to, done.from);
    }
    println!("embeddings: {}", done.vectors);
    Ok(ExitCode::SUCCESS)
}

async fn status(store: &PgStore, place: &str, json: bool) -> Result<ExitCode> {
    let version = migrate::version(store).await.context("reading the schema version")?;
    let vectors = store.vectors().await.context("looking for pgvector")?;
    let counts = if version > 0 { Some(store.counts().await?) } else { None };
    let per_user = store.recall_index_per_user().await?;
    if json {
        let doc = serde_json::json!({
            "kind": "postgres",
            "database": place,
            "schemaVersion": version,
            "schemaLatest": migrate::latest(),
            "pgvector": vectors.to_string(),
            "users": counts.map(|c| c.users),
            "messages": counts.map(|c| c.messages),
            "archived": counts.map(|c| c.archived),
            "recallIndexPerUser": per_user,
        });
        println!("{doc}");
    } else {
        println!("store: postgres");
        println!("schema: version {version} (this mnemo: {})", migrate::latest());
        let search = if vectors == mnemo_pg::Vectors::InUse {
            "recall searches by full text and, with recall.embeddings set, by vectors"
        } else {
            "recall searches by full text"
        };
        println!("embeddings: {vectors}; {search}");
        println!(
            "recall index: {}",
            if per_user {
                "per user (btree_gin)"
            } else {
                "shared by all users (btree_gin not installed: recall slows as the database grows)"
            }
        );
        if let Some(c) = counts {
            println!(
                "holds: {} users, {} messages ({} archived)",
                c.users, c.messages, c.archived
            );
        }
    }
    if version != migrate::latest() {
        eprintln!("the schema is not at this mnemo's version: run `mnemo store migrate`");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn open(setup: &Setup) -> Result<PgStore> {
    if setup.config.store.kind != StoreKind::Postgres {
        bail!(
            "the config keeps memory in files (store.kind is `files`): `mnemo store` works on a Postgres store; \
             set \"store\": {{\"kind\": \"postgres\", \"urlEnv\": \"MNEMO_DATABASE_URL\"}} in the config"
        );
    }
    setup.config.store.connect(&super::setup::env)
}
