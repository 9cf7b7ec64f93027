//! The command line (DESIGN §9): `run`, `chat`, `config check`,
//! `access pair|allow|revoke|list|policy|groups`,
//! `sessions report|export|maintain|forget|reindex`, `backup`, `restore`,
//! `health`, `completions`, `man`, `bench`, `store migrate|status|copy`. Argument parsing only; each verb's work lives in
//! a submodule here. Besides `setup.rs`, clap reads two variables here
//! (`MNEMO_CONFIG`, `MNEMO_STATE_DIR`, the `env` of `--config` and
//! `--state-dir`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// `mnemo --version`: the package version and the git revision built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("MNEMO_GIT_REV"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "mnemo",
    version = VERSION,
    about = "A chat broker bot that gives stateless model calls a memory"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The app config file (default: ./config.json, then ~/.mnemo/config.json).
    #[arg(long, global = true, env = "MNEMO_CONFIG")]
    pub config: Option<PathBuf>,
    /// The state folder; overrides the config's `stateDir`.
    #[arg(long, global = true, env = "MNEMO_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve every configured channel until SIGINT/SIGTERM.
    Run,
    /// Chat on the console (stdin/stdout) with memory.
    Chat,
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Who may talk to the bot: pairing codes, allowFrom, groups, dmPolicy.
    #[command(subcommand)]
    Access(AccessCommand),
    /// Look after stored memory.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Write the whole state folder to one .tar.gz (safe while the bot runs).
    Backup {
        /// Where to write the backup.
        #[arg(long)]
        out: PathBuf,
    },
    /// Exit 0 when a bot (`run` or `chat`) on the state folder answers on
    /// its control socket within 5 s, else 1 (the image's HEALTHCHECK).
    Health,
    /// Print a shell completion script (bash, zsh, fish) to stdout.
    Completions { shell: clap_complete::Shell },
    /// Print the man pages (roff) of mnemo and every subcommand to stdout,
    /// generated from the same definitions as --help; or write them as files.
    Man {
        /// Write `mnemo.1` and one `mnemo-<verb>.1` per subcommand into this
        /// folder (created if missing) instead of printing them.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Unpack a backup into the state folder (empty, unless --force).
    Restore {
        /// A file written by `mnemo backup`.
        file: PathBuf,
        /// Delete what is in the state folder first.
        #[arg(long)]
        force: bool,
    },
    /// The Postgres store (`store.kind: postgres`): schema migrations,
    /// status, copying memory between the files and the database.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Measure the broker's own cost per turn: the real app, an instant
    /// in-process model, a temporary state folder (or --state-dir).
    Bench(BenchArgs),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective config (secrets redacted); exit non-zero on
    /// anything `run` would refuse.
    Check {
        /// Also ask the model (a tiny request) and each enabled platform
        /// (an authenticated call that sends nothing) whether they work.
        #[arg(long)]
        online: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Apply the schema migrations the database lacks (safe to run again,
    /// and from several brokers at once).
    Migrate,
    /// The database's schema version, pgvector, and what it holds.
    Status {
        /// One JSON document on stdout instead of the text.
        #[arg(long)]
        json: bool,
    },
    /// Copy memory between the files (the state folder) and the database
    /// (`store.urlEnv`), user by user, verified; run again to resume.
    Copy(CopyArgs),
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Storage per channel and user: files, bytes, messages, last activity.
    Report {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
        /// One JSON document on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Everything stored about one user, as one .tar.gz.
    Export {
        #[arg(long)]
        channel: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Run maintenance now (expiry, rotation, summaries), with progress.
    Maintain {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
        /// The reports as one JSON document on stdout (progress goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Delete everything stored about one user (a deletion request); works
    /// while the bot runs.
    Forget {
        #[arg(long)]
        channel: String,
        #[arg(long)]
        user: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Model tokens spent per user and purpose (answer, tools, summary,
    /// digest), and each channel's total, on the configured store.
    Usage {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
        /// From this day on (YYYY-MM-DD; each user's own day). Default:
        /// the last 30 days.
        #[arg(long)]
        since: Option<chrono::NaiveDate>,
        /// One JSON document on stdout instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild every user's recall index from the stored files, with
    /// progress on stderr (the bot also rebuilds an index on its own when
    /// it finds it missing or damaged).
    Reindex {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
    },
}

mod access;
mod bench;
mod check;
mod copy;
mod database;
mod ids;
mod keep;
mod man;
mod serve;
mod setup;
mod store;

pub use access::AccessCommand;
pub use bench::BenchArgs;
pub use copy::CopyArgs;
pub use setup::Setup;

/// An error and its causes on one line, each cause once: errors that
/// already quote their source in their message (`cannot read X: {source}`)
/// would otherwise print it twice ("model: model: …").
pub fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Runs the verb; `Ok(code)` for outcomes that are not errors of mnemo
/// itself (a failed config check exits 1 with its own message).
pub async fn execute(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Config(ConfigCommand::Check { online }) => check::run(&cli.global, online).await,
        Command::Chat => serve::chat(&cli.global).await,
        Command::Run => serve::run(&cli.global).await,
        Command::Sessions(cmd) => store::run(&cli.global, cmd).await,
        Command::Store(cmd) => database::run(&cli.global, cmd).await,
        Command::Backup { out } => keep::backup(&cli.global, &out).await,
        Command::Restore { file, force } => keep::restore(&cli.global, &file, force),
        Command::Health => keep::health(&cli.global).await,
        Command::Completions { shell } => {
            // Rendered first, then written: `clap_complete` panics on a
            // write error, and `mnemo completions bash | head` closes the pipe.
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "mnemo",
                &mut script,
            );
            man::write_stdout(&script)
        }
        Command::Man { out: None } => man::print(),
        Command::Man { out: Some(dir) } => man::write_to(&dir),
        Command::Access(cmd) => access::run(&cli.global, cmd).await,
        Command::Bench(args) => bench::run(&cli.global, &args).await,
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot write x: {source}")]
    struct Write {
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let e = anyhow::Error::new(Write {
            source: std::io::Error::other("disk full"),
        })
        .context("saving the profile");
        assert_eq!(
            format!("{e:#}"),
            "saving the profile: cannot write x: disk full: disk full"
        );
        assert_eq!(super::error_text(&e), "saving the profile: cannot write x: disk full");
    }
}
