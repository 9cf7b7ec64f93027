//! The lock registry: serialises one user's writers, forgets idle users.

use mnemo_sessions::SafeName;
use mnemo_sessions::locks::LockRegistry;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_registry_does_not_grow_after_many_users_come_and_go() {
    let registry = LockRegistry::new();
    let channel = SafeName::of("slack");
    let mut tasks = Vec::new();
    for task in 0..20 {
        let (registry, channel) = (registry.clone(), channel.clone());
        tasks.push(tokio::spawn(async move {
            for user in 0..500 {
                // Users overlap between tasks, so entries are shared and contended.
                let user = SafeName::of(&format!("user-{}", (user * 7 + task) % 300));
                let guard = registry.lock(&channel, &user).await;
                tokio::task::yield_now().await;
                drop(guard);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(registry.live_entries(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_users_lock_admits_one_holder_at_a_time() {
    let registry = LockRegistry::new();
    let (channel, user) = (SafeName::of("slack"), SafeName::of("U1"));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (registry, channel, user) = (registry.clone(), channel.clone(), user.clone());
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let _guard = registry.lock(&channel, &user).await;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 1);
    assert_eq!(registry.live_entries(), 0);
}
