//! The dispatcher (DESIGN §2): one ordered queue per (channel, user), so a
//! user's messages are answered in arrival order while different users run
//! concurrently. Each queue is served by its own task, which ends after the
//! queue has been idle for a while, so the map does not grow without bound.
//!
//! It knows nothing of memory or models: it hands each message to a
//! [`TurnHandler`], and a message that finds its user's queue full to
//! [`TurnHandler::overflow`].

use async_trait::async_trait;
use mnemo_channels::Inbound;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// What the dispatcher does with a message.
#[async_trait]
pub trait TurnHandler: Send + Sync + 'static {
    /// Handles one message; called in arrival order per (channel, user).
    async fn handle(&self, message: Inbound);
    /// The user's queue was full: the message is not taken (tell them).
    async fn overflow(&self, message: Inbound);
}

type QueueKey = (String, String);

/// Cheap to clone; all clones feed the same queues.
#[derive(Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
}

struct Shared {
    /// A std mutex: it is never held across an `.await`, and holding it
    /// while a worker decides to retire makes submit-vs-retire race-free.
    queues: Mutex<HashMap<QueueKey, mpsc::Sender<Inbound>>>,
    handler: Arc<dyn TurnHandler>,
    depth: usize,
    idle: Duration,
    /// Every worker holds a clone; [`Dispatcher::drain`] waits for all of
    /// them to be dropped (the mini-redis shutdown pattern).
    alive: Mutex<Option<mpsc::Sender<()>>>,
    all_done: tokio::sync::Mutex<mpsc::Receiver<()>>,
}

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The user's queue is full; the handler's `overflow` was told.
    QueueFull,
    /// The dispatcher is draining for shutdown.
    Closed,
}

impl Dispatcher {
    /// `depth`: messages one user may have waiting; `idle`: how long a
    /// user's worker lingers with nothing to do.
    pub fn new(handler: Arc<dyn TurnHandler>, depth: usize, idle: Duration) -> Self {
        let (alive, all_done) = mpsc::channel(1);
        Dispatcher {
            shared: Arc::new(Shared {
                queues: Mutex::new(HashMap::new()),
                handler,
                depth: depth.max(1),
                idle,
                alive: Mutex::new(Some(alive)),
                all_done: tokio::sync::Mutex::new(all_done),
            }),
        }
    }

    /// Queues `message` behind its user's earlier ones.
    pub async fn submit(&self, message: Inbound) -> Result<(), Refused> {
        let rejected = {
            let mut queues = lock(&self.shared.queues);
            let Some(alive) = lock(&self.shared.alive).clone() else {
                return Err(Refused::Closed);
            };
            let key = (message.channel.clone(), message.user_id.clone());
            let sender = queues
                .entry(key.clone())
                .or_insert_with(|| self.spawn_worker(key, alive));
            match sender.try_send(message) {
                Ok(()) => None,
                Err(mpsc::error::TrySendError::Full(m)) => Some(m),
                // The worker is gone only if it panicked; refuse rather than lose silently.
                Err(mpsc::error::TrySendError::Closed(m)) => {
                    tracing::error!(channel = %m.channel, "a user's queue worker died; message refused");
                    return Err(Refused::Closed);
                }
            }
        };
        match rejected {
            None => Ok(()),
            Some(message) => {
                self.shared.handler.overflow(message).await;
                Err(Refused::QueueFull)
            }
        }
    }

    /// Number of users with a live queue.
    pub fn live_queues(&self) -> usize {
        lock(&self.shared.queues).len()
    }

    /// Messages waiting in all queues (not counting the ones being handled).
    pub fn queued_messages(&self) -> usize {
        lock(&self.shared.queues)
            .values()
            .map(|q| q.max_capacity() - q.capacity())
            .sum()
    }

    /// Stops taking messages, lets every queue run dry, and waits up to
    /// `grace` for the workers to finish. Returns whether they all did.
    pub async fn drain(&self, grace: Duration) -> bool {
        lock(&self.shared.queues).clear();
        lock(&self.shared.alive).take();
        let mut all_done = self.shared.all_done.lock().await;
        tokio::time::timeout(grace, all_done.recv()).await.is_ok()
    }

