//! Edits of a user's long-term memory asked for by the user
//! (`/session remember|forget`) or by the model's memory tools: remember a
//! fact, update one by key, forget a fact or a topic note, find facts by
//! words. Every write goes through [`crate::profile::write`] or
//! [`crate::topics::delete`], so it keeps the previous version and can be
//! undone ([`crate::versions`]), and every change of a fact is appended to
//! the fact log ([`crate::facts`]) so the log and the profile never disagree.
//!
//! Arguments are validated here (sizes, key shape) before any file is
//! touched; the caller is a [`SafeName`] the broker computed, never an
//! argument. Callers hold the user's lock. Files only; `now` is a parameter.
//!
//! [`TextEditor`] makes the same edits on a profile body held as text
//! (the Postgres store keeps it in a row), through the same functions
//! (`remember_in`, `update_in`, `forget_in`), so both stores share one set
//! of rules; that store keeps the versions and the fact log itself.

use crate::facts::{self, FactBy, FactEdit, LiveFact};
use crate::layout::Layout;
use crate::names::SafeName;
use crate::profile::{self, Body, Merged, ProfileError, normalized};
use crate::summarizer::FactSection;
use crate::topics::{self, TopicError};
use crate::versions::{self, Author, Change, Version};
use chrono::{DateTime, Utc};

/// Longest fact text accepted, in characters (the profile's bullet limit).
pub const MAX_TEXT_CHARS: usize = 300;
/// Longest key accepted, in characters.
pub const MAX_KEY_CHARS: usize = 64;
/// Characters of a key derived from a fact's first words.
const DERIVED_KEY_CHARS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The argument was refused before anything was touched.
    #[error("{0}")]
    Invalid(&'static str),
    #[error("no fact or topic note with that key")]
    NotFound,
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Topic(#[from] TopicError),
}

/// Who edits whose memory, and the profile's size cap.
#[derive(Clone, Copy, Debug)]
pub struct Editor<'a> {
    pub layout: &'a Layout,
    pub user: &'a SafeName,
    pub by: Author,
    /// `ltm.maxProfileChars`.
    pub max_chars: usize,
    pub now: DateTime<Utc>,
}

/// One fact of the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FactLine {
    pub section: FactSection,
    pub key: String,
    pub value: String,
}

/// What [`Editor::forget`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forgotten {
    Fact { key: String },
    Topic { slug: String },
}

/// A text for a fact: one line, 1 to [`MAX_TEXT_CHARS`] characters.
pub fn check_text(text: &str) -> Result<String, EditError> {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return Err(EditError::Invalid("the text is empty"));
    }
    if line.chars().count() > MAX_TEXT_CHARS {
        return Err(EditError::Invalid("the text is longer than 300 characters"));
    }
    Ok(line)
}

/// A key: one line, 1 to [`MAX_KEY_CHARS`] characters, no control
/// characters and no `: ` (which separates key from value in the file).
pub fn check_key(key: &str) -> Result<String, EditError> {
    let key = key.trim();
    if key.is_empty() {
        return Err(EditError::Invalid("the key is empty"));
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(EditError::Invalid("the key is longer than 64 characters"));
    }
    if key.chars().any(char::is_control) || key.contains(": ") {
        return Err(EditError::Invalid(
            "the key has a line break, a control character or `: `",
        ));
    }
    Ok(key.to_string())
}

