//! `mnemo bench`: what one turn costs the broker itself, measured on the
//! real [`App`] in process — dispatch, access gate, the durable appends,
//! the context from session state, the reply, background compaction —
//! against an instant in-process model ([`instant`]), in a temporary state
//! folder (or one the operator names). Operators use it for capacity
//! planning; BENCHMARKS.md is written from it.
//!
//! It must not measure anything but the product's own path: no shortcut
//! around the `App`, no special case in the pipeline for bench traffic.
//! Bench users talk on their own channel, `bench`, with `dmPolicy: open`
//! and the per-user rate limit off (a benchmark is not abuse). With
//! `--store postgres` the memory is in the database `MNEMO_DATABASE_URL`
//! names (migrated; the bench's channel `bench` is emptied before and after,
//! and its open rules are its row in the database while it runs),
//! and the CPU figure is the broker's alone, not the database server's.
//! There `--brokers N` runs N brokers on the one database ([`brokers`]).

pub mod brokers;
pub mod instant;
pub mod procfs;
pub mod seed;

use crate::access::{AccessFile, DmPolicy};
use crate::app::{App, AppParts};
use crate::channel_memory::ChannelMemory;
use crate::config::LimitsConfig;
use crate::model::{Model, ModelSummarizer};
use anyhow::{Context as _, Result, bail};
use chrono::Utc;
use instant::{CHANNEL, InstantModel};
use mnemo_channels::{ChatKind, Inbound};
use mnemo_sessions::Layout;
use mnemo_sessions::recall::Recall;
use mnemo_sessions::session::Sessions;
use mnemo_sessions::store::files::FileStore;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub users: usize,
    pub turns: usize,
    /// `stm.fsync` for the bench channel.
    pub fsync: bool,
    /// `recall.enabled` for the bench channel (on by default, as in service).
    pub recall: bool,
    /// Earlier messages each user already has (see [`seed::seed_history`]).
    pub history: usize,
    /// Turns in flight at once across all users; `None`: every user's
    /// (each user still sends one turn after the other). With a small
    /// number the per-turn times are the broker's work, not queueing
    /// behind other users' turns for the cores.
    pub concurrency: Option<usize>,
    /// Where to keep state; `None`: a temporary folder, removed afterwards.
    pub state_dir: Option<PathBuf>,
    /// Memory in this Postgres database instead of the state folder
    /// (`--store postgres`), one pool per broker (`--brokers`: as many
    /// brokers as pools; none: the files store, one broker): the bench's
    /// channel `bench` is emptied before and after the run.
    pub stores: Vec<mnemo_pg::PgStore>,
}

impl Options {
    /// Brokers serving the users: one per pool, at least one.
    pub fn brokers(&self) -> usize {
        self.stores.len().max(1)
    }
}

/// What a run measured. Serialized as the `--json` line.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `files` or `postgres`.
    pub store: &'static str,
    pub users: usize,
    pub turns: usize,
    pub fsync: bool,
    pub recall: bool,
    pub history: usize,
    /// The `--concurrency` asked for (`users` when not given).
    pub concurrency: usize,
    /// The most turns that were in flight at one time.
    pub max_in_flight: usize,
    pub total_turns: usize,
    /// Wall time of the turns (seeding excluded).
    pub elapsed_s: f64,
    pub turns_per_s: f64,
    /// Per turn, from handing the message to the `App` to its reply being
    /// sent: the broker's own time.
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
    /// The same, for each user's first turn only: the session is created
    /// or loaded from its files (with recall, the user's index too).
    pub first_p50_us: u64,
    pub first_p99_us: u64,
    /// The same, for every turn after a user's first: a session already
    /// in memory, as for anyone in the middle of a conversation.
    pub later_p50_us: u64,
    pub later_p99_us: u64,
    /// Process CPU time (user + system, all threads) from the first turn
    /// until the background work the turns caused (folds) is done, divided
    /// by the turns; `None` where `/proc` is not available.
    pub cpu_us_per_turn: Option<f64>,
    /// Peak resident memory of the process (`VmHWM`), MB, over the whole
    /// run: the broker, seeding the history (the recall index written
    /// through `Recall::reindex`, in this process) and every turn.
    pub peak_rss_mb: Option<f64>,
    /// The same, read when seeding was done, before the first turn.
    pub seed_peak_rss_mb: Option<f64>,
    /// How long seeding the history took.
    pub seed_s: f64,
    /// Brokers that served the turns (`--brokers`; 1 on the files store).
    pub brokers: usize,
    /// Each broker's share: user `u` on broker `u % brokers`.
    pub per_broker: Vec<brokers::BrokerReport>,
    /// Messages the run added to the database (all channels; 2 per turn,
    /// the question and its answer, when nothing else writes there and no
    /// turn was lost); `None` on the files store.
    pub stored_messages: Option<i64>,
}