    fn spawn_worker(&self, key: QueueKey, alive: mpsc::Sender<()>) -> mpsc::Sender<Inbound> {
        let (tx, mut rx) = mpsc::channel::<Inbound>(self.shared.depth);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let _alive = alive;
            loop {
                match tokio::time::timeout(shared.idle, rx.recv()).await {
                    Ok(Some(message)) => shared.handler.handle(message).await,
                    Ok(None) => break,
                    Err(_idle) => {
                        let mut queues = lock(&shared.queues);
                        if rx.is_empty() {
                            queues.remove(&key);
                            break;
                        }
                    }
                }
            }
        });
        tx
    }
}

/// Locks a std mutex, recovering from poisoning: the maps it guards stay
/// consistent even if a holder panicked (every update is a single call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mnemo_channels::ChatKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Recorder {
        seen: Mutex<Vec<(String, String)>>,
        overflowed: AtomicUsize,
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl TurnHandler for Recorder {
        async fn handle(&self, m: Inbound) {
            let _permit = self.gate.acquire().await;
            tokio::task::yield_now().await;
            lock(&self.seen).push((m.user_id, m.text));
        }
        async fn overflow(&self, _m: Inbound) {
            self.overflowed.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn msg(user: &str, text: String) -> Inbound {
        Inbound {
            channel: "test".into(),
            user_id: user.into(),
            user_name: None,
            chat_id: user.into(),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: text.clone(),
            text,
            ts: Utc::now(),
            addressed: true,
            interaction: None,
        }
    }

    fn recorder(permits: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            seen: Mutex::default(),
            overflowed: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(permits),
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn each_users_messages_are_handled_in_arrival_order() {
        let rec = recorder(1000);
        let d = Dispatcher::new(rec.clone(), 1000, Duration::from_secs(5));
        for i in 0..100 {
            for u in ["a", "b", "c"] {
                d.submit(msg(u, format!("{u}{i}"))).await.unwrap();
            }
        }
        assert!(d.drain(Duration::from_secs(10)).await);
        let seen = lock(&rec.seen).clone();
        assert_eq!(seen.len(), 300);
        for u in ["a", "b", "c"] {
            let texts: Vec<_> = seen.iter().filter(|(x, _)| x == u).map(|(_, t)| t.clone()).collect();
            assert_eq!(texts, (0..100).map(|i| format!("{u}{i}")).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_tells_the_handler() {
        let rec = recorder(0); // the first message blocks its worker
        let d = Dispatcher::new(rec.clone(), 2, Duration::from_secs(5));
        let mut refused = 0;
        for i in 0..6 {
            if d.submit(msg("a", format!("m{i}"))).await == Err(Refused::QueueFull) {
                refused += 1;
            }
            tokio::task::yield_now().await;
        }
        assert!(refused >= 3, "refused {refused}");
        assert_eq!(rec.overflowed.load(Ordering::SeqCst), refused);
        rec.gate.add_permits(100);
        assert!(d.drain(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn idle_queues_are_dropped() {
        let rec = recorder(1000);
        let d = Dispatcher::new(rec.clone(), 10, Duration::from_millis(20));
        for u in 0..50 {
            d.submit(msg(&format!("u{u}"), "hi".into())).await.unwrap();
        }
        for _ in 0..200 {
            if d.live_queues() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(d.live_queues(), 0);
        assert_eq!(lock(&rec.seen).len(), 50);
        // A user who comes back gets a fresh queue.
        d.submit(msg("u1", "again".into())).await.unwrap();
        assert!(d.drain(Duration::from_secs(5)).await);
        assert_eq!(lock(&rec.seen).len(), 51);
    }

    #[tokio::test]
    async fn a_drained_dispatcher_refuses_new_messages() {
        let d = Dispatcher::new(recorder(10), 10, Duration::from_secs(1));
        assert!(d.drain(Duration::from_secs(1)).await);
        assert_eq!(d.submit(msg("a", "late".into())).await, Err(Refused::Closed));
    }
}
