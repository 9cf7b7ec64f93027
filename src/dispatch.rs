//! The dispatcher (DESIGN §2): one ordered queue per (channel, user), so a
//! user's messages are answered in arrival order while different users run
//! concurrently.
//!
//! A user's queue has two steps, each served by a task of its own: *intake*
//! ([`TurnHandler::take`]: the access check and the durable store, quick)
//! and the *turn* ([`TurnHandler::answer`]: the model call, slow). A message
//! is taken as soon as it arrives, not when the turns before it are done,
//! so the platform can be told it is safe while it waits (issue 42: what
//! waited unstored in memory was lost by a crash). Both steps keep arrival
//! order; a message already taken (found unanswered at start) joins the
//! queue behind what is there ([`Dispatcher::submit_taken`]). The two tasks
//! end after the queue has been idle for a while, so the map does not grow
//! without bound.
//!
//! It knows nothing of memory or models: it hands each message to a
//! [`TurnHandler`], and a message that finds its user's queue full to
//! [`TurnHandler::overflow`].

use async_trait::async_trait;
use mnemo_channels::Inbound;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What the dispatcher does with a message.
#[async_trait]
pub trait TurnHandler: Send + Sync + 'static {
    /// A message taken in, ready for its turn.
    type Taken: Send + 'static;

    /// The queue a message belongs to (its user, as the store names them):
    /// messages with the same key are taken and answered in order.
    fn queue_key(&self, message: &Inbound) -> String;

    /// Takes one message in, in arrival order per queue, without waiting
    /// for the turns before it: `None` when it needs no turn (refused, a
    /// repeat, not kept).
    async fn take(&self, message: Inbound) -> Option<Self::Taken>;

    /// Whether the messages after `taken` wait to be taken until its turn
    /// is done (a `/session clear` must not see, nor delete, a question
    /// sent after it).
    fn holds_intake(&self, _taken: &Self::Taken) -> bool {
        false
    }

    /// The turn of a taken message, in arrival order per queue; `backlog`
    /// says how many of the queue's messages wait behind it.
    async fn answer(&self, taken: Self::Taken, backlog: &Backlog);

    /// The user's queue was full: the message is not taken (tell them).
    async fn overflow(&self, message: Inbound);
}

type QueueKey = (String, String);

/// How many messages a queue holds, the one in its turn included.
pub struct Backlog(Arc<AtomicUsize>);

impl Backlog {
    /// Messages waiting behind the one in its turn (taken or not).
    pub fn behind(&self) -> usize {
        self.0.load(Ordering::SeqCst).saturating_sub(1)
    }

    /// A backlog with nothing behind (for a turn run outside a queue).
    pub fn none() -> Backlog {
        Backlog(Arc::new(AtomicUsize::new(1)))
    }
}

/// Cheap to clone; all clones feed the same queues.
pub struct Dispatcher<H: TurnHandler> {
    shared: Arc<Shared<H>>,
}