impl Editor<'_> {
    fn change<'w>(&self, what: &'w str) -> Change<'w> {
        Change { by: self.by, what }
    }

    fn body(&self) -> Result<(profile::Profile, Body), EditError> {
        let profile = profile::read(self.layout, self.user)?
            .unwrap_or_else(|| profile::new_profile(self.layout, self.user, self.now));
        let body = Body::parse(&profile.body);
        Ok((profile, body))
    }

    /// [`Editor::body`] about to be edited: hand edits of the file are
    /// recorded in the fact log first, so the edit's entries are its own.
    fn body_to_edit(&self) -> Result<(profile::Profile, Body), EditError> {
        let (profile, body) = self.body()?;
        facts::sync(self.layout, self.user, &body, FactBy::Operator, self.now).map_err(profile::ProfileError::from)?;
        Ok((profile, body))
    }

    fn save(&self, mut profile: profile::Profile, mut body: Body, what: &str) -> Result<(), EditError> {
        let dropped = body.cap(self.max_chars);
        profile.body = body.render(self.max_chars);
        profile.meta.updated = Some(self.now);
        profile::write(self.layout, self.user, &profile, self.change(what), self.now)?;
        let edit = FactEdit {
            by: self.by.into(),
            batch: &[],
            now: self.now,
        };
        profile::record_in_log(self.layout, self.user, &body, &dropped, edit);
        Ok(())
    }

    /// Every fact of the profile, in file order.
    pub fn facts(&self) -> Result<Vec<FactLine>, EditError> {
        let (_, body) = self.body()?;
        Ok(lines_of(&body))
    }

    /// Adds `text` as a new fact under `section`, keyed by its first words
    /// (made unique); returns the key.
    pub fn remember(&self, section: FactSection, text: &str) -> Result<String, EditError> {
        let text = check_text(text)?;
        let (profile, mut body) = self.body_to_edit()?;
        let (key, what) = remember_in(&mut body, section, &text);
        self.save(profile, body, &what)?;
        Ok(key)
    }

    /// Replaces the text of the fact `key` (in whichever section it is).
    pub fn update(&self, key: &str, text: &str) -> Result<(), EditError> {
        let key = check_key(key)?;
        let text = check_text(text)?;
        let (profile, mut body) = self.body_to_edit()?;
        match update_in(&mut body, &key, &text)? {
            Some(what) => self.save(profile, body, &what),
            None => Ok(()),
        }
    }

    /// Forgets the fact `key`, or else the topic note of that name.
    pub fn forget(&self, key: &str) -> Result<Forgotten, EditError> {
        let key = check_key(key)?;
        if self.forget_facts(&[key.as_str()])? > 0 {
            return Ok(Forgotten::Fact { key });
        }
        let what = format!("forgot topic `{}`", key.to_ascii_lowercase());
        match topics::delete(self.layout, self.user, &key, self.change(&what), self.now) {
            Ok(()) => Ok(Forgotten::Topic {
                slug: key.to_ascii_lowercase(),
            }),
            Err(TopicError::NotFound { .. } | TopicError::InvalidSlug { .. } | TopicError::ReservedOwner) => {
                Err(EditError::NotFound)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the facts with these keys in one write (one version);
    /// returns how many went.
    pub fn forget_facts(&self, keys: &[&str]) -> Result<usize, EditError> {
        let (profile, mut body) = self.body_to_edit()?;
        let (removed, what) = forget_in(&mut body, keys);
        if let Some(what) = what {
            self.save(profile, body, &what)?;
        }
        Ok(removed)
    }

    /// Puts back the newest kept version of the user's long-term memory
    /// (`/session undo`) and records in the fact log what that changed in
    /// the profile; `None` when there is nothing to undo.
    ///
    /// Undo works on a profile that does not parse (putting back the
    /// version before a bad hand edit is how to fix one): the log is then
    /// brought in line by the next edit that can read the profile.
    pub fn undo(&self) -> Result<Option<Version>, EditError> {
        self.sync_if_readable(FactBy::Operator);
        let undone = versions::undo(self.layout, self.user, self.now).map_err(ProfileError::from)?;
        if undone.is_some() {
            self.sync_if_readable(self.by.into());
        }
        Ok(undone)
    }

    fn sync_if_readable(&self, by: FactBy) {
        let synced = self.body().and_then(|(_, body)| {
            facts::sync(self.layout, self.user, &body, by, self.now).map_err(|e| EditError::Profile(e.into()))
        });
        if let Err(e) = synced {
            tracing::warn!(user = %self.user.log_id(), error = %e, "fact log not brought in line with the profile; the next edit does it");
        }
    }

    /// Facts whose key and text hold every word of `words` (case and
    /// spacing ignored).
    pub fn matching(&self, words: &str) -> Result<Vec<FactLine>, EditError> {
        Ok(matching_in(self.facts()?, words))
    }
}

/// The result of an edit of a profile body held as text
/// ([`TextEditor`]): the new body, the version's few words, and the
/// bullets the size cap dropped (for the fact log,
/// [`crate::facts::changes_for`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    pub body: String,
    pub what: String,
    pub dropped: Vec<LiveFact>,
}

/// The [`Editor`]'s edits on a profile body held outside the files (the
/// Postgres store keeps it in a row): the same argument checks, keys,
/// merge, cap and version labels, no I/O. The caller stores
/// [`Saved::body`], keeps the previous body as a version and records the
/// change in its fact log.
#[derive(Clone, Copy, Debug)]
pub struct TextEditor<'a> {
    /// The profile body as it is now (empty when there is none).
    pub body: &'a str,
    /// `ltm.maxProfileChars`.
    pub max_chars: usize,
}

