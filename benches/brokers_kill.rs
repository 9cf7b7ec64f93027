//! Two brokers on one Postgres, one killed -9 mid-load (issue 20's first
//! target): no message lost, duplicated or reordered per user, and no
//! user's text in another user's model request, while `kill -9` takes one
//! broker down under load and it comes back on the same state folder.
//!
//! Everything real but the network edge: one throwaway PostgreSQL (the test
//! kit's), `mnemo store migrate` and two `mnemo run` processes of the
//! binary cargo built, each with its own state folder, `store.kind:
//! postgres` and Telegram in webhook mode on its own loopback port. The
//! test kit's fake Bot API plays Telegram behind a load balancer
//! ([`FakeBotApi::deliver_to`]): it posts each update, one at a time in
//! update order, to one broker (by update id) and, when the post fails or
//! is not answered 200 in time, posts it again to the other until one
//! takes it. The fake model answers `echo: <question>` after a short delay.
//!
//! Each user (a private chat) sends `turns` questions, each after the
//! previous one was answered or after `answerWaitSecs` without an answer
//! (the user does not re-send: redelivery is the platform's business).
//! Once a third of all answers have arrived, broker 0 gets SIGKILL; it is
//! started again `downSecs` later and the load runs to its end. Then both
//! brokers stop (SIGTERM) and the database is read back. Per user:
//!
//! - lost: a question whose update was acknowledged but that is not stored;
//! - duplicated: a question (or an answer) stored more than once;
//! - reordered: a question stored before one the user sent earlier;
//! - unanswered: a stored question with no answer (`re-<its msg id>`) after
//!   it (answers may follow several questions: each is stored as it comes).
//!   None is allowed (issue 42): a question broker 0 stored and did not
//!   answer before it was killed is answered when it starts again (or by
//!   broker 1's sweep); `in_flight_at_kill` says how many of the
//!   unanswered were posted to broker 0 before the kill;
//! - leaks: a model request, or a message the bot sent, that carries the
//!   canary of more than one user.
//!
//! It prints a readable report and one JSON line, and exits non-zero on any
//! loss, duplicate, reorder, leak or unexcused missing answer. turns/s is
//! the answers that came in time over the time from the first question to
//! the last such answer (the load's end also waits out the answers that
//! never came).
//!
//! `cargo bench --bench brokers_kill` runs 1,000 users × 5 turns; without
//! `--bench` (CI's `cargo test --benches`) 20 users × 4 turns. Knobs:
//! `MNEMO_KILL_USERS`, `MNEMO_KILL_TURNS`, `MNEMO_KILL_MODEL_DELAY_MS`
//! (default 20), `MNEMO_KILL_DOWN_SECS` (default 2),
//! `MNEMO_KILL_ANSWER_WAIT_SECS` (default 10).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a setup that fails should stop the run loudly"
)]

use mnemo_testkit::model::{FakeModel, request_text};
use mnemo_testkit::pg;
use mnemo_testkit::telegram::{Ack, FakeBotApi, Sent, TOKEN, text_message, user};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Chat (and user) ids are `FIRST_USER + n`.
const FIRST_USER: i64 = 7_000_000;
/// The secret both brokers register and the fake sends back.
const WEBHOOK_SECRET: &str = "bench_webhook_secret-1";
/// The longest any wait for the system as a whole may take.
const BOUND: Duration = Duration::from_secs(300);

struct Size {
    users: usize,
    turns: usize,
    model_delay: Duration,
    down: Duration,
    answer_wait: Duration,
}

impl Size {
    /// The full size under `--bench`, the CI size otherwise; the bench's
    /// own knobs from the environment override either.
    #[allow(clippy::disallowed_methods)]
    fn from_args() -> Size {
        let full = std::env::args().any(|a| a == "--bench");
        let (users, turns, down, wait) = if full { (1_000, 5, 2, 10) } else { (20, 4, 1, 5) };
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
                .unwrap_or(default)
        };
        Size {
            users: env("MNEMO_KILL_USERS", users) as usize,
            turns: env("MNEMO_KILL_TURNS", turns) as usize,
            model_delay: Duration::from_millis(env("MNEMO_KILL_MODEL_DELAY_MS", 20)),
            down: Duration::from_secs(env("MNEMO_KILL_DOWN_SECS", down)),
            answer_wait: Duration::from_secs(env("MNEMO_KILL_ANSWER_WAIT_SECS", wait)),
        }
    }
}

