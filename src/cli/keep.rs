//! `mnemo sessions forget`, `mnemo backup`, `mnemo restore` and `mnemo
//! health`: the CLI side. With no bot on the state folder the work happens here under the
//! instance lock; with one running, `forget` and `backup` are sent to it
//! over the control socket (it holds the per-user locks), and `restore`
//! refuses (the bot would keep writing over what was restored).

use super::{GlobalArgs, Setup};
use crate::instance::{InstanceError, InstanceLock};
use crate::ops::control::{self, Request};
use crate::ops::keep;
use anyhow::{Context as _, Result, bail};
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

/// Sends `request` to the bot running on the folder; its message.
async fn in_the_bot(state_root: &Path, request: &Request) -> Result<String> {
    let response = control::send(state_root, request).await?;
    if !response.ok {
        bail!("the running bot refused: {}", response.message);
    }
    Ok(response.message)
}

/// Renames `from` to `to`, or copies across file systems (private mode kept).
fn move_file(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).with_context(|| format!("cannot write {}", to.display()))?;
    Ok(())
}

pub async fn forget(setup: &Setup, channel: &str, user: &str, yes: bool) -> Result<ExitCode> {
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "this deletes everything stored about user `{user}` in channel `{channel}` and cannot be undone; pass --yes to confirm"
            );
        }
        print!(
            "Delete everything stored about user `{user}` in channel `{channel}` (short-term log, summaries, profile, topic notes, archive)? This cannot be undone. Type `yes`: "
        );
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != "yes" {
            println!("nothing deleted");
            return Ok(ExitCode::FAILURE);
        }
    }
    let said = match InstanceLock::acquire(&setup.state_root) {
        Ok(_lock) => {
            // Into the same log files a bot writes, so the deletion is on record.
            let _log = crate::logging::init(
                &setup.config.logging,
                Some("warn"),
                Some(&setup.state_root.join("logs")),
                super::serve::secrets(setup),
                super::setup::env("RUST_LOG"),
            );
            let database = setup.database().await?;
            keep::forget(&setup.state_root, channel, user, database.as_ref(), None).await?
        }
        Err(InstanceError::Busy { .. }) => {
            let request = Request::Forget {
                channel: channel.to_string(),
                user: user.to_string(),
            };
            format!(
                "{} (done by the running bot)",
                in_the_bot(&setup.state_root, &request).await?
            )
        }
        Err(e) => return Err(e.into()),
    };
    println!("{said}");
    Ok(ExitCode::SUCCESS)
}

pub async fn backup(global: &GlobalArgs, out: &Path) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    if !setup.state_root.is_dir() {
        bail!("there is no state folder at {} to back up", setup.state_root.display());
    }
    let out = std::path::absolute(out)?;
    match InstanceLock::acquire(&setup.state_root) {
        Ok(_lock) => println!("{}", keep::backup(&setup.state_root, &out, None).await?),
        Err(InstanceError::Busy { .. }) => {
            // The bot may only write in its state folder (systemd's
            // ProtectSystem=strict): it writes there, we move it into place.
            let handover = keep::handover_path(&setup.state_root);
            let request = Request::Backup { out: handover.clone() };
            let done = in_the_bot(&setup.state_root, &request).await;
            let moved = done.and_then(|_| move_file(&handover, &out));
            let _ = std::fs::remove_file(&handover);
            moved?;
            println!(
                "backup of {} written to {} (by the running bot)",
                setup.state_root.display(),
                out.display()
            );
        }
        Err(e) => return Err(e.into()),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn restore(global: &GlobalArgs, file: &Path, force: bool) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    let _lock = match InstanceLock::acquire(&setup.state_root) {
        Ok(lock) => lock,
        Err(InstanceError::Busy { .. }) => bail!(
            "a mnemo process is running on {}; stop it before restoring into that folder",
            setup.state_root.display()
        ),
        Err(e) => return Err(e.into()),
    };
    println!("{}", keep::restore(&setup.state_root, file, force)?);
    Ok(ExitCode::SUCCESS)
}

/// `mnemo health`: whether the bot on the state folder answers on its
/// control socket. Takes no lock (a check must never keep a starting bot
/// from its folder) and writes nothing.
pub async fn health(global: &GlobalArgs) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    let socket = control::socket_path(&setup.state_root);
    let asked = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        control::send(&setup.state_root, &Request::Ping),
    );
    match asked.await {
        Ok(Ok(response)) if response.ok => {
            println!("ok: {}", response.message);
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(response)) => bail!(
            "the bot on {} refused: {}",
            setup.state_root.display(),
            response.message
        ),
        Ok(Err(_)) => bail!(
            "no bot answers on {} (is `mnemo run` running on {}?)",
            socket.display(),
            setup.folder_place()
        ),
        Err(_) => bail!("the bot on {} did not answer within 5 s", setup.state_root.display()),
    }
}
