//! The store's specifications, in one test binary: `foundation` (the STM log
//! and its crash rules, locks, archive, config, context), `memory` (compaction,
//! profile, facts, topics, session state, recall) and `upkeep` (commands,
//! expiry, digests). Run one area with `cargo test -p mnemo-sessions --test
//! suite <module>::`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod foundation;
mod memory;
mod upkeep;

/// `user`'s memory on the file store of `stm`'s channel (its own
/// `sessions/config.json`), as a turn or a command sees it.
pub async fn files_user(
    stm: &mnemo_sessions::stm::Stm,
    user: &mnemo_sessions::SafeName,
) -> Box<dyn mnemo_sessions::store::UserMemory> {
    use mnemo_sessions::store::MemoryStore as _;
    let config = mnemo_sessions::config::SessionConfig::load(&stm.layout().config_path()).unwrap();
    let store = mnemo_sessions::store::files::FileStore::without_model(stm.clone(), config);
    store.user(user).await.unwrap()
}