impl<H: TurnHandler> Clone for Dispatcher<H> {
    fn clone(&self) -> Self {
        Dispatcher {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// What waits in a user's queue.
enum Item<T> {
    /// Just arrived: to be taken, then answered (boxed: an `Inbound` is
    /// large beside a handle).
    New(Box<Inbound>),
    /// Taken before (found unanswered at start): only its turn is left.
    Taken(Box<T>),
}

/// One user's queue: where its messages go, and how many are in it.
struct Queue<T> {
    items: mpsc::UnboundedSender<Item<T>>,
    /// Messages in the queue, taken or not, until their turn ends (or
    /// intake said no turn is needed): what `limits.userQueueDepth` bounds.
    waiting: Arc<AtomicUsize>,
}

struct Shared<H: TurnHandler> {
    /// A std mutex: it is never held across an `.await`, and holding it
    /// while a worker decides to retire makes submit-vs-retire race-free.
    queues: Mutex<HashMap<QueueKey, Queue<H::Taken>>>,
    handler: Arc<H>,
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

impl<H: TurnHandler> Dispatcher<H> {
    /// `depth`: messages one user may have waiting; `idle`: how long a
    /// user's worker lingers with nothing to do.
    pub fn new(handler: Arc<H>, depth: usize, idle: Duration) -> Self {
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

    /// Queues `message` behind its user's earlier ones; refused when the
    /// user already has `depth` messages waiting.
    pub async fn submit(&self, message: Inbound) -> Result<(), Refused> {
        let key = (message.channel.clone(), self.shared.handler.queue_key(&message));
        match self.enqueue(key, Item::New(Box::new(message)), true) {
            Ok(()) => Ok(()),
            Err((Item::New(message), Refused::QueueFull)) => {
                self.shared.handler.overflow(*message).await;
                Err(Refused::QueueFull)
            }
            Err((_, refused)) => Err(refused),
        }
    }

    /// Queues the turn of a message taken before (found stored and
    /// unanswered at start) behind the queue `key`'s earlier messages; never
    /// refused for depth: it is stored already.
    pub fn submit_taken(&self, channel: &str, key: &str, taken: H::Taken) -> Result<(), Refused> {
        self.enqueue(
            (channel.to_string(), key.to_string()),
            Item::Taken(Box::new(taken)),
            false,
        )
        .map_err(|(_, refused)| refused)
    }

    fn enqueue(&self, key: QueueKey, item: Item<H::Taken>, bounded: bool) -> Result<(), (Item<H::Taken>, Refused)> {
        let mut queues = lock(&self.shared.queues);
        let Some(alive) = lock(&self.shared.alive).clone() else {
            return Err((item, Refused::Closed));
        };
        let queue = queues
            .entry(key.clone())
            .or_insert_with(|| self.spawn_workers(key, alive));
        if bounded && queue.waiting.load(Ordering::SeqCst) >= self.shared.depth {
            return Err((item, Refused::QueueFull));
        }
        queue.waiting.fetch_add(1, Ordering::SeqCst);
        queue.items.send(item).map_err(|mpsc::error::SendError(item)| {
            // The worker is gone only if it panicked; refuse rather than lose silently.
            tracing::error!("a user's queue worker died; message refused");
            (item, Refused::Closed)
        })
    }

    /// Whether the queue `key` of `channel` is live (has work or just had).
    pub fn has_queue(&self, channel: &str, key: &str) -> bool {
        lock(&self.shared.queues).contains_key(&(channel.to_string(), key.to_string()))
    }

    /// Number of users with a live queue.
    pub fn live_queues(&self) -> usize {
        lock(&self.shared.queues).len()
    }

    /// Messages waiting in all queues (counting the ones being handled).
    pub fn queued_messages(&self) -> usize {
        lock(&self.shared.queues)
            .values()
            .map(|q| q.waiting.load(Ordering::SeqCst))
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

    /// The intake task of a new queue, which starts its turn task.
    fn spawn_workers(&self, key: QueueKey, alive: mpsc::Sender<()>) -> Queue<H::Taken> {
        let (items, mut inbox) = mpsc::unbounded_channel::<Item<H::Taken>>();
        let (turns, mut due) = mpsc::unbounded_channel::<Turn<H::Taken>>();
        let waiting = Arc::new(AtomicUsize::new(0));
        let shared = Arc::clone(&self.shared);
        let (left, alive_too) = (Arc::clone(&waiting), alive.clone());
        tokio::spawn(async move {
            let _alive = alive_too;
            let backlog = Backlog(Arc::clone(&left));
            while let Some((taken, done)) = due.recv().await {
                shared.handler.answer(*taken, &backlog).await;
                left.fetch_sub(1, Ordering::SeqCst);
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
        });
        let shared = Arc::clone(&self.shared);
        let left = Arc::clone(&waiting);
        tokio::spawn(async move {
            let _alive = alive;
            loop {
                match tokio::time::timeout(shared.idle, inbox.recv()).await {
                    Ok(Some(Item::New(message))) => match shared.handler.take(*message).await {
                        Some(taken) if shared.handler.holds_intake(&taken) => {
                            let (done, turn_done) = oneshot::channel();
                            send_turn(&turns, (Box::new(taken), Some(done)), &left);
                            // Dropped unanswered only if the turn panicked.
                            let _ = turn_done.await;
                        }
                        Some(taken) => send_turn(&turns, (Box::new(taken), None), &left),
                        None => {
                            left.fetch_sub(1, Ordering::SeqCst);
                        }
                    },
                    Ok(Some(Item::Taken(taken))) => send_turn(&turns, (taken, None), &left),
                    Ok(None) => break,
                    Err(_idle) => {
                        // Retire only when the turn task is idle too, so a
                        // queue made again for this user never runs a turn
                        // beside one of this queue's.
                        let mut queues = lock(&shared.queues);
                        if inbox.is_empty() && left.load(Ordering::SeqCst) == 0 {
                            queues.remove(&key);
                            break;
                        }
                    }
                }
            }
        });
        Queue { items, waiting }
    }
}

/// A taken message for the turn task, and who waits for its turn to end.
/// Boxed, like [`Item`]'s messages: a queue's channels allocate their
/// slots in blocks of 32, and every user with a live queue keeps a block
/// of each (`mnemo bench --no-recall`, 100 users: peak RSS 21.8–22.9 MB
/// unboxed, 19.6–21.5 MB boxed).
type Turn<T> = (Box<T>, Option<oneshot::Sender<()>>);

/// Hands a taken message to the queue's turn task (gone only if a turn
/// panicked: then the message is counted out and logged, not waited for).
fn send_turn<T>(turns: &mpsc::UnboundedSender<T>, taken: T, waiting: &AtomicUsize) {
    if turns.send(taken).is_err() {
        waiting.fetch_sub(1, Ordering::SeqCst);
        tracing::error!("a user's turn worker died; a taken message waits for the next start");
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

    struct Recorder {
        /// Texts taken in, in the order intake saw them.
        taken: Mutex<Vec<String>>,
        seen: Mutex<Vec<(String, String)>>,
        overflowed: AtomicUsize,
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl TurnHandler for Recorder {
        type Taken = Inbound;
        fn queue_key(&self, m: &Inbound) -> String {
            m.user_id.clone()
        }
        async fn take(&self, m: Inbound) -> Option<Inbound> {
            lock(&self.taken).push(m.text.clone());
            Some(m)
        }
        async fn answer(&self, m: Inbound, _backlog: &Backlog) {
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
            attachments: Vec::new(),
        }
    }

    fn recorder(permits: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            taken: Mutex::default(),
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
    async fn messages_are_taken_while_their_users_turn_is_still_running() {
        let rec = recorder(0); // every turn blocks
        let d = Dispatcher::new(rec.clone(), 10, Duration::from_secs(5));
        for i in 0..5 {
            d.submit(msg("a", format!("m{i}"))).await.unwrap();
        }
        for _ in 0..2000 {
            if lock(&rec.taken).len() == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(*lock(&rec.taken), ["m0", "m1", "m2", "m3", "m4"]);
        assert!(lock(&rec.seen).is_empty(), "no turn ran yet");
        assert_eq!(d.queued_messages(), 5);
        rec.gate.add_permits(100);
        assert!(d.drain(Duration::from_secs(5)).await);
        assert_eq!(lock(&rec.seen).len(), 5);
    }

    #[tokio::test]
    async fn a_message_taken_before_is_answered_in_order_with_new_ones_and_never_refused() {
        let rec = recorder(0);
        let d = Dispatcher::new(rec.clone(), 1, Duration::from_secs(5));
        d.submit_taken("test", "a", msg("a", "stored0".into())).unwrap();
        d.submit_taken("test", "a", msg("a", "stored1".into())).unwrap();
        assert_eq!(d.submit(msg("a", "new".into())).await, Err(Refused::QueueFull));
        rec.gate.add_permits(100);
        for _ in 0..2000 {
            if d.queued_messages() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        d.submit(msg("a", "new".into())).await.unwrap();
        assert!(d.drain(Duration::from_secs(5)).await);
        let seen: Vec<_> = lock(&rec.seen).iter().map(|(_, t)| t.clone()).collect();
        assert_eq!(seen, ["stored0", "stored1", "new"]);
        assert_eq!(*lock(&rec.taken), ["new"], "a stored message is not taken again");
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
