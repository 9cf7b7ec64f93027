//! Why no model (or embedding endpoint) could be built at start: a config
//! value that cannot work, an API key variable that is not set or cannot be
//! sent, an HTTP client that could not be set up.
//!
//! Below everything that builds: the backends and the HTTP helpers return
//! it, [`super::build`] gathers them. Messages name the config section and
//! what to do; none contains a key.

use super::config::{FieldError, Provider};

/// Why no model could be built. Messages name the config section and what
/// to do; none contains a key.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Config(#[from] FieldError),
    #[error(
        "{section}: the environment variable {var} is not set; export it with your {provider} API key, or set {section}.apiKeyEnv to the variable that holds it"
    )]
    MissingApiKey {
        section: String,
        var: String,
        provider: Provider,
    },
    #[error(
        "{section}: the value of {var} cannot be sent in an HTTP header (it has a line break or another control character); check the variable"
    )]
    BadApiKey { section: String, var: String },
    #[error("{section}: could not set up the HTTP client: {detail}")]
    Http { section: String, detail: String },
}
