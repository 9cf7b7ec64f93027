//! `mnemo bench`: runs [`crate::bench`] and prints a readable table on
//! stdout, then (with `--json`) one JSON object on the last line. Progress
//! goes to stderr so the table and the JSON line can be piped.

use crate::bench::instant::CHANNEL;
use crate::bench::{self, Options, Report};
use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Users talking at the same time.
    #[arg(long, default_value_t = 100)]
    pub users: usize,
    /// Turns each user sends, one after the other.
    #[arg(long, default_value_t = 50)]
    pub turns: usize,
    /// Fsync every append (`stm.fsync: true`, the product default).
    #[arg(long)]
    pub fsync: bool,
    /// `recall.enabled: false`: turns recall nothing and index nothing (as
    /// on such a channel in service, where the first search builds a
    /// user's index), to see what recalling costs per turn.
    #[arg(long)]
    pub no_recall: bool,
    /// Earlier messages each user already has, archived the way compaction
    /// leaves them, with the short-term log at its normal bound.
    #[arg(long, default_value_t = 0)]
    pub history: usize,
    /// Turns in flight at once across all users (default: all of them).
    /// A number near the core count measures each turn's own time instead
    /// of its wait for the cores behind other users' turns.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Where memory lives: `files` (a temporary state folder, or
    /// --state-dir) or `postgres` (the migrated database the variable
    /// `--database-url-env` names; the bench's channel `bench` there is
    /// emptied before and after the run).
    #[arg(long, value_enum, default_value_t = BenchStore::Files)]
    pub store: BenchStore,
    /// Brokers on the one database, for `--store postgres` (default 1): as
    /// many `App`s in this process, each with its own connection pool and
    /// state folder; user u talks to broker u % N. `--concurrency` caps the
    /// turns in flight across all of them. The files store has one broker:
    /// one broker owns a state folder.
    #[arg(long)]
    pub brokers: Option<usize>,
    /// The environment variable holding the database URL, for `--store postgres`.
    #[arg(long, default_value = "MNEMO_DATABASE_URL")]
    pub database_url_env: String,
    /// Print one JSON object with the results as the last line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchStore {
    Files,
    Postgres,
}

pub async fn run(global: &super::GlobalArgs, args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let brokers = args.brokers.unwrap_or(1);
    if brokers == 0 {
        anyhow::bail!("--brokers must be at least 1");
    }
    if args.store == BenchStore::Files && args.brokers.is_some() {
        anyhow::bail!(
            "--brokers needs --store postgres: on the files store one broker owns a state folder, \
             so there is no second broker to share it with"
        );
    }
    let options = Options {
        users: args.users,
        turns: args.turns,
        fsync: args.fsync,
        recall: !args.no_recall,
        history: args.history,
        concurrency: args.concurrency,
        state_dir: global.state_dir.clone(),
        stores: match args.store {
            BenchStore::Files => Vec::new(),
            BenchStore::Postgres => pools(args, brokers)?,
        },
    };
    // Where it writes: its own channel of the state folder, and of the database.
    match &options.state_dir {
        Some(dir) => eprintln!(
            "mnemo bench: in the state folder {} (channel `{CHANNEL}`)",
            dir.display()
        ),
        None => eprintln!("mnemo bench: in a temporary state folder"),
    }
    if !options.stores.is_empty() {
        let url = super::setup::env(&args.database_url_env).unwrap_or_default();
        eprintln!(
            "mnemo bench: in the database {} (from ${}; channel `{CHANNEL}`)",
            super::setup::safe_url(&url),
            args.database_url_env
        );
    }
    let report = bench::run(&options, &mut |line| eprintln!("mnemo bench: {line}")).await?;
    print!("{}", table(&report));
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// One connection pool per broker, as separate broker processes would
/// each open: sized for the turns that broker can have in flight (its
/// users, at most `--concurrency`), plus room for background work.
fn pools(args: &BenchArgs, brokers: usize) -> anyhow::Result<Vec<mnemo_pg::PgStore>> {
    let users_per_broker = args.users.div_ceil(brokers);
    let in_flight = args.concurrency.unwrap_or(args.users).min(users_per_broker);
    let store = crate::config::StoreConfig {
        kind: crate::config::StoreKind::Postgres,
        url_env: args.database_url_env.clone(),
        max_connections: in_flight.clamp(4, 256) + 8,
        ..crate::config::StoreConfig::default()
    };
    (0..brokers).map(|_| store.connect(&super::setup::env)).collect()
}

/// The table, then (postgres) each broker's share and what was stored.
fn table(r: &Report) -> String {
    let mut out = figures(r);
    if r.store == "postgres" {
        out.push_str(&format!(
            "  brokers           {} (user u on broker u % {})\n",
            r.brokers, r.brokers
        ));
        for b in &r.per_broker {
            out.push_str(&format!(
                "    {:<16}{} users, {} turns, {:.0} turns/s, p50 {} µs, p99 {} µs\n",
                format!("broker {}", b.broker),
                b.users,
                b.total_turns,
                b.turns_per_s,
                b.p50_us,
                b.p99_us
            ));
        }
        if let Some(stored) = r.stored_messages {
            out.push_str(&format!(
                "  stored messages   {stored} (2 per turn: {})\n",
                if stored == 2 * r.total_turns as i64 {
                    "none lost"
                } else {
                    "NOT 2 per turn"
                }
            ));
        }
    }
    out
}

fn figures(r: &Report) -> String {
    let opt = |v: Option<f64>, unit: &str| v.map_or("n/a".to_string(), |v| format!("{v:.1} {unit}"));
    format!(
        "mnemo bench: {store} store, {users} users × {turns} turns, fsync {fsync}, recall {recall}, \
         history {history}, at most {concurrency} in flight\n\
         \x20 turns             {total}\n\
         \x20 wall time         {elapsed:.3} s\n\
         \x20 turns/s           {tps:.0}\n\
         \x20 per turn p50      {p50} µs\n\
         \x20 per turn p99      {p99} µs\n\
         \x20 per turn max      {max} µs\n\
         \x20 per turn mean     {mean:.1} µs\n\
         \x20 first turns       p50 {first_p50} µs, p99 {first_p99} µs (each user's first: session loaded)\n\
         \x20 later turns       p50 {later_p50} µs, p99 {later_p99} µs\n\
         \x20 CPU per turn      {cpu}\n\
         \x20 peak RSS          {rss}\n\
         \x20 seeding           {seed:.2} s\n",
        store = r.store,
        users = r.users,
        turns = r.turns,
        recall = if r.recall { "on" } else { "off" },
        fsync = if r.fsync { "on" } else { "off" },
        history = r.history,
        concurrency = r.concurrency,
        total = r.total_turns,
        elapsed = r.elapsed_s,
        tps = r.turns_per_s,
        p50 = r.p50_us,
        p99 = r.p99_us,
        max = r.max_us,
        mean = r.mean_us,
        first_p50 = r.first_p50_us,
        first_p99 = r.first_p99_us,
        later_p50 = r.later_p50_us,
        later_p99 = r.later_p99_us,
        cpu = opt(r.cpu_us_per_turn, "µs"),
        rss = opt(r.peak_rss_mb, "MB"),
        seed = r.seed_s,
    )
}