fn main() {
    let size = Size::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let failed = rt.block_on(run(size));
    rt.shutdown_timeout(Duration::from_secs(1));
    if failed {
        std::process::exit(1);
    }
}

/// One `mnemo run`, killed when dropped (so a failed bench leaves none).
struct Broker {
    config: PathBuf,
    home: PathBuf,
    url: String,
    logs: Vec<PathBuf>,
    child: Option<Child>,
}

impl Broker {
    /// Broker `index`'s folder and config (not started yet).
    fn new(dir: &Path, index: usize, model_url: &str, api_url: &str) -> Broker {
        let port = free_port();
        let home = dir.join(format!("broker-{index}"));
        Broker {
            config: write_config(&home, model_url, api_url, port),
            home,
            url: format!("http://127.0.0.1:{port}"),
            logs: Vec::new(),
            child: None,
        }
    }

    /// `mnemo run` on this broker's config, its log in a new file.
    fn spawn(&mut self, db_url: &str) {
        let log = self.home.join(format!("mnemo-{}.log", self.logs.len()));
        let child = mnemo(&self.config, &self.home, db_url)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("mnemo run starts");
        self.logs.push(log);
        self.child = Some(child);
    }

    /// SIGKILL (what `Child::kill` sends), reaped.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill -9");
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait for the graceful stop.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }

    fn tail(&self) -> String {
        let Some(log) = self.logs.last() else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "{} ends:\n{}",
            log.display(),
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free right now (the broker binds it a moment later).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// `<home>/config.json`: Postgres store, Telegram by webhook on `port`
/// against the fake Bot API, the fake model, open DMs, no rate limit.
fn write_config(home: &Path, model_url: &str, api_url: &str, port: u16) -> PathBuf {
    let state = home.join("state");
    let config = json!({
        "stateDir": state,
        "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" },
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_BENCH_KEY",
                   "model": "fake-1", "timeoutSecs": 30, "maxRetries": 0 },
        "channels": {
            "console": { "enabled": false },
            "telegram": { "enabled": true, "apiUrl": api_url, "mode": "webhook",
                          "webhookUrl": "https://lb.example.invalid/telegram",
                          "webhookListen": format!("127.0.0.1:{port}"), "streaming": false },
        },
        "limits": { "userMessagesPerMinute": 0 },
    });
    std::fs::create_dir_all(&state).expect("state folder");
    let path = home.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    path
}

/// The `mnemo` binary cargo built, with a clean environment.
fn mnemo(config: &Path, home: &Path, db_url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .arg("--config")
        .arg(config)
        .env_clear()
        .env("HOME", home)
        .env("USER", "bench")
        .env("MNEMO_BENCH_KEY", "sk-bench-not-a-secret")
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_WEBHOOK_SECRET", WEBHOOK_SECRET)
        .env("MNEMO_DATABASE_URL", db_url);
    command
}

/// What one user sent: the update id of each turn's question (in order).
type Asked = Vec<i64>;

/// When the kill happened, and how far the load was.
struct Kill {
    at: Instant,
    after_answers: usize,
    at_s: f64,
}

async fn run(size: Size) -> bool {
    let started = Instant::now();
    let (model, model_url) = FakeModel::start().await;
    model.set_delay(size.model_delay);
    let api = FakeBotApi::start().await;
    let db = pg::database();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut brokers: Vec<Broker> = (0..2)
        .map(|i| Broker::new(dir.path(), i, &model_url, &api.url))
        .collect();
    migrate(&brokers[0], &db.url());
    for broker in &mut brokers {
        broker.spawn(&db.url());
    }
    tokio::time::timeout(BOUND, api.wait_for_calls("setWebhook", 2))
        .await
        .unwrap_or_else(|_| panic!("the brokers never registered the webhook: {}", brokers[0].tail()));
    api.deliver_to(brokers.iter().map(|b| b.url.clone()).collect(), Duration::from_secs(30));

    let load_started = Instant::now();
    let users = Users::start(&api, &size);
    let tasks: Vec<_> = (0..size.users)
        .map(|n| {
            let users = users.clone();
            tokio::spawn(async move { users.converse(n).await })
        })
        .collect();
    let kill_after = size.users * size.turns / 3;
    wait_for(&users.answered, kill_after, &brokers).await;
    brokers[0].kill();
    let kill = Kill {
        at: Instant::now(),
        after_answers: users.answered.load(Ordering::SeqCst),
        at_s: load_started.elapsed().as_secs_f64(),
    };
    tokio::time::sleep(size.down).await;
    brokers[0].spawn(&db.url());
    let mut sent = Vec::with_capacity(size.users);
    for task in tasks {
        sent.push(task.await.expect("a user's task"));
    }
    let load_wall = load_started.elapsed();
    let answering = users
        .last_answer
        .lock()
        .expect("not poisoned")
        .map_or(load_wall, |last| last.duration_since(load_started));
    settle(&api, &users, &brokers).await;
    for broker in &mut brokers {
        broker.stop();
    }

    let stored = read_back(&db.url()).await;
    let acks = api.acks();
    let verdict = judge(&size, &sent, &stored, &acks, &kill);
    let leaks = leaks(&model, &api);
    let answered = users.answered.load(Ordering::SeqCst);
    let times = Times {
        answering,
        load: load_wall,
        wall: started.elapsed(),
    };
    report(&size, &verdict, leaks, &kill, answered, &times, &api);
    verdict.failures() + leaks > 0
}

