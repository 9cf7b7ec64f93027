//! Step 1 of a compaction's commit: the durable facts the summarizer
//! found, merged into the user's profile (and its dated fact log) and
//! topic notes. Idempotent — a repeated fact changes nothing — so a rerun
//! after a crash adds nothing twice. Never touches the log, the summary or
//! the archive.

use super::Compactor;
use crate::names::SafeName;
use crate::profile::{self, Learned, MergeReport, Owner};
use crate::record::{Record, Role};
use crate::summarizer::{FactSection, SummaryOutput};
use crate::topics;
use crate::versions::{Author, Change};
use chrono::{DateTime, Utc};

impl Compactor {
    /// Step 1. A profile that cannot be read or written is reported and
    /// skipped: the summary still goes ahead, and no fact is forced into a
    /// file a person has to fix.
    pub(super) fn merge_ltm(
        &self,
        user: &SafeName,
        batch: &[Record],
        output: &SummaryOutput,
        now: DateTime<Utc>,
    ) -> MergeReport {
        let layout = self.layout();
        let max_chars = self.inner.config.ltm.max_profile_chars;
        let display_name = batch
            .iter()
            .rev()
            .filter(|r| r.role == Role::User)
            .find_map(|r| r.user_name.as_deref());
        let owner = Owner { display_name };
        let change = Change {
            by: Author::Compaction,
            what: "facts from older messages",
        };
        let learned = Learned {
            facts: &output.facts,
            batch,
        };
        let report = profile::merge_facts(layout, user, owner, learned, max_chars, change, now).unwrap_or_else(|e| {
            tracing::warn!(user = %user.log_id(), error = %e, "facts not merged into the profile");
            MergeReport::default()
        });
        for fact in output.facts.iter().filter(|f| f.section == FactSection::Topics) {
            let change = Change {
                by: Author::Compaction,
                what: "ongoing topic from older messages",
            };
            if let Err(e) = topics::merge_fact(layout, user, &fact.key, &fact.value, max_chars, change, now) {
                tracing::warn!(user = %user.log_id(), error = %e, "ongoing topic not recorded in a topic note");
            }
        }
        report
    }
}
