//! CSV and JSON as text recall can find: a CSV row becomes one paragraph
//! of `column: value` pairs (so a piece of it says what its numbers are),
//! a JSON document one line per value with its path (`lease.deposit:
//! 1800`), a paragraph per top-level entry.

use serde_json::Value;

/// `text` read as CSV (headers in the first row; rows of other lengths
/// taken as they are), or `None` if it is not CSV.
pub fn csv_text(text: &str) -> Option<String> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader.headers().ok()?.iter().map(|h| h.trim().to_string()).collect();
    let mut out = String::new();
    for row in reader.records() {
        let row = row.ok()?;
        let pairs: Vec<String> = row
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(i, v)| match headers.get(i).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h}: {}", v.trim()),
                None => v.trim().to_string(),
            })
            .collect();
        if !pairs.is_empty() {
            out.push_str(&pairs.join("; "));
            out.push_str("\n\n");
        }
    }
    if out.is_empty() && !headers.is_empty() {
        out = headers.join("; ");
    }
    Some(out)
}

/// `text` read as JSON, one `path: value` line per value, or `None` if it
/// does not parse.
pub fn json_text(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    let mut out = String::new();
    match &value {
        Value::Object(map) => {
            for (key, v) in map {
                leaves(v, key, &mut out);
                out.push('\n');
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, &format!("[{i}]"), &mut out);
                out.push('\n');
            }
        }
        _ => leaves(&value, "", &mut out),
    }
    Some(out)
}

/// Depth is bounded by serde_json's own nesting limit (128).
fn leaves(value: &Value, path: &str, out: &mut String) {
    let line = |out: &mut String, shown: &str| {
        if path.is_empty() {
            out.push_str(shown);
        } else {
            out.push_str(&format!("{path}: {shown}"));
        }
        out.push('\n');
    };
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(v, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, &format!("{path}[{i}]"), out);
            }
        }
        Value::String(s) => line(out, s),
        Value::Null => {}
        other => line(out, &other.to_string()),
    }
}