/// How long one reply may take before the run is called stuck (an instant
/// model answers in microseconds; this catches a gate that went quiet).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the bench; `progress` gets a line now and then (for stderr).
pub async fn run(options: &Options, progress: &mut dyn FnMut(String)) -> Result<Report> {
    if options.users == 0 || options.turns == 0 {
        bail!("--users and --turns must be at least 1");
    }
    if options.concurrency == Some(0) {
        bail!("--concurrency must be at least 1");
    }
    let temp;
    let root = match &options.state_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("mnemo-bench-")
                .tempdir()
                .context("creating a temporary state folder")?;
            temp.path().to_path_buf()
        }
    };
    let folders = brokers::take_folders(&root, options)?;
    if let Some(store) = options.stores.first() {
        prepare_database(store, progress).await?;
    }
    let brokers = brokers::open(folders, options)?;
    let first = &brokers[0].app;
    let memory = first
        .memories()
        .get(CHANNEL)
        .context("the bench channel has no memory")?;

    let seeding = Instant::now();
    if options.history > 0 {
        seed(first, memory, options, progress).await?;
    }
    let seed_s = seeding.elapsed().as_secs_f64();
    let seed_peak_rss_mb = peak_rss_mb();

    let stored_before = match options.stores.first() {
        Some(store) => Some(store.counts().await?.messages),
        None => None,
    };
    let cpu_before = cpu_time();
    let (per_user, elapsed, max_in_flight) = run_turns(&brokers, options, progress).await?;
    // The last replies are stored right after they are sent, and the folds
    // the turns made due run in the background, at a lower priority: their
    // CPU is the turns' too, so it is counted once they are done.
    brokers::settle(&brokers).await;
    let cpu = cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let mut stored_messages = None;
    if let (Some(store), Some(before)) = (options.stores.first(), stored_before) {
        stored_messages = Some(store.counts().await?.messages - before);
        // Gone, and vacuumed: the next run (the same user names) must not
        // walk this run's dead index entries.
        store.delete_channel(CHANNEL).await?;
        mnemo_pg::access::remove(store, CHANNEL).await?;
        store.vacuum().await?;
    }
    let per_broker = brokers::per_broker(&per_user, brokers.len(), elapsed);
    let mut latencies = Latencies::default();
    for turns in per_user {
        latencies.add_user(turns);
    }
    let mut report = summarize(options, latencies, elapsed, cpu, seed_s);
    report.max_in_flight = max_in_flight;
    report.per_broker = per_broker;
    report.stored_messages = stored_messages;
    report.seed_peak_rss_mb = seed_peak_rss_mb;
    Ok(report)
}

/// Readies the database for the run: migrated, the bench channel of an
/// earlier run gone, and open to anyone (its rules are its row there).
async fn prepare_database(store: &mnemo_pg::PgStore, progress: &mut dyn FnMut(String)) -> Result<()> {
    mnemo_pg::migrate::check(store).await.context("the bench's database")?;
    let gone = store.delete_channel(CHANNEL).await?;
    if gone > 0 {
        progress(format!(
            "removed {gone} users a previous bench left in channel `{CHANNEL}`"
        ));
        store.vacuum().await?;
    }
    crate::access::db::edit(store, CHANNEL, |rules| *rules = open_rules())
        .await
        .context("opening the bench channel in the database")?;
    Ok(())
}

