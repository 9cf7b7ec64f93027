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
    let options = Options {
        users: args.users,
        turns: args.turns,
        fsync: args.fsync,
        recall: !args.no_recall,
        history: args.history,
        concurrency: args.concurrency,
        state_dir: global.state_dir.clone(),
        store: match args.store {
            BenchStore::Files => None,
            BenchStore::Postgres => {
                let store = crate::config::StoreConfig {
                    kind: crate::config::StoreKind::Postgres,
                    url_env: args.database_url_env.clone(),
                    max_connections: args.concurrency.unwrap_or(args.users).clamp(4, 256) + 8,
                    ..crate::config::StoreConfig::default()
                };
                Some(store.connect(&super::setup::env)?)
            }
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
    if options.store.is_some() {
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

fn table(r: &Report) -> String {
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
