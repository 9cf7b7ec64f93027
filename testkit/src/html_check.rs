//! A strict reader of Telegram HTML, for tests only: what a message
//! displays, or why Telegram's parser would refuse it. Shared by the
//! adapter's unit tests, its fake-server tests and the end-to-end tests
//! through the test kit, so all three judge replies the same way.

/// The text `html` displays, or why Telegram would refuse it: a tag outside
/// the set mnemo emits (`b`, `i`, `s`, `code`, `pre`, `pre>code class`,
/// `a href`, `blockquote`), a tag closed out of order or left open, a
/// nesting Telegram forbids (anything inside `code`/`pre`, a link or code
/// inside a link, a `pre` or `blockquote` inside anything), or a bare `<`,
/// `>` or `&`.
pub fn visible_text(html: &str) -> Result<String, String> {
    let mut shown = String::new();
    let mut open: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest.find('>').ok_or("a '<' that opens no tag")?;
                let tag = &rest[1..end];
                match tag.strip_prefix('/') {
                    Some(name) => match open.pop() {
                        Some(top) if top == name => {}
                        top => return Err(format!("</{name}> closes {top:?}")),
                    },
                    None => open.push(opened(tag, &open)?),
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let (c, used) = entity(rest)?;
                shown.push(c);
                rest = &rest[used..];
            }
            '>' => return Err("a bare '>'".into()),
            c => {
                shown.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if open.is_empty() {
        Ok(shown)
    } else {
        Err(format!("left open: {open:?}"))
    }
}

/// The tag name `tag` (the text between `<` and `>`) opens inside `open`.
fn opened<'a>(tag: &str, open: &[&'a str]) -> Result<&'a str, String> {
    let top = open.last().copied();
    let attribute = |prefix: &str| {
        tag.strip_prefix(prefix)
            .and_then(|v| v.strip_suffix('"'))
            .is_some_and(|v| !v.contains('"') && decodes(v))
    };
    let name = match tag {
        "b" => "b",
        "i" => "i",
        "s" => "s",
        "blockquote" => "blockquote",
        "code" => "code",
        "pre" => "pre",
        _ if attribute("a href=\"") => "a",
        _ if attribute("code class=\"language-") && top == Some("pre") => "code",
        _ => return Err(format!("<{tag}> is not a tag mnemo emits")),
    };
    let pre_code = name == "code" && top == Some("pre") && tag != "code";
    if !pre_code && open.iter().any(|t| *t == "code" || *t == "pre") {
        return Err(format!("<{tag}> inside code or pre"));
    }
    if (name == "a" || name == "code") && open.contains(&"a") {
        return Err(format!("<{tag}> inside a link"));
    }
    if (name == "pre" || name == "blockquote") && !open.is_empty() {
        return Err(format!("<{name}> inside {open:?}"));
    }
    Ok(name)
}

/// The character an entity at the start of `text` stands for, and its length.
fn entity(text: &str) -> Result<(char, usize), String> {
    let end = text.find(';').filter(|&e| e <= 5).ok_or("a bare '&'")?;
    let c = match &text[1..end] {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        other => return Err(format!("unknown entity &{other};")),
    };
    Ok((c, end + 1))
}

/// Whether an attribute value has only known entities and no bare `<`.
fn decodes(value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = rest.find(['&', '<']) {
        if rest[at..].starts_with('<') {
            return false;
        }
        let Ok((_, used)) = entity(&rest[at..]) else {
            return false;
        };
        rest = &rest[at + used..];
    }
    true
}
