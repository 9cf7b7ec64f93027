//! `store` in the app config: where memory lives. `files` (the default)
//! is the embedded file layout under the state folder; `postgres` keeps
//! the turn's memory in a database several brokers share, its URL read
//! from the environment variable `urlEnv` names (it may hold a password):
//!
//! ```json
//! "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL", "maxConnections": 32 }
//! ```

use mnemo_sessions::config::FieldError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Files,
    Postgres,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StoreConfig {
    pub kind: StoreKind,
    /// The environment variable holding the database URL (`postgres` only).
    pub url_env: String,
    /// Connections a broker opens at most: each turn in flight holds one.
    pub max_connections: usize,
    /// Seconds a turn waits for a free connection before the user is told
    /// to try again (nothing stored).
    pub pool_wait_secs: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Files,
            url_env: "MNEMO_DATABASE_URL".to_string(),
            max_connections: mnemo_pg::DEFAULT_MAX_CONNECTIONS,
            pool_wait_secs: mnemo_pg::DEFAULT_POOL_WAIT.as_secs(),
        }
    }
}

impl StoreConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.url_env.trim().is_empty() {
            return Err(FieldError::new("urlEnv", "must name an environment variable".into()));
        }
        if !(1..=10_000).contains(&self.max_connections) {
            return Err(FieldError::new(
                "maxConnections",
                format!("{} is out of range (1 to 10000)", self.max_connections),
            ));
        }
        if !(1..=3600).contains(&self.pool_wait_secs) {
            return Err(FieldError::new(
                "poolWaitSecs",
                format!("{} is out of range (1 to 3600)", self.pool_wait_secs),
            ));
        }
        Ok(())
    }

    /// The database URL from the environment, for `kind: postgres`.
    pub fn url(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<String> {
        env(&self.url_env).ok_or_else(|| {
            anyhow::anyhow!(
                "store.kind is postgres but the environment variable `{}` (store.urlEnv) is not set: \
                 set it to the database URL, e.g. postgres://mnemo:…@db:5432/mnemo",
                self.url_env
            )
        })
    }

    /// The pool for `kind: postgres` (connects lazily).
    pub fn connect(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<mnemo_pg::PgStore> {
        let url = self.url(env)?;
        let wait = std::time::Duration::from_secs(self.pool_wait_secs);
        Ok(mnemo_pg::PgStore::connect(&url, self.max_connections, wait)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_is_the_default_and_postgres_reads_its_url_from_the_environment() {
        let c: StoreConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c.kind, StoreKind::Files);
        let c: StoreConfig = serde_json::from_str(r#"{"kind":"postgres","urlEnv":"DB"}"#).unwrap();
        assert_eq!((c.kind, c.url_env.as_str()), (StoreKind::Postgres, "DB"));
        let err = c.url(&|_| None).unwrap_err().to_string();
        assert!(err.contains("`DB` (store.urlEnv) is not set"), "{err}");
        assert_eq!(
            c.url(&|n| (n == "DB").then(|| "postgres://x/y".into())).unwrap(),
            "postgres://x/y"
        );
        assert!(serde_json::from_str::<StoreConfig>(r#"{"kind":"mysql"}"#).is_err());
        let zero = StoreConfig {
            max_connections: 0,
            ..StoreConfig::default()
        };
        assert!(zero.validate().is_err());
    }

    #[test]
    fn a_bad_url_is_refused_without_repeating_it() {
        let c = StoreConfig {
            kind: StoreKind::Postgres,
            ..StoreConfig::default()
        };
        let err = c
            .connect(&|_| Some("postgres://u:secret@host:notaport/db".into()))
            .err()
            .unwrap()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
    }
}