impl TextEditor<'_> {
    fn save(&self, mut body: Body, what: String) -> Saved {
        let dropped = body.cap(self.max_chars);
        Saved {
            body: body.render(self.max_chars),
            what,
            dropped,
        }
    }

    /// Every fact of the profile, in order.
    pub fn facts(&self) -> Vec<FactLine> {
        lines_of(&Body::parse(self.body))
    }

    /// [`Editor::matching`].
    pub fn matching(&self, words: &str) -> Vec<FactLine> {
        matching_in(self.facts(), words)
    }

    /// [`Editor::remember`]: the key and the edit.
    pub fn remember(&self, section: FactSection, text: &str) -> Result<(String, Saved), EditError> {
        let text = check_text(text)?;
        let mut body = Body::parse(self.body);
        let (key, what) = remember_in(&mut body, section, &text);
        Ok((key, self.save(body, what)))
    }

    /// [`Editor::update`]: `None` when the text was already that.
    pub fn update(&self, key: &str, text: &str) -> Result<Option<Saved>, EditError> {
        let key = check_key(key)?;
        let text = check_text(text)?;
        let mut body = Body::parse(self.body);
        Ok(update_in(&mut body, &key, &text)?.map(|what| self.save(body, what)))
    }

    /// [`Editor::forget_facts`]: how many went, and the edit if any did.
    pub fn forget_facts(&self, keys: &[&str]) -> (usize, Option<Saved>) {
        let mut body = Body::parse(self.body);
        let (removed, what) = forget_in(&mut body, keys);
        (removed, what.map(|what| self.save(body, what)))
    }
}

fn lines_of(body: &Body) -> Vec<FactLine> {
    body.all_bullets()
        .into_iter()
        .map(|(section, key, value)| FactLine {
            section,
            key: key.to_string(),
            value: value.to_string(),
        })
        .collect()
}

fn matching_in(facts: Vec<FactLine>, words: &str) -> Vec<FactLine> {
    let words: Vec<String> = normalized(words).split(' ').map(str::to_string).collect();
    facts
        .into_iter()
        .filter(|f| {
            let line = normalized(&format!("{} {}", f.key, f.value));
            words.iter().all(|w| line.contains(w.as_str()))
        })
        .collect()
}

/// Adds checked `text` under `section`, keyed by its first words (made
/// unique); returns the key and the version's words.
fn remember_in(body: &mut Body, section: FactSection, text: &str) -> (String, String) {
    let taken: Vec<String> = body.all_bullets().iter().map(|(_, k, _)| normalized(k)).collect();
    let base = derived_key(text);
    let key = (1..)
        .map(|n| if n == 1 { base.clone() } else { format!("{base}-{n}") })
        .find(|k| !taken.contains(&normalized(k)))
        .unwrap_or(base);
    body.merge(section, &key, text);
    let what = format!("remembered `{key}`");
    (key, what)
}

/// Replaces the text of the fact `key` (checked); `None` when unchanged.
fn update_in(body: &mut Body, key: &str, text: &str) -> Result<Option<String>, EditError> {
    let wanted = normalized(key);
    let Some((section, found, _)) = body
        .all_bullets()
        .into_iter()
        .find(|(_, k, _)| normalized(k) == wanted)
        .map(|(s, k, v)| (s, k.to_string(), v.to_string()))
    else {
        return Err(EditError::NotFound);
    };
    if body.merge(section, &found, text) == Some(Merged::Unchanged) {
        return Ok(None);
    }
    Ok(Some(format!("updated `{found}`")))
}

/// Removes the facts with these keys; how many went and, if any, the
/// version's words.
fn forget_in(body: &mut Body, keys: &[&str]) -> (usize, Option<String>) {
    let removed = body.remove_keys(keys);
    let what = (removed > 0).then(|| match keys {
        [one] => format!("forgot `{one}`"),
        _ => format!("forgot {removed} facts"),
    });
    (removed, what)
}

