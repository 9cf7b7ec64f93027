//! `mnemo config check`: load and validate both configs the way a start
//! would, print the effective settings with every secret shown only as
//! "set" or "missing", and exit non-zero on any error.

use super::setup::env;
use super::{GlobalArgs, Setup};
use crate::config::ConfigSource;
use anyhow::Result;
use mnemo_sessions::Layout;
use mnemo_sessions::config::SessionConfig;
use std::process::ExitCode;

pub fn run(global: &GlobalArgs) -> Result<ExitCode> {
    let setup = match Setup::load(global) {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("config check failed: {e:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut problems = Vec::new();
    match &setup.source {
        ConfigSource::File(path) => println!("config file: {}", path.display()),
        ConfigSource::Environment => println!("config file: none (defaults + environment)"),
    }
    println!("state folder: {}", setup.state_root.display());

    let mut effective = setup.config.clone();
    effective.model = setup.model_config();
    match serde_json::to_string_pretty(&effective) {
        Ok(json) => println!("{json}"),
        Err(e) => problems.push(format!("cannot print the config: {e}")),
    }

    println!("secrets (values never shown):");
    for name in crate::access::secrets::secret_env_names(&setup.config, setup.model_config().as_ref()) {
        let state = if env(&name).is_some() { "set" } else { "missing" };
        println!("  {name}: {state}");
    }

    if let Err(e) = setup.config.system_prompt(&setup.config_dir()) {
        problems.push(e.to_string());
    }
    match setup.model_config() {
        None => problems.push(format!(
            "no model is configured.\n{}",
            crate::model::config::NO_MODEL_HELP
        )),
        Some(model) => {
            if let Err(e) = crate::model::build(&model, &env) {
                // The error names its own section (`model…:`).
                problems.push(e.to_string());
            }
        }
    }
    for channel in channel_names(&setup) {
        let layout = Layout::new(&setup.state_root, channel);
        if let Err(e) = SessionConfig::load(&layout.config_path()) {
            problems.push(e.to_string());
        }
        if channel != "console" {
            problems.extend(access_problem(&layout.access_path()));
        }
    }

    if problems.is_empty() {
        println!("config OK");
        Ok(ExitCode::SUCCESS)
    } else {
        for p in &problems {
            eprintln!("error: {p}");
        }
        Ok(ExitCode::FAILURE)
    }
}

/// Why a channel's `access.json` keeps it on the restrictive fallback.
fn access_problem(path: &std::path::Path) -> Option<String> {
    if let Some(notice) = crate::access::store::quarantine_notice(path) {
        return Some(notice);
    }
    crate::access::file::read(path)
        .err()
        .map(|e| format!("{e}; the bot refuses strangers until it is fixed"))
}

/// Channels whose `sessions/config.json` a start would read.
fn channel_names(setup: &Setup) -> Vec<&'static str> {
    let mut names = setup.config.channels.enabled_platforms();
    if setup.config.channels.console.enabled {
        names.push("console");
    }
    names
}
