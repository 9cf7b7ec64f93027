//! Turning the command line, the config file and the environment into the
//! parts the app runs on. The one place that reads process environment
//! variables (clap's `env` for `--config` and `--state-dir` in `cli/mod.rs`
//! aside); everything below takes them as parameters.

use super::GlobalArgs;
use crate::config::{AppConfig, ConfigSource};
use crate::model::{self, ModelSummarizer, config::ModelConfig};
use crate::ops::metered::{Purpose, metered};
use crate::parts::AppParts;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The resolved configuration of one invocation.
pub struct Setup {
    pub config: AppConfig,
    pub source: ConfigSource,
    pub state_root: PathBuf,
}

/// The process environment, as the lookup function the model code takes.
/// A PostgreSQL connection string without what must not be shown: a URL
/// keeps its scheme, host, port and database (no user, password, query);
/// a `key=value` string keeps `host`, `hostaddr`, `port` and `dbname`.
pub fn safe_url(url: &str) -> String {
    let url = url.trim();
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let rest = rest.split(['?', '#']).next().unwrap_or_default();
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            return format!("{scheme}{rest}");
        }
    }
    let kept: Vec<&str> = url
        .split_whitespace()
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or_default().trim();
            matches!(key, "host" | "hostaddr" | "port" | "dbname")
        })
        .collect();
    if kept.is_empty() {
        "(a connection string without host or dbname)".to_string()
    } else {
        kept.join(" ")
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "the one reader of the environment (clippy.toml)"
)]
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn home() -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

impl Setup {
    pub fn load(global: &GlobalArgs) -> Result<Setup> {
        let home = home();
        let (config, source) = AppConfig::locate(global.config.as_deref(), home.as_deref())?;
        let state_root = match &global.state_dir {
            Some(dir) => dir.clone(),
            None => config.state_root(home.as_deref()),
        };
        if state_root.as_os_str().is_empty() || state_root.starts_with("~") {
            bail!(
                "cannot resolve the state folder `{}`: set HOME, or pass --state-dir",
                state_root.display()
            );
        }
        Ok(Setup {
            config,
            source,
            state_root,
        })
    }

    /// The state folder, as commands name it: "the state folder /x".
    pub fn folder_place(&self) -> String {
        format!("the state folder {}", self.state_root.display())
    }

    /// The database the config's store names, as commands name it: its
    /// address without user, password or parameters, and the variable it
    /// came from ("the database postgres://db:5432/mnemo (from
    /// $MNEMO_DATABASE_URL)").
    pub fn database_place(&self) -> String {
        let name = &self.config.store.url_env;
        match env(name) {
            Some(url) => format!("the database {} (from ${name})", safe_url(&url)),
            None => format!("the database ${name} names"),
        }
    }

    /// Where this invocation's memory is: the database when `store.kind`
    /// is postgres, else the state folder.
    pub fn memory_place(&self) -> String {
        match self.config.store.kind {
            crate::config::StoreKind::Files => self.folder_place(),
            crate::config::StoreKind::Postgres => self.database_place(),
        }
    }

    /// The folder relative paths in the config are resolved against.
    pub fn config_dir(&self) -> PathBuf {
        match &self.source {
            ConfigSource::File(path) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
            ConfigSource::Environment => PathBuf::from("."),
        }
    }

    /// The chat model's settings: the config's `model`, else the environment.
    /// `None` means no model is configured at all.
    pub fn model_config(&self) -> Option<ModelConfig> {
        self.config
            .model
            .clone()
            .or_else(|| model::config::from_env(&env))
            .map(|m| m.with_env_base_url(&env))
    }

    /// The summarizer's settings: the chat model's, with the config's
    /// `summarizer` overrides applied.
    pub fn summarizer_config(&self, model_config: &ModelConfig) -> ModelConfig {
        match &self.config.summarizer {
            Some(over) => model_config.with_override(over).with_env_base_url(&env),
            // The summarizer is never offered tools.
            None => ModelConfig {
                max_tool_rounds: None,
                ..model_config.clone()
            },
        }
    }