/// `mnemo store migrate` by the real binary, then `mnemo access policy
/// telegram open` (on Postgres the rules are the database's, for both
/// brokers).
fn migrate(broker: &Broker, db_url: &str) {
    for args in [&["store", "migrate"][..], &["access", "policy", "telegram", "open"]] {
        let out = mnemo(&broker.config, &broker.home, db_url)
            .args(args)
            .output()
            .expect("mnemo runs");
        assert!(
            out.status.success(),
            "mnemo {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Waits until `counter` reaches `n`, failing with the brokers' logs.
async fn wait_for(counter: &AtomicUsize, n: usize, brokers: &[Broker]) {
    let deadline = Instant::now() + BOUND;
    while counter.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} answers within {BOUND:?}: {}\n{}",
            counter.load(Ordering::SeqCst),
            brokers[0].tail(),
            brokers[1].tail()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// After the load: every update acknowledged, and no answer arriving for
/// a second (the last turns finish before the brokers are stopped).
async fn settle(api: &FakeBotApi, users: &Users, brokers: &[Broker]) {
    let deadline = Instant::now() + BOUND;
    while api.pending_updates() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} updates never acknowledged: {}\n{}",
            api.pending_updates(),
            brokers[0].tail(),
            brokers[1].tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = users.replies.load(Ordering::SeqCst);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = users.replies.load(Ordering::SeqCst);
        if now == seen || Instant::now() > deadline {
            return;
        }
        seen = now;
    }
}

/// The users: each a private chat with its own inbox of the bot's messages.
struct Users {
    api: FakeBotApi,
    turns: usize,
    answer_wait: Duration,
    inboxes: Vec<tokio::sync::Mutex<mpsc::UnboundedReceiver<Sent>>>,
    /// Questions answered (within the wait) so far, all users.
    answered: AtomicUsize,
    /// Messages the bot sent so far, all users.
    replies: Arc<AtomicUsize>,
    /// When the latest answer (within the wait) arrived.
    last_answer: std::sync::Mutex<Option<Instant>>,
}

impl Users {
    fn start(api: &FakeBotApi, size: &Size) -> Arc<Users> {
        let mut feed = api.sent_feed();
        let (senders, inboxes): (Vec<_>, Vec<_>) = (0..size.users)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                (tx, tokio::sync::Mutex::new(rx))
            })
            .unzip();
        let replies = Arc::new(AtomicUsize::new(0));
        let counted = replies.clone();
        tokio::spawn(async move {
            while let Some(sent) = feed.recv().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let n = usize::try_from(sent.chat - FIRST_USER).expect("a bench user's chat");
                let _ = senders[n].send(sent);
            }
        });
        Arc::new(Users {
            api: api.clone(),
            turns: size.turns,
            answer_wait: size.answer_wait,
            inboxes,
            answered: AtomicUsize::new(0),
            replies,
            last_answer: std::sync::Mutex::new(None),
        })
    }

    /// User `n`'s turns, each after the previous answer or the wait: the
    /// update id of each question.
    async fn converse(&self, n: usize) -> Asked {
        let chat = FIRST_USER + n as i64;
        let mut inbox = self.inboxes[n].lock().await;
        let mut ids = Vec::with_capacity(self.turns);
        for turn in 0..self.turns {
            let question = question(n, turn);
            ids.push(
                self.api
                    .push_message(text_message(chat, user(chat, "Reader"), &question)),
            );
            let deadline = tokio::time::Instant::now() + self.answer_wait;
            // An answer to an earlier question that came late is passed over.
            while let Ok(Some(answer)) = tokio::time::timeout_at(deadline, inbox.recv()).await {
                if answer.text.contains(&question) {
                    self.answered.fetch_add(1, Ordering::SeqCst);
                    let mut last = self.last_answer.lock().expect("not poisoned");
                    *last = (*last).max(Some(answer.at));
                    break;
                }
            }
        }
        ids
    }
}