/// Every user's turns, user `u` on broker `u % N`, at most `--concurrency`
/// in flight across all brokers: each user's turn times (by user), the
/// wall time, and the most turns that were in flight at once.
async fn run_turns(
    brokers: &[brokers::Broker],
    options: &Options,
    progress: &mut dyn FnMut(String),
) -> Result<(Vec<Vec<u64>>, Duration, usize)> {
    let concurrency = options.concurrency.unwrap_or(options.users);
    let on = if brokers.len() > 1 {
        format!(" on {} brokers", brokers.len())
    } else {
        String::new()
    };
    progress(format!(
        "running {} users × {} turns{on}, at most {concurrency} in flight",
        options.users, options.turns
    ));
    let flight = Arc::new(InFlight::new(concurrency));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for u in 0..options.users {
        let broker = &brokers[brokers::broker_of(u, brokers.len())];
        let sent = broker.channel.listen(&chat_id(u));
        let (app, flight, turns) = (broker.app.clone(), flight.clone(), options.turns);
        tasks.spawn(async move { Ok::<_, anyhow::Error>((u, user_turns(app, u, turns, sent, flight).await?)) });
    }
    let mut per_user = vec![Vec::new(); options.users];
    while let Some(done) = tasks.join_next().await {
        let (u, times) = done.context("a bench user task panicked")??;
        per_user[u] = times;
    }
    Ok((per_user, started.elapsed(), flight.max()))
}

/// Every user's history, seeded below the memory seam, in bulk, as each
/// store loads fastest.
async fn seed(app: &App, memory: &ChannelMemory, options: &Options, progress: &mut dyn FnMut(String)) -> Result<()> {
    match options.stores.first() {
        Some(store) => {
            let pg = mnemo_pg::PgChannel::new(
                store.clone(),
                CHANNEL,
                memory.config.clone(),
                app.parts().summarizer.clone(),
            );
            seed_all_pg(&pg, options, progress).await?;
            // As after any bulk load: the planner's statistics first.
            store.analyze().await?;
        }
        None => {
            let files = FileStore::without_model(memory.stm.clone(), memory.config.clone());
            seed_all(files.sessions(), &memory.recall, options, progress).await?;
        }
    }
    Ok(())
}

/// Seeds every user's history in the database, four users at a time
/// (each is one transaction of bulk inserts).
async fn seed_all_pg(pg: &mnemo_pg::PgChannel, options: &Options, progress: &mut dyn FnMut(String)) -> Result<()> {
    let now = Utc::now();
    let slots = Arc::new(tokio::sync::Semaphore::new(4));
    let mut seeding = tokio::task::JoinSet::new();
    for u in 0..options.users {
        let (pg, slots, history) = (pg.clone(), slots.clone(), options.history);
        seeding.spawn(async move {
            let _slot = slots.acquire_owned().await?;
            seed::seed_history_pg(&pg, &user_id(u), history, now).await
        });
    }
    seeded(seeding, options, " (postgres)", progress).await
}

/// The cap on turns in flight, and the most that ever were.
struct InFlight {
    slots: tokio::sync::Semaphore,
    now: AtomicUsize,
    max: AtomicUsize,
}

impl InFlight {
    fn new(cap: usize) -> InFlight {
        InFlight {
            slots: tokio::sync::Semaphore::new(cap),
            now: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
        }
    }

    /// Waits for a slot (not timed: a turn starts once it has one).
    async fn enter(&self) -> Result<Slot<'_>> {
        let permit = self.slots.acquire().await.context("the bench's slots closed")?;
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(now, Ordering::Relaxed);
        Ok(Slot {
            flight: self,
            _permit: permit,
        })
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }
}

/// One turn's place in flight, given back when dropped.
struct Slot<'a> {
    flight: &'a InFlight,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.flight.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Seeds every user's history (see [`seed::seed_history`]), one user per