    /// Everything the app needs. With no model configured, the error says
    /// exactly how to configure one. `shutdown`, when given, ends the
    /// models' retry waits.
    /// The database when `store.kind` is postgres, its schema checked (no
    /// model needed: for the verbs that act on stored memory only).
    pub async fn database(&self) -> Result<Option<mnemo_pg::PgStore>> {
        match self.config.store.kind {
            crate::config::StoreKind::Files => Ok(None),
            crate::config::StoreKind::Postgres => {
                let store = self.config.store.connect(&env)?;
                mnemo_pg::migrate::check(&store).await?;
                Ok(Some(store))
            }
        }
    }

    pub fn parts(&self, shutdown: Option<mnemo_channels::Shutdown>) -> Result<AppParts> {
        let Some(model_config) = self.model_config() else {
            bail!("no model is configured.\n\n{}", model::config::NO_MODEL_HELP);
        };
        let build = |cfg: &ModelConfig, section: &str| match &shutdown {
            Some(stop) => model::build_serving(cfg, &env, section, stop.clone()),
            None => model::build_section(cfg, &env, section),
        };
        let chat = build(&model_config, "model")?;
        let chat = metered(chat, Purpose::Answer, &model_config.model);
        let summarizer_config = self.summarizer_config(&model_config);
        let summarizer = build(&summarizer_config, "summarizer")?;
        let summarizer = metered(summarizer, Purpose::Summary, &summarizer_config.model);
        Ok(AppParts {
            state_root: self.state_root.clone(),
            system_prompt: self.config.system_prompt(&self.config_dir())?,
            tz: self.config.tz(),
            limits: self.config.limits.clone(),
            reminders: self.config.reminders.clone(),
            model_timeout: std::time::Duration::from_secs(model_config.timeout_secs),
            model: chat,
            max_tool_rounds: model_config.tool_rounds() as usize,
            summarizer: Arc::new(ModelSummarizer::new(summarizer)),
            streaming: self.config.channels.streaming(),
            store: match self.config.store.kind {
                crate::config::StoreKind::Files => None,
                crate::config::StoreKind::Postgres => Some(self.config.store.connect(&env)?),
            },
            attachments: self.attachments(&model_config)?,
        })
    }

    /// How files with messages are taken: the limits, `model.vision`, and
    /// the `transcription` client (its key read now).
    fn attachments(&self, model_config: &ModelConfig) -> Result<crate::pipeline::AttachmentSettings> {
        let transcriber = match &self.config.transcription {
            Some(cfg) => Some(Arc::new(model::transcribe::Transcriber::build(cfg, &env)?)),
            None => None,
        };
        Ok(crate::pipeline::AttachmentSettings {
            max_bytes: self.config.limits.max_attachment_bytes,
            stall: std::time::Duration::from_secs(self.config.limits.attachment_stall_secs),
            vision: model_config.vision,
            transcriber,
            documents: crate::documents::Bounds {
                max_pages: self.config.limits.max_document_pages,
                max_inflated: crate::documents::Bounds::MAX_INFLATED,
            },
            keep: self.config.attachments.keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::safe_url;

    #[test]
    fn a_database_is_named_without_its_password() {
        assert_eq!(
            safe_url("postgres://mnemo:s3cret@db.internal:5432/mnemo?sslmode=require"),
            "postgres://db.internal:5432/mnemo"
        );
        assert_eq!(safe_url("postgresql://h/db"), "postgresql://h/db");
        assert_eq!(
            safe_url("host=db port=5433 user=m password=s3cret dbname=mnemo"),
            "host=db port=5433 dbname=mnemo"
        );
        assert!(!safe_url("password=s3cret").contains("s3cret"));
    }
}
