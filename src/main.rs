//! The `mnemo` binary: parse the command line, run the verb, map the result
//! to an exit code. Everything else lives in the library.

#![forbid(unsafe_code)]

use clap::Parser;
use mnemo::cli::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Everything mnemo creates (memory, logs, exports) is its user's alone,
    // whatever the umask it was started with: files 0600, folders 0700.
    // The memory library sets these modes itself; the mask also covers what
    // other libraries create (the daily log files).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mnemo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(mnemo::cli::execute(cli));
    // The console reads stdin on a blocking thread that cannot be
    // interrupted; everything that matters is flushed by now, so don't let
    // an open stdin hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match outcome {
        Ok(code) => code,
        Err(e) => {
            // Platform and HTTP errors may quote a URL holding a token.
            eprintln!(
                "mnemo: {}",
                mnemo::access::secrets::scrub_token_shapes(&mnemo::cli::error_text(&e))
            );
            ExitCode::FAILURE
        }
    }
}
