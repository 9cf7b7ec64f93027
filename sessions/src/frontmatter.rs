//! YAML frontmatter of the memory's markdown files (`summary.md`, profiles,
//! topic notes): splits `---\n<yaml>\n---\n<body>`, parses the YAML into a
//! typed struct and renders it back.
//!
//! Pure text in, text out: this module never reads or writes a file. The path
//! it is given is only there so that an error can name the file and the line
//! a person has to fix.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// The fence line that opens and closes the frontmatter.
const FENCE: &str = "---";

/// A parsed markdown file: typed frontmatter plus the markdown body.
#[derive(Clone, Debug, PartialEq)]
pub struct Document<M> {
    pub meta: M,
    pub body: String,
}

/// Why a file's frontmatter could not be read or written. Every variant names
/// the file; the message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum FrontmatterError {
    #[error("{path}: no YAML frontmatter: line 1 must be `---`; fix the file or remove it")]
    Missing { path: PathBuf },
    #[error("{path}: the frontmatter opened on line 1 is never closed by a `---` line; fix the file or remove it")]
    Unclosed { path: PathBuf },
    #[error("{path} line {line}: the frontmatter does not parse: {reason}; fix that line or remove the file")]
    Yaml { path: PathBuf, line: usize, reason: String },
    #[error("{path}: cannot render the frontmatter: {reason}")]
    Render { path: PathBuf, reason: String },
}

/// The raw parts of a file with frontmatter.
struct Parts<'a> {
    yaml: &'a str,
    body: &'a str,
}

/// Splits `text` at its fences. The opening fence must be the first line; the
/// closing fence is the next line that is exactly `---` (a trailing `\r` is
/// tolerated, for files edited on Windows).
fn split<'a>(path: &Path, text: &'a str) -> Result<Parts<'a>, FrontmatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n').ok_or_else(|| missing_or_unclosed(path, text))?;
    if text[..first_end].trim_end_matches('\r') != FENCE {
        return Err(FrontmatterError::Missing {
            path: path.to_path_buf(),
        });
    }
    let yaml_start = first_end + 1;
    let mut pos = yaml_start;
    while pos <= text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
        if text[pos..end].trim_end_matches('\r') == FENCE {
            let body_start = (end + 1).min(text.len());
            let body = &text[body_start..];
            // `render` writes one blank line after the fence; drop exactly that one.
            let body = body
                .strip_prefix("\r\n")
                .or_else(|| body.strip_prefix('\n'))
                .unwrap_or(body);
            return Ok(Parts {
                yaml: &text[yaml_start..pos],
                body,
            });
        }
        if end == text.len() {
            break;
        }
        pos = end + 1;
    }
    Err(FrontmatterError::Unclosed {
        path: path.to_path_buf(),
    })
}

fn missing_or_unclosed(path: &Path, text: &str) -> FrontmatterError {
    if text.trim_end_matches('\r') == FENCE {
        FrontmatterError::Unclosed {
            path: path.to_path_buf(),
        }
    } else {
        FrontmatterError::Missing {
            path: path.to_path_buf(),
        }
    }
}

/// Parses a whole file. `path` is used only in errors, whose line numbers
/// count from the top of the file (the YAML starts on line 2).
pub fn parse<M: DeserializeOwned>(path: &Path, text: &str) -> Result<Document<M>, FrontmatterError> {
    let parts = split(path, text)?;
    // An empty frontmatter is an empty mapping, so structs whose fields all
    // have defaults still parse.
    let yaml = if parts.yaml.trim().is_empty() { "{}" } else { parts.yaml };
    let meta = serde_yaml_ng::from_str::<M>(yaml).map_err(|e| FrontmatterError::Yaml {
        path: path.to_path_buf(),
        line: e.location().map_or(2, |l| l.line() + 1),
        reason: e.to_string(),
    })?;
    Ok(Document {
        meta,
        body: parts.body.to_string(),
    })
}

/// Renders frontmatter and body as `---\n<yaml>---\n\n<body>`. [`parse`]
/// gives back exactly `meta` and `body`.
pub fn render<M: Serialize>(path: &Path, meta: &M, body: &str) -> Result<String, FrontmatterError> {
    let yaml = serde_yaml_ng::to_string(meta).map_err(|e| FrontmatterError::Render {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut out = String::with_capacity(yaml.len() + body.len() + 16);
    out.push_str(FENCE);
    out.push('\n');
    out.push_str(&yaml);
    if !yaml.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(FENCE);
    out.push_str("\n\n");
    out.push_str(body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Meta {
        title: String,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn p() -> &'static Path {
        Path::new("/s/ltm/users/U1.md")
    }

    #[test]
    fn render_then_parse_gives_back_meta_and_body() {
        let meta = Meta {
            title: "a: b".into(),
            tags: vec!["x".into(), "---".into()],
        };
        for body in ["", "## Notes\n- a: b\n", "\nstarts blank\n---\nnot a fence to us\n"] {
            let text = render(p(), &meta, body).unwrap();
            let doc: Document<Meta> = parse(p(), &text).unwrap();
            assert_eq!(doc.meta, meta);
            assert_eq!(doc.body, body);
        }
    }

    #[test]
    fn hand_written_files_with_crlf_and_no_blank_line_parse() {
        let doc: Document<Meta> = parse(p(), "---\r\ntitle: t\r\n---\r\nbody\r\n").unwrap();
        assert_eq!(doc.meta.title, "t");
        assert_eq!(doc.body, "body\r\n");
        let doc: Document<Meta> = parse(p(), "---\ntitle: t\n---").unwrap();
        assert_eq!(doc.body, "");
    }

    #[test]
    fn a_file_without_frontmatter_is_missing() {
        let err = parse::<Meta>(p(), "# just markdown\n").unwrap_err();
        assert!(matches!(err, FrontmatterError::Missing { .. }));
        assert!(err.to_string().contains("/s/ltm/users/U1.md"));
        assert!(matches!(
            parse::<Meta>(p(), "").unwrap_err(),
            FrontmatterError::Missing { .. }
        ));
    }

    #[test]
    fn an_unclosed_frontmatter_is_reported() {
        for text in ["---\ntitle: t\n", "---", "---\n"] {
            assert!(
                matches!(parse::<Meta>(p(), text).unwrap_err(), FrontmatterError::Unclosed { .. }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn yaml_errors_name_the_file_line() {
        let err = parse::<Meta>(p(), "---\ntitle: t\ntags: [unclosed\n---\nbody").unwrap_err();
        let FrontmatterError::Yaml { line, .. } = &err else {
            panic!("{err}")
        };
        assert!(*line >= 3, "line {line} should point into the YAML, past the title");
        assert!(err.to_string().contains("U1.md line"));
        let err = parse::<Meta>(p(), "---\ntags: []\n---\n").unwrap_err();
        assert!(err.to_string().contains("title"), "{err}");
    }
}