/// core at a time, on the blocking pool: it is all file work.
async fn seed_all(
    sessions: &Sessions,
    recall: &Recall,
    options: &Options,
    progress: &mut dyn FnMut(String),
) -> Result<()> {
    let now = Utc::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let slots = Arc::new(tokio::sync::Semaphore::new(cores));
    let mut seeding = tokio::task::JoinSet::new();
    for u in 0..options.users {
        let (sessions, recall, slots) = (sessions.clone(), recall.clone(), slots.clone());
        let history = options.history;
        let runtime = tokio::runtime::Handle::current();
        seeding.spawn(async move {
            let _slot = slots.acquire_owned().await?;
            tokio::task::spawn_blocking(move || {
                runtime.block_on(seed::seed_history(&sessions, &recall, &user_id(u), history, now))
            })
            .await?
        });
    }
    seeded(seeding, options, "", progress).await
}

/// Waits for every seeding task, saying how far it got every tenth of the
/// users (`store` names the store after the count, or nothing).
async fn seeded(
    mut seeding: tokio::task::JoinSet<Result<()>>,
    options: &Options,
    store: &str,
    progress: &mut dyn FnMut(String),
) -> Result<()> {
    let mut done = 0;
    while let Some(seeded) = seeding.join_next().await {
        seeded.context("a seeding task panicked")??;
        done += 1;
        if done % (options.users / 10).max(1) == 0 {
            progress(format!(
                "seeded {done} of {} users with {} messages each{store}",
                options.users, options.history
            ));
        }
    }
    Ok(())
}

/// The app's parts for a bench in `root`: the instant model (also as the
/// summarizer, so compaction runs as in service), product limits except
/// the per-user rate limit, which is off.
pub fn app_parts(root: &Path) -> AppParts {
    let model: Arc<dyn Model> = Arc::new(InstantModel);
    AppParts {
        state_root: root.to_path_buf(),
        reminders: Default::default(),
        system_prompt: "You are a helpful assistant.".into(),
        tz: chrono_tz::UTC,
        limits: LimitsConfig {
            user_messages_per_minute: 0,
            ..LimitsConfig::default()
        },
        model_timeout: Duration::from_secs(5),
        summarizer: Arc::new(ModelSummarizer::new(model.clone())),
        // The instant model has no tool calling, so this offers none.
        max_tool_rounds: crate::model::config::DEFAULT_MAX_TOOL_ROUNDS as usize,
        model,
        streaming: Default::default(),
        store: None,
        attachments: Default::default(),
    }
}

/// Writes the bench channel's `sessions/config.json` (product defaults but
/// `stm.fsync`) and an `access.json` that lets anyone talk. Refuses a state
/// folder that already has a bench channel, so nothing is overwritten.
pub fn prepare_channel(root: &Path, fsync: bool, recall: bool) -> Result<()> {
    let layout = Layout::new(root, CHANNEL);
    if layout.root().exists() {
        bail!(
            "{} already exists; give --state-dir a folder without a `bench` channel (or remove it)",
            layout.root().display()
        );
    }
    std::fs::create_dir_all(layout.root()).with_context(|| format!("creating {}", layout.root().display()))?;
    let config = serde_json::json!({ "stm": { "fsync": fsync }, "recall": { "enabled": recall } });
    std::fs::write(layout.config_path(), config.to_string())
        .with_context(|| format!("writing {}", layout.config_path().display()))?;
    crate::access::file::write(&layout.access_path(), &open_rules())?;
    Ok(())
}

/// Anyone may talk on the bench channel.
fn open_rules() -> AccessFile {
    AccessFile {
        dm_policy: DmPolicy::Open,
        ..AccessFile::default()
    }
}

