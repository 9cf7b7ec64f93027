//! `mnemo chat` and `mnemo run`: start logging, the app, the scheduler and
//! the channels; stop them all cleanly on end of input or a signal.

use super::{GlobalArgs, Setup};
use crate::app::App;
use crate::config::ChannelsConfig;
use crate::scheduler::Scheduler;
use crate::{logging, shutdown};
use anyhow::{Context as _, Result, bail};
use mnemo_channels::Channel;
use mnemo_channels::console::ConsoleChannel;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

/// The console chat, as the local OS user.
pub async fn chat(global: &GlobalArgs) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    // stderr stays quiet in a chat (silent on a terminal, where a log line
    // would land inside the prompt); the log files get everything.
    let stderr_level = if std::io::stdin().is_terminal() { "off" } else { "warn" };
    let _log = logging::init(
        &setup.config.logging,
        Some(stderr_level),
        Some(&setup.state_root.join("logs")),
        secrets(&setup),
        super::setup::env("RUST_LOG"),
    );
    let console: Arc<dyn Channel> =
        Arc::new(ConsoleChannel::new(ConsoleChannel::local_user(&super::setup::env)).with_banner(banner(&setup)));
    let piped = !std::io::stdin().is_terminal();
    let (code, app) = serve_app(setup, vec![console]).await?;
    // A script piping questions in learns that none was answered.
    let (answered, failed) = app.answers();
    if piped && answered == 0 && failed > 0 {
        eprintln!("mnemo: no question was answered: the model failed {failed} time(s) (see the log for why)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(code)
}

/// What an interactive console says first (`mnemo chat`, or `mnemo run`
/// with the console on a terminal): who answers, where memory and the logs
/// live, and how to see the memory commands.
fn banner(setup: &Setup) -> String {
    let model = setup.model_config().map_or_else(
        || "no model configured".to_string(),
        |m| format!("{} ({})", m.model, m.provider),
    );
    format!(
        "mnemo — chatting with {model}\nmemory: {}\nlogs: {} (nothing is logged here while you chat)\n/session help lists the memory commands; Ctrl-D or Ctrl-C quits",
        setup.state_root.display(),
        setup.state_root.join("logs").display()
    )
}

/// Every configured channel, until SIGINT/SIGTERM.
pub async fn run(global: &GlobalArgs) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    // When the console channel owns this terminal, log lines on stderr
    // would land inside the user's prompt: they go to the files only, and
    // the banner says where.
    let console_owns_terminal = setup.config.channels.console.enabled && std::io::stdin().is_terminal();
    let _log = logging::init(
        &setup.config.logging,
        console_owns_terminal.then_some("off"),
        Some(&setup.state_root.join("logs")),
        secrets(&setup),
        super::setup::env("RUST_LOG"),
    );
    let mut channels = platform_channels(&setup.config.channels, &super::setup::env)?;
    if setup.config.channels.console.enabled {
        if std::io::stdin().is_terminal() {
            channels.push(Arc::new(
                ConsoleChannel::new(ConsoleChannel::local_user(&super::setup::env)).with_banner(banner(&setup)),
            ));
        } else {
            tracing::info!("console channel enabled but stdin is not a terminal; not serving it under `run`");
        }
    }
    if channels.is_empty() {
        bail!("no channel to serve: enable one under `channels` in the config, or use `mnemo chat` for the console");
    }
    serve(setup, channels).await
}