/// User `n`'s question `turn`, with the user's canary `[c<n>]`.
fn question(n: usize, turn: usize) -> String {
    format!("question {turn} from user {n} [c{n}] about tea")
}

/// The turn and user a stored question names.
fn parse_question(text: &str) -> Option<(usize, usize)> {
    let rest = text.split("question ").nth(1)?;
    let mut words = rest.split(' ');
    let turn = words.next()?.parse().ok()?;
    let n = words.nth(2)?.parse().ok()?;
    Some((turn, n))
}

/// Every user canary `[c<n>]` in `text`.
fn canaries(text: &str) -> Vec<usize> {
    text.split("[c")
        .skip(1)
        .filter_map(|rest| rest.split(']').next()?.parse().ok())
        .collect()
}

/// One stored message.
struct Row {
    role: String,
    text: String,
    msg_id: String,
}

/// Every stored message of the channel, per chat, in each user's order.
async fn read_back(url: &str) -> HashMap<i64, Vec<Row>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the database answers");
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT chat_id, role, text, msg_id FROM mnemo_messages WHERE channel = 'telegram' \
             ORDER BY user_key, seq",
            &[],
        )
        .await
        .expect("the messages");
    let mut by_chat: HashMap<i64, Vec<Row>> = HashMap::new();
    for row in rows {
        let chat: Option<String> = row.get(0);
        let chat = chat
            .and_then(|c| c.parse().ok())
            .expect("a stored message names its chat");
        by_chat.entry(chat).or_default().push(Row {
            role: row.get(1),
            text: row.get(2),
            msg_id: row.get(3),
        });
    }
    by_chat
}

#[derive(Default)]
struct Verdict {
    lost: usize,
    duplicated: usize,
    reordered: usize,
    unanswered: usize,
    in_flight_at_kill: usize,
    /// Stored questions of one user in another user's history.
    misfiled: usize,
    stored_questions: usize,
    stored_answers: usize,
}

impl Verdict {
    fn failures(&self) -> usize {
        self.lost + self.duplicated + self.reordered + self.unanswered + self.misfiled
    }
}

/// Checks every user's stored history against what the user sent.
fn judge(
    size: &Size,
    sent: &[Asked],
    stored: &HashMap<i64, Vec<Row>>,
    acks: &HashMap<i64, Ack>,
    kill: &Kill,
) -> Verdict {
    let mut verdict = Verdict::default();
    let empty = Vec::new();
    for (n, ids) in sent.iter().enumerate() {
        let rows = stored.get(&(FIRST_USER + n as i64)).unwrap_or(&empty);
        let mut count = vec![0usize; size.turns];
        let mut highest: Option<usize> = None;
        // Questions are stored as they arrive and answers after their
        // turn, so a user's questions may stand before their answers
        // (`q1 q2 a1 a2`); an answer names its question (`re-<msg id>`).
        let mut asked = std::collections::HashSet::new();
        let mut answered_ids = std::collections::HashSet::new();
        for (i, row) in rows.iter().enumerate() {
            if row.role == "assistant" {
                verdict.stored_answers += 1;
                let question = row.msg_id.strip_prefix("re-").unwrap_or_default();
                if !asked.contains(question) || !answered_ids.insert(question.to_string()) {
                    // An answer twice, or one with no question before it.
                    verdict.duplicated += 1;
                }
                continue;
            }
            asked.insert(row.msg_id.clone());
            verdict.stored_questions += 1;
            let Some((turn, _)) = parse_question(&row.text).filter(|(t, o)| *o == n && *t < size.turns) else {
                verdict.misfiled += 1;
                continue;
            };
            count[turn] += 1;
            if highest.is_some_and(|h| turn < h) {
                verdict.reordered += 1;
            }
            highest = highest.max(Some(turn));
            let reply = format!("re-{}", row.msg_id);
            let answered = rows[i + 1..]
                .iter()
                .any(|next| next.role == "assistant" && next.msg_id == reply);
            if !answered {
                verdict.unanswered += 1;
                if with_killed(acks.get(&ids[turn]), kill) {
                    verdict.in_flight_at_kill += 1;
                }
            }
        }
        for (turn, &c) in count.iter().enumerate() {
            match c {
                0 => {
                    verdict.lost += 1;
                    let ack = acks.get(&ids[turn]);
                    eprintln!(
                        "lost: user {n} turn {turn} (update {}, acknowledged by broker {:?} {:?} {} the kill)",
                        ids[turn],
                        ack.map(|a| a.target),
                        ack.map(|a| if a.at < kill.at { kill.at - a.at } else { a.at - kill.at }),
                        if ack.is_some_and(|a| a.at < kill.at) {
                            "before"
                        } else {
                            "after"
                        },
                    );
                }
                1 => {}
                more => verdict.duplicated += more - 1,
            }
        }
    }
    verdict
}

