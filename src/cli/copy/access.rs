//! `mnemo store copy`'s part for access rules: each channel's
//! `access.json` ↔ its `mnemo_access` row, both directions, as one
//! document (parsed and written with `access::file`'s types on both
//! sides, so what is copied is what each store's readers accept).
//!
//! Invariants, as for users: never merged. Rules already there and equal
//! are skipped; a target holding the default rules (no file, no row, or
//! `{}`) takes the copy; different rules stop the copy with an error
//! naming the channel unless `--replace`. A corrupt source stops the copy
//! (copying it would turn broken rules into the defaults, which let
//! strangers ask for codes). Into the database the write is one
//! transaction on the locked row; into files it is the locked atomic
//! update the broker and `mnemo access` use. Copied only when the copy is
//! not limited to one `--user`.

use crate::access::db;
use crate::access::file::{self, AccessFile};
use crate::access::store::quarantine_notice;
use anyhow::{Context as _, Result, bail};
use mnemo_pg::PgStore;
use mnemo_sessions::{Layout, SafeName};
use std::path::Path;

/// What happened to one channel's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Copied,
    AlreadyThere,
    Replaced,
    /// The target's rules differ and `--replace` was not given.
    Differs,
}

/// What the copy did with access rules, for the summary.
#[derive(Default)]
pub struct AccessTotals {
    pub copied: usize,
    pub already_there: usize,
    pub replaced: usize,
}

impl AccessTotals {
    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Copied => self.copied += 1,
            Outcome::AlreadyThere => self.already_there += 1,
            Outcome::Replaced => self.replaced += 1,
            Outcome::Differs => {}
        }
    }

    pub fn channels(&self) -> usize {
        self.copied + self.already_there + self.replaced
    }
}

/// Puts `source` into `target` (as the store has it now), by the rules in
/// the module doc.
fn put(target: &mut AccessFile, source: &AccessFile, replace: bool) -> Outcome {
    if target == source {
        return Outcome::AlreadyThere;
    }
    let outcome = if *target == AccessFile::default() {
        Outcome::Copied
    } else if replace {
        Outcome::Replaced
    } else {
        return Outcome::Differs;
    };
    *target = source.clone();
    outcome
}

fn differs(channel: &str, from: &str, to: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the access rules of channel `{}` in {to} differ from those in {from}: not merged; compare them with \
         `mnemo access list` on each store, or pass --replace to overwrite {to}'s with {from}'s",
        SafeName::of(channel)
    )
}

/// Each channel's access.json (of `channels`) into its row.
pub async fn files_to_postgres(
    root: &Path,
    store: &PgStore,
    channels: &[String],
    replace: bool,
    totals: &mut AccessTotals,
) -> Result<()> {
    for channel in channels {
        let path = Layout::new(root, channel).access_path();
        if let Some(notice) = quarantine_notice(&path) {
            bail!("cannot copy the access rules of `{}`: {notice}", SafeName::of(channel));
        }
        let Some(source) = file::read(&path).with_context(|| format!("reading {}", path.display()))? else {
            continue;
        };
        let ((outcome, _), _) = db::edit(store, channel, |rules| put(rules, &source, replace))
            .await
            .with_context(|| {
                format!(
                    "copying the access rules of `{}` into the database",
                    SafeName::of(channel)
                )
            })?;
        if outcome == Outcome::Differs {
            return Err(differs(channel, "the files", "the database"));
        }
        totals.count(outcome);
        eprintln!("access rules of `{}`: {}", SafeName::of(channel), note(outcome));
    }
    Ok(())
}

/// Each row (of `only`, or all) into its channel's access.json.
pub async fn postgres_to_files(
    root: &Path,
    store: &PgStore,
    only: Option<&str>,
    replace: bool,
    totals: &mut AccessTotals,
) -> Result<()> {
    let channels = mnemo_pg::access::channels(store)
        .await
        .context("listing the database's access rules")?;
    for channel in channels.iter().filter(|c| only.is_none_or(|o| o == c.as_str())) {
        let shown = SafeName::of(channel);
        let Some(row) = mnemo_pg::access::read(store, channel).await? else {
            continue;
        };
        let source =
            db::parse(channel, &row.doc).with_context(|| format!("cannot copy the access rules of `{shown}`"))?;
        let path = Layout::new(root, channel).access_path();
        let (outcome, _) = file::update(&path, |rules| put(rules, &source, replace))
            .with_context(|| format!("copying the access rules of `{shown}` into {}", path.display()))?;
        if outcome == Outcome::Differs {
            return Err(differs(channel, "the database", "the files"));
        }
        totals.count(outcome);
        eprintln!("access rules of `{shown}`: {}", note(outcome));
    }
    Ok(())
}

fn note(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Copied => "copied",
        Outcome::AlreadyThere => "already there",
        Outcome::Replaced => "replaced",
        Outcome::Differs => "differ",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::file::DmPolicy;

    #[test]
    fn rules_are_copied_over_defaults_kept_when_equal_and_never_merged() {
        let mut source = AccessFile::default();
        source.allow_from.insert("U1".into());
        let mut target = AccessFile::default();
        assert_eq!(put(&mut target, &source, false), Outcome::Copied);
        assert_eq!(target, source);
        assert_eq!(put(&mut target, &source, false), Outcome::AlreadyThere);
        let mut other = AccessFile {
            dm_policy: DmPolicy::Open,
            ..AccessFile::default()
        };
        assert_eq!(put(&mut other, &source, false), Outcome::Differs);
        assert_eq!(other.dm_policy, DmPolicy::Open, "left as it was");
        assert_eq!(put(&mut other, &source, true), Outcome::Replaced);
        assert_eq!(other, source);
    }
}
