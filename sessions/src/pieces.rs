//! Text cut into the pieces recall indexes and shows: paragraphs and
//! bullets of a markdown body, none longer than [`PIECE_CHARS`]. Shared by
//! the notes and summaries recall reads ([`crate::recall`]) and the
//! documents a user sent ([`crate::documents`]).

/// Longest piece of a note, summary or document, in characters: a
/// recalled item should cost a few dozen tokens, not a whole file.
pub const PIECE_CHARS: usize = 480;

/// Splits a markdown body into paragraphs and bullets, each a piece of at
/// most [`PIECE_CHARS`] (a longer one is cut at a word). Headings are
/// dropped.
pub fn pieces(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let push = |current: &mut String, out: &mut Vec<String>| {
        let piece = current.trim().to_string();
        if !piece.is_empty() {
            out.push(piece);
        }
        current.clear();
    };
    for line in body.lines() {
        let line = line.trim();
        let new_block = line.is_empty() || line.starts_with('#') || line.starts_with("- ") || line.starts_with("* ");
        if new_block {
            push(&mut current, &mut out);
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        for word in line.split_whitespace() {
            if current.chars().count() + word.chars().count() + 1 > PIECE_CHARS {
                push(&mut current, &mut out);
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.extend(word.chars().take(PIECE_CHARS));
        }
    }
    push(&mut current, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bullets_become_pieces_and_headings_are_dropped() {
        let body = "## Facts\n- sister: Ana, lives in Lisbon and teaches music to children every weekday afternoon\n- dog: a greyhound called Pixel who is afraid of thunderstorms and bicycles\n## Notes\n- likes tea";
        let p = pieces(body);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("- sister: Ana"));
        assert!(p[1].contains("Pixel") && p[2] == "- likes tea");
    }

    #[test]
    fn a_long_paragraph_is_cut_into_bounded_pieces() {
        let body = "word ".repeat(1000);
        let p = pieces(&body);
        assert!(p.len() > 5);
        assert!(p.iter().all(|piece| piece.chars().count() <= PIECE_CHARS));
    }
}