/// Whether the update was posted to broker 0 before it was killed: its
/// turn may have been in flight there (stored, not yet answered; a
/// redelivery to the other broker is then a duplicate, not answered).
fn with_killed(ack: Option<&Ack>, kill: &Kill) -> bool {
    ack.is_some_and(|ack| ack.posts.iter().any(|(target, at)| *target == 0 && *at < kill.at))
}

/// Model requests and bot messages that carry more than one user's canary.
fn leaks(model: &FakeModel, api: &FakeBotApi) -> usize {
    let mixed = |text: &str| {
        let found = canaries(text);
        found.iter().any(|c| *c != found[0])
    };
    let requests = model.requests().iter().filter(|r| mixed(&request_text(r))).count();
    let messages = api
        .sent_messages()
        .iter()
        .filter(|(chat, _, text)| {
            let owner = usize::try_from(chat - FIRST_USER).ok();
            canaries(text).iter().any(|c| Some(*c) != owner)
        })
        .count();
    requests + messages
}

/// How long the run took.
struct Times {
    /// From the first question to the last answer.
    answering: Duration,
    /// From the first question until every user was done (the last ones
    /// may have waited out an answer that never came).
    load: Duration,
    /// The whole run: database, migration, start-up, load, checks.
    wall: Duration,
}

fn report(size: &Size, verdict: &Verdict, leaks: usize, kill: &Kill, answered: usize, times: &Times, api: &FakeBotApi) {
    let turns = size.users * size.turns;
    let acks = api.acks();
    let redelivered = acks.values().filter(|a| a.posts.len() > 1).count();
    let by_broker = |i: usize| acks.values().filter(|a| a.target == i).count();
    let turns_per_s = answered as f64 / times.answering.as_secs_f64();
    let secs = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
    println!(
        "brokers_kill: {} users x {} turns on 2 brokers + Postgres; broker 0 killed -9 at {:.1} s \
         (after {} of {turns} answers), back {:.0} s later",
        size.users,
        size.turns,
        kill.at_s,
        kill.after_answers,
        size.down.as_secs_f64()
    );
    println!(
        "brokers_kill: updates acknowledged by broker 0 / 1: {} / {}; {} posted again after a failure \
         ({} failed posts)",
        by_broker(0),
        by_broker(1),
        redelivered,
        api.failed_posts()
    );
    println!(
        "brokers_kill: stored {} questions, {} answers; {answered} answered in time, the last after {:.1} s \
         ({:.0} turns/s); load {:.1} s, wall {:.1} s",
        verdict.stored_questions,
        verdict.stored_answers,
        times.answering.as_secs_f64(),
        turns_per_s,
        times.load.as_secs_f64(),
        times.wall.as_secs_f64()
    );
    println!(
        "brokers_kill: lost {}, duplicated {}, reordered {}, misfiled {}, leaks {leaks}, \
         unanswered {} (of them {} in flight at the kill)",
        verdict.lost,
        verdict.duplicated,
        verdict.reordered,
        verdict.misfiled,
        verdict.unanswered,
        verdict.in_flight_at_kill
    );
    println!(
        "{}",
        json!({
            "bench": "brokers_kill",
            "users": size.users,
            "turns": size.turns,
            "killed_at_s": (kill.at_s * 10.0).round() / 10.0,
            "killed_after_answers": kill.after_answers,
            "lost": verdict.lost,
            "duplicated": verdict.duplicated,
            "reordered": verdict.reordered,
            "misfiled": verdict.misfiled,
            "leaks": leaks,
            "unanswered": verdict.unanswered,
            "in_flight_at_kill": verdict.in_flight_at_kill,
            "redelivered": redelivered,
            "turns_per_s": turns_per_s.round(),
            "answering_s": secs(times.answering),
            "load_s": secs(times.load),
            "wall_s": secs(times.wall),
        })
    );
}
