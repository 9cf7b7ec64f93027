//! `mnemo config check`: everything `run` would refuse is an error here,
//! found the same way `run` finds it (the same builders: model, summarizer,
//! platform adapters, system prompt, each channel's `sessions/config.json`),
//! all reported at once. The effective settings are printed with every
//! secret shown only as "set" or "missing". `--online` then asks each part
//! that talks to the network whether it really works ([`online`]).
//!
//! Every problem is one `error: …` line on stderr. A problem of a config
//! file — the app config, a channel's `sessions/config.json` or
//! `access.json` — is a `mnemo_sessions::config::ConfigError` and reads
//! the same whichever file it is in: the file, the field, the line and
//! column when parsing found it, the reason and the way out.

mod online;

use super::setup::env;
use super::{GlobalArgs, Setup};
use crate::config::ConfigSource;
use anyhow::Result;
use mnemo_channels::Channel;
use mnemo_sessions::Layout;
use mnemo_sessions::config::SessionConfig;
use std::process::ExitCode;
use std::sync::Arc;

/// What the offline part built, for the online probes.
pub(super) struct Built {
    pub model: Option<Arc<dyn crate::model::Model>>,
    /// Only when it differs from the chat model (another provider, URL, key or model).
    pub summarizer: Option<Arc<dyn crate::model::Model>>,
    pub platforms: Vec<Arc<dyn Channel>>,
}

pub async fn run(global: &GlobalArgs, online: bool) -> Result<ExitCode> {
    let setup = match Setup::load(global) {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("error: {}", super::error_text(&e));
            eprintln!("config check failed");
            return Ok(ExitCode::FAILURE);
        }
    };
    match &setup.source {
        ConfigSource::File(path) => println!("config file: {}", path.display()),
        ConfigSource::Environment => println!("config file: none (defaults + environment)"),
    }
    println!("state folder: {}", setup.state_root.display());
    let mut problems = Vec::new();
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

    let built = offline(&setup, &mut problems);
    let mut failing = 0;
    if online {
        failing = online::probe(&built).await;
    }
    if problems.is_empty() && failing == 0 {
        println!("config OK");
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("error: {p}");
    }
    if failing > 0 {
        eprintln!("error: {failing} online check(s) failing (see above)");
    }
    Ok(ExitCode::FAILURE)
}

/// Every check `run` does before it serves, each problem recorded.
fn offline(setup: &Setup, problems: &mut Vec<String>) -> Built {
    if let Err(e) = setup.config.system_prompt(&setup.config_dir()) {
        problems.push(format!("systemPromptFile: {e}"));
    }
    let mut built = Built {
        model: None,
        summarizer: None,
        platforms: Vec::new(),
    };
    match setup.model_config() {
        None => problems.push(format!(
            "no model is configured.\n{}",
            crate::model::config::NO_MODEL_HELP
        )),
        Some(model) => {
            // The errors name their own section (`model…:`, `summarizer…:`).
            match crate::model::build(&model, &env) {
                Ok(m) => built.model = Some(m),
                Err(e) => problems.push(e.to_string()),
            }
            let summarizer = setup.summarizer_config(&model);
            match crate::model::build_section(&summarizer, &env, "summarizer") {
                Ok(m) if summarizer != model => built.summarizer = Some(m),
                Ok(_) => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    for (name, channel) in crate::platforms::each_enabled(&setup.config.channels, &env) {
        match channel {
            Ok(channel) => built.platforms.push(channel),
            Err(e) => problems.push(format!("channel {name}: {e:#}")),
        }
    }
    // The database URL a Postgres store needs (reached only with --online
    // by the model and platform probes; `run` checks the schema at start).
    if setup.config.store.kind == crate::config::StoreKind::Postgres
        && let Err(e) = setup.config.store.connect(&env)
    {
        problems.push(format!("store: {e:#}"));
    }
    if let Ok(Some(addr)) = setup.config.ops.addr()
        && let Err(e) = std::net::TcpListener::bind(addr)
    {
        problems.push(format!("ops.listen: cannot listen on {addr}: {e}"));
    }
    let names = channel_names(setup);
    if names.is_empty() {
        problems.push("no channel is enabled: `run` would have nothing to serve".into());
    }
    for channel in names {
        let layout = Layout::new(&setup.state_root, channel);
        match SessionConfig::load(&layout.config_path()) {
            Err(e) => problems.push(e.to_string()),
            // The embeddings endpoint as a start would build it (URL, key).
            Ok(config) => {
                if let Err(e) = crate::model::embeddings::recall_embedder(config.recall.embeddings.as_ref(), &env) {
                    problems.push(format!(
                        "the session config {} is refused: {e}",
                        layout.config_path().display()
                    ));
                }
            }
        }
        // On Postgres the rules are the database's row, not this file
        // (`mnemo access list` reads and checks it there).
        let rules_in_files = setup.config.store.kind == crate::config::StoreKind::Files;
        if channel != "console" && rules_in_files {
            problems.extend(access_problem(&layout.access_path()));
        }
    }
    built
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
