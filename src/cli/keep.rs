//! `mnemo sessions forget`, `mnemo backup` and `mnemo restore`: the CLI
//! side. With no bot on the state folder the work happens here under the
//! instance lock; with one running, `forget` and `backup` are sent to it
//! over the control socket (it holds the per-user locks), and `restore`
//! refuses (the bot would keep writing over what was restored).

use super::{GlobalArgs, Setup};
use crate::instance::{InstanceError, InstanceLock};
use crate::ops::control::{self, Request};
use crate::ops::keep;
use anyhow::{Result, bail};
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

/// Runs `request` here if no bot holds the folder, else in the bot.
async fn here_or_in_the_bot(state_root: &Path, request: Request) -> Result<String> {
    match InstanceLock::acquire(state_root) {
        Ok(_lock) => match &request {
            Request::Forget { channel, user } => keep::forget(state_root, channel, user, None).await,
            Request::Backup { out } => keep::backup(state_root, out, None).await,
        },
        Err(InstanceError::Busy { .. }) => {
            let response = control::send(state_root, &request).await?;
            if !response.ok {
                bail!("the running bot refused: {}", response.message);
            }
            Ok(format!("{} (done by the running bot)", response.message))
        }
        Err(e) => Err(e.into()),
    }
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
    let request = Request::Forget {
        channel: channel.to_string(),
        user: user.to_string(),
    };
    println!("{}", here_or_in_the_bot(&setup.state_root, request).await?);
    Ok(ExitCode::SUCCESS)
}

pub async fn backup(global: &GlobalArgs, out: &Path) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    if !setup.state_root.is_dir() {
        bail!("there is no state folder at {} to back up", setup.state_root.display());
    }
    let out = std::path::absolute(out)?;
    let request = Request::Backup { out };
    println!("{}", here_or_in_the_bot(&setup.state_root, request).await?);
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
