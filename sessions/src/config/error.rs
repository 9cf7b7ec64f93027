//! The one shape of a config error, for every config file mnemo reads —
//! the app config (`config.json`), a channel's `sessions/config.json` and
//! its `access.json` — worded for the operator who has to fix it: which
//! file, which field (its dotted camelCase path, `recall.maxTokens`),
//! where (line and column, when the error comes from parsing), the reason,
//! and the way out. `mnemo config check` and a refused start print the
//! same text.
//!
//! A section that validates itself without knowing its file (the model,
//! a channel, the limits) says what is wrong as a [`FieldError`]; the
//! loader of the file lifts it into a [`ConfigError`] with
//! [`ConfigError::invalid`]. [`parse_object`] is the one strict parse
//! every config file goes through, so the three fail the same way.
//!
//! It reads nothing itself; the text of a config value appears only where
//! serde's reason quotes it.

use serde::de::DeserializeOwned;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Which of mnemo's config files an error is about. It says what the file
/// is called in messages and the last way out (what removing it does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigFile {
    /// `config.json`: the app config.
    App,
    /// A channel's `sessions/config.json`: every field optional.
    Sessions,
    /// A channel's `access.json`: who may talk to the bot.
    Access,
    /// The same document as a row of the Postgres store (`mnemo_access`).
    AccessRow,
}

impl ConfigFile {
    fn name(self) -> &'static str {
        match self {
            ConfigFile::App => "app config",
            ConfigFile::Sessions => "session config",
            ConfigFile::Access | ConfigFile::AccessRow => "access list",
        }
    }

    /// What removing the file does, if that is a way out.
    fn without_it(self) -> &'static str {
        match self {
            ConfigFile::App => "",
            ConfigFile::Sessions => ", or remove the file to use the defaults",
            ConfigFile::Access => {
                " (docs/access-control.md), or remove the file to start over with the default `pairing` policy"
            }
            ConfigFile::AccessRow => {
                " (docs/several-brokers.md), or delete the row to start over with the default `pairing` policy"
            }
        }
    }
}

/// A place in the file, both 1-based (serde_json's count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// What is wrong.
#[derive(Debug)]
pub enum Problem {
    /// The file could not be read.
    Read(io::Error),
    /// The file holds nothing but white space.
    Empty,
    /// The file is JSON, but not an object.
    NotAnObject,
    /// The file is not valid JSON (serde_json's reason).
    Syntax(String),
    /// A field is unknown or has the wrong type (serde's reason).
    Field(String),
    /// The file parsed, but a value breaks a rule; the reason says what is
    /// allowed.
    Invalid(String),
}

/// One thing wrong with one config file (see the module doc).
#[derive(Debug)]
pub struct ConfigError {
    pub file: ConfigFile,
    /// The file as mnemo opened it.
    pub path: PathBuf,
    /// The dotted field path in the file's own camelCase names
    /// (`stm.contextWindow`); `None` for the file as a whole.
    pub field: Option<String>,
    /// Where parsing stopped; `None` for errors found after parsing.
    pub at: Option<Position>,
    pub problem: Problem,
}

/// A value a config section refuses, before it is known which file holds
/// it: the field path and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: String) -> FieldError {
        FieldError {
            field: field.into(),
            reason,
        }
    }

    /// The same error, its field path under `section` (`maxTokens` in
    /// `recall` → `recall.maxTokens`).
    pub fn within(self, section: &str) -> FieldError {
        FieldError {
            field: format!("{section}.{}", self.field),
            ..self
        }
    }
}

impl ConfigError {
    fn new(file: ConfigFile, path: &Path, problem: Problem) -> ConfigError {
        ConfigError {
            file,
            path: path.to_path_buf(),
            field: None,
            at: None,
            problem,
        }
    }

    pub fn read(file: ConfigFile, path: &Path, source: io::Error) -> ConfigError {
        ConfigError::new(file, path, Problem::Read(source))
    }

    pub fn empty(file: ConfigFile, path: &Path) -> ConfigError {
        ConfigError::new(file, path, Problem::Empty)
    }

    pub fn not_an_object(file: ConfigFile, path: &Path) -> ConfigError {
        ConfigError::new(file, path, Problem::NotAnObject)
    }

    /// A value found invalid after parsing.
    pub fn invalid(file: ConfigFile, path: &Path, e: FieldError) -> ConfigError {
        ConfigError {
            field: Some(e.field),
            ..ConfigError::new(file, path, Problem::Invalid(e.reason))
        }
    }