/// One user's turns, one after the other as a person would send them; each
/// turn's time from submit to reply sent, in µs.
async fn user_turns(
    app: App,
    u: usize,
    turns: usize,
    mut sent: mpsc::UnboundedReceiver<Instant>,
    flight: Arc<InFlight>,
) -> Result<Vec<u64>> {
    let mut out = Vec::with_capacity(turns);
    for t in 0..turns {
        let message = message(u, t);
        let _slot = flight.enter().await?;
        let submitted = Instant::now();
        app.submit(message).await;
        let replied = tokio::time::timeout(REPLY_TIMEOUT, sent.recv())
            .await
            .ok()
            .flatten()
            .with_context(|| format!("no reply to bench user {u}'s turn {t} within {REPLY_TIMEOUT:?}"))?;
        out.push(u64::try_from(replied.duration_since(submitted).as_micros()).unwrap_or(u64::MAX));
    }
    Ok(out)
}

fn user_id(u: usize) -> String {
    format!("bench-user-{u}")
}

/// The direct chat of bench user `u` (replies are timed per chat).
pub fn chat_id(u: usize) -> String {
    format!("D-{}", user_id(u))
}

/// Bench user `u`'s turn `t`.
pub fn message(u: usize, t: usize) -> Inbound {
    Inbound {
        channel: CHANNEL.into(),
        user_id: user_id(u),
        user_name: Some(format!("Bench {u}")),
        chat_id: chat_id(u),
        chat_kind: ChatKind::Direct,
        thread_id: None,
        msg_id: format!("{u}-{t}"),
        text: format!("Turn {t}: how long until the build finishes, and what should I check first?"),
        ts: Utc::now(),
        addressed: true,
        interaction: None,
        attachments: Vec::new(),
    }
}

/// Per-turn times, each user's first turn apart from the rest.
#[derive(Default)]
struct Latencies {
    first: Vec<u64>,
    later: Vec<u64>,
}

impl Latencies {
    /// One user's turns, in the order sent.
    fn add_user(&mut self, turns: Vec<u64>) {
        let mut turns = turns.into_iter();
        self.first.extend(turns.next());
        self.later.extend(turns);
    }
}

/// Sorted times and their percentiles (nearest rank below).
struct Sorted(Vec<u64>);

impl Sorted {
    fn new(mut times: Vec<u64>) -> Sorted {
        times.sort_unstable();
        Sorted(times)
    }

    fn at(&self, percent: usize) -> u64 {
        let n = self.0.len();
        self.0
            .get((n * percent / 100).min(n.saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
}

fn summarize(options: &Options, latencies: Latencies, elapsed: Duration, cpu: Option<Duration>, seed_s: f64) -> Report {
    let (first, later) = (Sorted::new(latencies.first), Sorted::new(latencies.later));
    let all = Sorted::new(first.0.iter().chain(&later.0).copied().collect());
    let n = all.0.len();
    let secs = elapsed.as_secs_f64();
    Report {
        store: if options.stores.is_empty() { "files" } else { "postgres" },
        users: options.users,
        turns: options.turns,
        fsync: options.fsync,
        recall: options.recall,
        history: options.history,
        concurrency: options.concurrency.unwrap_or(options.users),
        max_in_flight: 0,
        total_turns: n,
        elapsed_s: secs,
        turns_per_s: if secs > 0.0 { n as f64 / secs } else { 0.0 },
        p50_us: all.at(50),
        p99_us: all.at(99),
        max_us: all.0.last().copied().unwrap_or(0),
        mean_us: if n > 0 {
            all.0.iter().sum::<u64>() as f64 / n as f64
        } else {
            0.0
        },
        first_p50_us: first.at(50),
        first_p99_us: first.at(99),
        later_p50_us: later.at(50),
        later_p99_us: later.at(99),
        cpu_us_per_turn: cpu.map(|c| c.as_secs_f64() * 1e6 / n.max(1) as f64),
        peak_rss_mb: peak_rss_mb(),
        seed_peak_rss_mb: None,
        seed_s,
        brokers: options.brokers(),
        per_broker: Vec::new(),
        stored_messages: None,
    }
}

/// User + system CPU time of the whole process.
fn cpu_time() -> Option<Duration> {
    procfs::cpu_times("self").map(procfs::CpuTimes::total)
}

/// The process's peak resident set, MB.
pub fn peak_rss_mb() -> Option<f64> {
    procfs::peak_rss_kb("self").map(|kb| kb as f64 / 1024.0)
}
