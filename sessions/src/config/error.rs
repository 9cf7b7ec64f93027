//! What can be wrong with `sessions/config.json`, worded for the operator
//! who has to fix it: the file, the field path, the reason, the way out.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("could not read the session config {}: {source}; check the file's permissions, or remove it to use the defaults", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the session config {} is empty; write `{{}}` for all defaults, or remove the file", path.display())]
    Empty { path: PathBuf },
    #[error("the session config {} must be a JSON object (`{{ \"stm\": {{ … }} }}`); write `{{}}` for all defaults", path.display())]
    NotAnObject { path: PathBuf },
    #[error("the session config {} is not valid JSON at line {line}, column {column}{}: {reason}; fix the syntax there", path.display(), near(field))]
    Syntax {
        path: PathBuf,
        /// The field being read when the syntax broke, `.` at the top level.
        field: String,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("the session config {} has a bad field `{field}` (line {line}, column {column}): {reason}; fix or remove it (every field is optional)", path.display())]
    Field {
        path: PathBuf,
        /// Dotted path in the file's own camelCase names, e.g. `stm.contextWindow`.
        field: String,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("the session config {} has an invalid `{field}`: {reason}; change it, or remove it to use the default", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        /// Says what is allowed, so the operator knows what to write.
        reason: String,
    },
}

impl ConfigError {
    /// The dotted field path the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Syntax { field, .. }
            | ConfigError::Field { field, .. }
            | ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    pub(super) fn from_serde(path: &Path, field: String, e: &serde_json::Error) -> ConfigError {
        // serde_json appends " at line L column C"; we report those apart.
        let text = e.to_string();
        let reason = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(head, _)| head)
            .to_string();
        let (path, line, column) = (path.to_path_buf(), e.line(), e.column());
        if e.is_data() {
            ConfigError::Field {
                path,
                field,
                line,
                column,
                reason,
            }
        } else {
            ConfigError::Syntax {
                path,
                field,
                line,
                column,
                reason,
            }
        }
    }
}

fn near(field: &str) -> String {
    if field == "." || field.is_empty() {
        String::new()
    } else {
        format!(" (near `{field}`)")
    }
}