/// Every enabled platform channel; when some cannot start (a missing token,
/// a bad setting), every one of their problems at once, so a first run is
/// fixed in one go rather than one variable per attempt.
fn platform_channels(channels: &ChannelsConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Arc<dyn Channel>>> {
    let (channels, problems): (Vec<_>, Vec<_>) = crate::platforms::each_enabled(channels, env)
        .into_iter()
        .map(|(_, built)| built)
        .partition(Result::is_ok);
    let problems: Vec<String> = problems
        .into_iter()
        .filter_map(Result::err)
        .map(|e| super::error_text(&e))
        .collect();
    match problems.as_slice() {
        [] => Ok(channels.into_iter().filter_map(Result::ok).collect()),
        [one] => anyhow::bail!("{one}"),
        many => anyhow::bail!("{} channels cannot start:\n  - {}", many.len(), many.join("\n  - ")),
    }
}

/// The secret values the config names, so every log line can be scrubbed.
pub(super) fn secrets(setup: &Setup) -> crate::access::secrets::Scrubber {
    crate::access::secrets::configured(&setup.config, setup.model_config().as_ref(), &super::setup::env)
}

async fn serve(setup: Setup, channels: Vec<Arc<dyn Channel>>) -> Result<ExitCode> {
    Ok(serve_app(setup, channels).await?.0)
}

/// [`serve`], returning the app too (for what it counted).
async fn serve_app(setup: Setup, channels: Vec<Arc<dyn Channel>>) -> Result<(ExitCode, App)> {
    let _instance = crate::instance::InstanceLock::acquire(&setup.state_root)?;
    let (trigger, stop) = shutdown::Trigger::new();
    let parts = setup.parts(Some(stop.clone()))?;
    let app = App::with_env(parts, channels.clone(), &super::setup::env)?;
    if let Some(store) = &app.parts().store {
        check_store(&setup, &app, store).await?;
    }
    shutdown::on_signals(trigger.clone())?;
    let ops = match setup.config.ops.addr() {
        Ok(Some(addr)) => Some(
            crate::ops::server::start(
                addr,
                app.clone(),
                channels.clone(),
                setup.state_root.clone(),
                stop.clone(),
            )
            .await?,
        ),
        Ok(None) => None,
        Err(e) => bail!("ops.{e}"),
    };
    let control = match crate::ops::control::start(app.clone(), setup.state_root.clone(), stop.clone()) {
        Ok(task) => Some(task),
        Err(e) => {
            tracing::warn!(error = %e, "control socket not available; `mnemo sessions forget` and `mnemo backup` cannot reach this bot");
            None
        }
    };
    let scheduler = Scheduler::start(app.clone(), stop.clone());
    let reminders = crate::reminders::Delivery::start(app.clone(), stop.clone());
    tracing::info!(state = %setup.state_root.display(), channels = channels.len(), "mnemo started");
    let finished = app.serve(channels, stop).await;
    trigger.fire();
    scheduler.stop().await;
    reminders.stop().await;
    for task in [ops, control].into_iter().flatten() {
        let _ = task.await;
    }
    tracing::info!(finished, "mnemo stopped");
    Ok((ExitCode::SUCCESS, app))
}

/// On the Postgres store a channel's access rules are its database row:
/// an `access.json` left in the state folder (from before the switch) is
/// not read, which is said at start so the rules are not lost unnoticed.
async fn warn_unread_access_file(setup: &Setup, store: &mnemo_pg::PgStore, channel: &str) -> Result<()> {
    let path = mnemo_sessions::Layout::new(&setup.state_root, channel).access_path();
    if channel == crate::access::CONSOLE || !path.exists() {
        return Ok(());
    }
    let row = mnemo_pg::access::read(store, channel)
        .await
        .with_context(|| format!("reading the access rules of `{channel}` from the database"))?;
    if row.is_none() {
        tracing::warn!(
            channel = %channel, file = %path.display(),
            "this access.json is not read on the Postgres store, and the database holds no access rules for the channel (the defaults apply: pairing): copy the file's rules with `mnemo store copy --from files --to postgres` (docs/several-brokers.md)"
        );
    } else {
        tracing::warn!(
            channel = %channel, file = %path.display(),
            "this access.json is not read on the Postgres store: the channel's rules are in the database (`mnemo access list` shows them)"
        );
    }
    Ok(())
}

/// The Postgres store at start: the database answers and its schema is
/// this build's (else the error says to run `mnemo store migrate`), and
/// what it cannot do yet is said once, not discovered by users.
async fn check_store(setup: &Setup, app: &App, store: &mnemo_pg::PgStore) -> Result<()> {
    let url_env = &setup.config.store.url_env;
    mnemo_pg::migrate::check(store)
        .await
        .with_context(|| format!("the Postgres store (store.kind: postgres, URL from `{url_env}`)"))?;
    let (_, max) = store.pool_status();
    tracing::info!(max_connections = max, "memory is kept in Postgres");
    tracing::warn!(
        "on the Postgres store the operator's _shared notes come only from `mnemo store copy` (docs/several-brokers.md)"
    );
    if app.memories().values().any(|m| m.config.recall.embeddings.is_some()) {
        match store.vectors().await? {
            mnemo_pg::Vectors::InUse => {
                tracing::info!("recall.embeddings: message vectors are kept and searched with pgvector")
            }
            vectors => tracing::warn!(
                %vectors,
                "recall.embeddings is set, but pgvector is not set up in the database: full-text recall carries on alone"
            ),
        }
    }
    for channel in app.memories().keys() {
        warn_unread_access_file(setup, store, channel).await?;
    }
    let telegram = &setup.config.channels.telegram;
    if telegram.enabled && telegram.mode == "polling" {
        tracing::warn!(
            "Telegram long polling hands each update to one broker: with several brokers on this database, set channels.telegram.mode to webhook behind a load balancer"
        );
    }
    Ok(())
}
