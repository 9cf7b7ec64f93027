//! `mnemo man`: the manual pages, rendered by `clap_mangen` from the same
//! clap definitions as `--help` (as `rg --generate man` does), so the pages
//! and the help can never disagree. One page for `mnemo` and one for every
//! subcommand at every depth (`mnemo-sessions.1`, `mnemo-sessions-report.1`,
//! …): on stdout all of them in that order, or with `--out DIR` one file
//! each. Touches no state folder and reads no config.

use super::Cli;
use anyhow::{Context as _, Result};
use clap::CommandFactory as _;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// One rendered page: its file name (`mnemo-access-pair.1`) and its roff.
pub struct Page {
    pub file_name: String,
    pub roff: Vec<u8>,
}

/// Every page, `mnemo.1` first, then each subcommand before its own
/// subcommands, in the order `--help` lists them.
pub fn pages() -> Result<Vec<Page>> {
    // As `clap_mangen::generate_to`: no `help` pseudo-subcommand, and built
    // once from the root so each subcommand knows its full name
    // (`mnemo-sessions-report`, synopsis `mnemo sessions report`).
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut out = Vec::new();
    walk(root, &mut out)?;
    Ok(out)
}

fn walk(cmd: clap::Command, out: &mut Vec<Page>) -> Result<()> {
    let subcommands: Vec<clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    // Every page names the build it documents (a subcommand has no version
    // of its own, which would leave the footer empty).
    let man = clap_mangen::Man::new(cmd).source(format!("mnemo {}", super::VERSION));
    let mut roff = Vec::new();
    man.render(&mut roff).context("rendering a man page")?;
    out.push(Page {
        file_name: man.get_filename(),
        roff,
    });
    for sub in subcommands {
        walk(sub, out)?;
    }
    Ok(())
}

/// `mnemo man`: every page on stdout. A reader that goes away early
/// (`mnemo man | head -1`) ends the output cleanly, not with a panic.
pub fn print() -> Result<ExitCode> {
    let mut text = Vec::new();
    for page in pages()? {
        text.extend_from_slice(&page.roff);
    }
    write_stdout(&text)
}

/// `mnemo man --out DIR`: `DIR/mnemo.1` and one `DIR/mnemo-<verb>.1` per
/// subcommand (DIR is created if missing; pages already there are
/// replaced). Prints each file written.
pub fn write_to(dir: &Path) -> Result<ExitCode> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = String::new();
    for page in pages()? {
        let path = dir.join(&page.file_name);
        std::fs::write(&path, &page.roff).with_context(|| format!("cannot write {}", path.display()))?;
        written.push_str(&format!("{}\n", path.display()));
    }
    write_stdout(written.as_bytes())
}

/// Writes `bytes` to stdout; a closed pipe is the reader's choice, so it is
/// a clean exit (Rust ignores SIGPIPE, so it arrives as `BrokenPipe`).
pub fn write_stdout(bytes: &[u8]) -> Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}