    /// A serde_json error met while reading `field` (from
    /// serde_path_to_error; `.` at the top level): a syntax error, or a
    /// field of the wrong type or name, with its line and column.
    pub fn from_serde(file: ConfigFile, path: &Path, field: &str, e: &serde_json::Error) -> ConfigError {
        // serde_json appends " at line L column C"; we report those apart.
        let text = e.to_string();
        let reason = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(head, _)| head)
            .to_string();
        let problem = if e.is_data() {
            Problem::Field(reason)
        } else {
            Problem::Syntax(reason)
        };
        let at = (e.line() > 0).then(|| Position {
            line: e.line(),
            column: e.column(),
        });
        ConfigError {
            field: (!field.is_empty() && field != ".").then(|| field.to_string()),
            at,
            ..ConfigError::new(file, path, problem)
        }
    }

    /// The dotted field path the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// Why, without the file, the place or the way out (for a log field).
    pub fn reason(&self) -> String {
        match &self.problem {
            Problem::Read(e) => format!("cannot read it: {e}"),
            Problem::Empty => "it is empty".to_string(),
            Problem::NotAnObject => "it must be a JSON object (`{ … }`)".to_string(),
            Problem::Syntax(reason) => format!("not valid JSON: {reason}"),
            Problem::Field(reason) | Problem::Invalid(reason) => reason.clone(),
        }
    }

    /// The way out: what to do about this problem, then — for a problem
    /// of the whole file, and always for `access.json` — what removing the
    /// file does.
    fn fix(&self) -> String {
        let (first, whole_file) = match (&self.problem, self.file) {
            (Problem::Read(_), _) => ("check the file's permissions", true),
            (Problem::Empty | Problem::NotAnObject, _) => ("write `{}` for all defaults", true),
            (Problem::Syntax(_), _) => ("fix the syntax there", false),
            (Problem::Field(_), ConfigFile::Sessions) => ("fix or remove the field (every field is optional)", false),
            (Problem::Field(_), _) => ("fix or remove the field", false),
            (Problem::Invalid(_), ConfigFile::Sessions) => ("change it, or remove it to use the default", false),
            (Problem::Invalid(_), _) => ("change it", false),
        };
        if whole_file || matches!(self.file, ConfigFile::Access | ConfigFile::AccessRow) {
            format!("{first}{}", self.file.without_it())
        } else {
            first.to_string()
        }
    }
}

/// `the session config <path>, field `stm.x`, line 3, column 7: <reason>;
/// <fix>` — the parts that are unknown left out.
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} {}", self.file.name(), self.path.display())?;
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        if let Some(Position { line, column }) = self.at {
            write!(f, ", line {line}, column {column}")?;
        }
        write!(f, ": {}; {}", self.reason(), self.fix())
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            Problem::Read(e) => Some(e),
            _ => None,
        }
    }
}

/// Parses `text`, the whole of the config file `path`, as one JSON object
/// of `T`, the one way every mnemo config is read: a byte-order mark is
/// skipped (it shifts no line numbers); an empty file, anything but an
/// object (serde would take an array as fields by position), broken JSON,
/// an unknown field, a wrong type and anything after the closing brace are
/// refused naming the field and its line.
pub fn parse_object<T: DeserializeOwned>(file: ConfigFile, path: &Path, text: &str) -> Result<T, ConfigError> {
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        return Err(ConfigError::empty(file, path));
    }
    if !trimmed.starts_with('{') {
        return Err(ConfigError::not_an_object(file, path));
    }
    let mut de = serde_json::Deserializer::from_str(body);
    let value = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| ConfigError::from_serde(file, path, &e.path().to_string(), e.inner()))?;
    de.end().map_err(|e| ConfigError::from_serde(file, path, ".", &e))?;
    Ok(value)
}

/// [`parse_object`] of the bytes of a file; text that is not UTF-8 is a
/// syntax error.
pub fn parse_object_bytes<T: DeserializeOwned>(file: ConfigFile, path: &Path, bytes: &[u8]) -> Result<T, ConfigError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse_object(file, path, text),
        Err(e) => Err(ConfigError::new(
            file,
            path,
            Problem::Syntax(format!("the file is not UTF-8 text ({e})")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde_error(text: &str) -> serde_json::Error {
        serde_json::from_str::<std::collections::BTreeMap<String, u32>>(text).unwrap_err()
    }

    #[test]
    fn a_field_error_names_file_field_line_and_column_once() {
        let e = ConfigError::from_serde(
            ConfigFile::Sessions,
            Path::new("/s/config.json"),
            "stm.maxMessages",
            &serde_error("{\n \"a\": \"x\"}"),
        );
        assert_eq!(e.at, Some(Position { line: 2, column: 9 }));
        let text = e.to_string();
        assert!(
            text.starts_with(
                "the session config /s/config.json, field `stm.maxMessages`, line 2, column 9: invalid type"
            ),
            "{text}"
        );
        assert!(!text.contains(" at line "), "the position is said once: {text}");
        assert!(
            text.ends_with("; fix or remove the field (every field is optional)"),
            "{text}"
        );
    }

    #[test]
    fn a_problem_of_the_whole_file_says_what_removing_it_does() {
        let path = Path::new("/s/config.json");
        assert_eq!(
            ConfigError::empty(ConfigFile::Sessions, path).to_string(),
            "the session config /s/config.json: it is empty; write `{}` for all defaults, or remove the file to use the defaults"
        );
        let read = ConfigError::read(ConfigFile::App, path, io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(
            read.to_string()
                .starts_with("the app config /s/config.json: cannot read it: "),
            "{read}"
        );
        assert!(read.to_string().ends_with("; check the file's permissions"), "{read}");
    }

    #[test]
    fn a_syntax_error_at_the_top_level_names_no_field() {
        let e = ConfigError::from_serde(ConfigFile::App, Path::new("/c.json"), ".", &serde_error("{,}"));
        assert!(matches!(e.problem, Problem::Syntax(_)), "{e:?}");
        assert_eq!(e.field(), None);
        assert!(
            e.to_string()
                .starts_with("the app config /c.json, line 1, column 2: not valid JSON: "),
            "{e}"
        );
    }

    #[test]
    fn a_rule_broken_after_parsing_names_the_nested_field() {
        let inner = FieldError::new("maxTokens", "it is 0, but must be at least 1".into()).within("recall");
        let e = ConfigError::invalid(ConfigFile::Access, Path::new("/s/access.json"), inner);
        assert_eq!(e.field(), Some("recall.maxTokens"));
        assert_eq!(
            e.to_string(),
            "the access list /s/access.json, field `recall.maxTokens`: it is 0, but must be at least 1; change it \
             (docs/access-control.md), or remove the file to start over with the default `pairing` policy"
        );
    }
}
