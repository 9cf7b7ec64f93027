//! The command line (DESIGN §9): `run`, `chat`, `config check`,
//! `sessions report|export|maintain`. Argument parsing only; each verb's
//! work lives in a submodule here.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "mnemo",
    version,
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
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective config (secrets redacted); exit non-zero on an error.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Storage per channel and user: files, bytes, messages, last activity.
    Report {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
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
mod check;
mod serve;
mod setup;
mod store;

pub use access::AccessCommand;
pub use setup::Setup;

/// Runs the verb; `Ok(code)` for outcomes that are not errors of mnemo
/// itself (a failed config check exits 1 with its own message).
pub async fn execute(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => check::run(&cli.global),
        Command::Chat => serve::chat(&cli.global).await,
        Command::Run => serve::run(&cli.global).await,
        Command::Sessions(cmd) => store::run(&cli.global, cmd).await,
        Command::Access(cmd) => access::run(&cli.global, cmd),
    }
}