/// A key from the text's first words: lowercase letters and digits, words
/// joined by `-`, at most [`DERIVED_KEY_CHARS`]; `note` if none.
fn derived_key(text: &str) -> String {
    let mut key = String::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        let extra = word.chars().count() + usize::from(!key.is_empty());
        if !key.is_empty() && key.chars().count() + extra > DERIVED_KEY_CHARS {
            break;
        }
        if !key.is_empty() {
            key.push('-');
        }
        key.extend(word.chars().take(DERIVED_KEY_CHARS));
    }
    if key.is_empty() { "note".to_string() } else { key }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn editor<'a>(layout: &'a Layout, user: &'a SafeName) -> Editor<'a> {
        Editor {
            layout,
            user,
            by: Author::Command,
            max_chars: 4000,
            now: Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap(),
        }
    }

    #[test]
    fn remember_update_and_forget_a_fact_each_keep_a_version() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let e = editor(&layout, &user);
        let key = e.remember(FactSection::Facts, "My daughter is called Mia").unwrap();
        assert_eq!(key, "my-daughter-is-called-mia");
        let again = e.remember(FactSection::Facts, "My daughter is called Mia!").unwrap();
        assert_eq!(again, "my-daughter-is-called-mia-2");
        e.update(&key, "My daughter is called Mia Rose").unwrap();
        assert_eq!(e.facts().unwrap()[1].value, "My daughter is called Mia Rose");
        assert_eq!(e.forget(&again).unwrap(), Forgotten::Fact { key: again.clone() });
        assert!(matches!(e.forget("nothing-like-this"), Err(EditError::NotFound)));
        assert!(matches!(e.update("nothing", "x"), Err(EditError::NotFound)));
        assert_eq!(versions::history(&layout, &user).unwrap().len(), 4);
        assert_eq!(e.matching("mia ROSE").unwrap().len(), 1);
    }

    fn text(body: &str) -> TextEditor<'_> {
        TextEditor { body, max_chars: 4000 }
    }

    #[test]
    fn the_text_editor_makes_the_same_edits_as_the_files_editor() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let e = editor(&layout, &user);
        let mut body = String::new();
        for fact in ["My daughter is called Mia", "I sail on Sundays", "Tea, never coffee"] {
            let key = e.remember(FactSection::Notes, fact).unwrap();
            let (same, saved) = text(&body).remember(FactSection::Notes, fact).unwrap();
            assert_eq!(key, same);
            body = saved.body;
        }
        let small = TextEditor {
            body: "",
            max_chars: 120,
        };
        let (_, capped) = small.remember(FactSection::Notes, &"x".repeat(200)).unwrap();
        assert_eq!(
            capped.dropped.len(),
            1,
            "over the cap: dropped, for the fact log to record"
        );
        e.update("i-sail-on-sundays", "I sail on Saturdays").unwrap();
        body = text(&body)
            .update("I-SAIL-on-sundays", "I sail on Saturdays")
            .unwrap()
            .unwrap()
            .body;
        e.forget("tea-never-coffee").unwrap();
        let (removed, saved) = text(&body).forget_facts(&["tea-never-coffee"]);
        assert_eq!(removed, 1);
        let saved = saved.unwrap();
        assert_eq!(saved.what, "forgot `tea-never-coffee`");
        let on_file = crate::profile::read(&layout, &user).unwrap().unwrap().body;
        assert_eq!(saved.body, on_file, "the same body on both stores");
        assert!(matches!(
            text(&saved.body).update("nothing", "x"),
            Err(EditError::NotFound)
        ));
        assert!(matches!(text("").update("k: v", "x"), Err(EditError::Invalid(_))));
    }

    #[test]
    fn oversized_or_malformed_arguments_touch_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let e = editor(&layout, &user);
        assert!(matches!(
            e.remember(FactSection::Facts, &"x".repeat(301)),
            Err(EditError::Invalid(_))
        ));
        assert!(matches!(
            e.remember(FactSection::Facts, "  "),
            Err(EditError::Invalid(_))
        ));
        assert!(matches!(e.forget("a\nb"), Err(EditError::Invalid(_))));
        assert!(matches!(e.forget(&"k".repeat(65)), Err(EditError::Invalid(_))));
        assert!(matches!(e.update("k: v", "x"), Err(EditError::Invalid(_))));
        assert!(!layout.profile_path(&user).exists());
        assert!(versions::history(&layout, &user).unwrap().is_empty());
    }

    #[test]
    fn forget_falls_back_to_a_topic_note_and_undo_brings_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "slack");
        let user = SafeName::of("U1");
        let e = editor(&layout, &user);
        let note = topics::TopicWrite {
            title: "Boat",
            tags: &[],
            body: "- sails on Sundays\n",
        };
        let change = Change {
            by: Author::Compaction,
            what: "t",
        };
        topics::write(&layout, &user, "boat", note, change, e.now).unwrap();
        assert_eq!(e.forget("Boat").unwrap(), Forgotten::Topic { slug: "boat".into() });
        assert!(topics::read(&layout, &user, "boat").unwrap().is_none());
        versions::undo(&layout, &user, Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap())
            .unwrap()
            .unwrap();
        assert!(topics::read(&layout, &user, "boat").unwrap().is_some());
    }
}
