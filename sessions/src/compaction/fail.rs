//! The compaction's crash-test hook: the commit steps after which a test
//! can stop a run as a crash would (`Compactor::failing_after`). Public only
//! with the `fail-points` feature, which this crate's own tests turn on
//! (a dev-dependency on itself); the product never builds with it, so no
//! production type carries the hook.

/// A commit step a test can stop a run right after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(
    clippy::enum_variant_names,
    reason = "each point is named for the step it follows: `After…` is the meaning, not noise"
)]
pub enum FailPoint {
    AfterLtm,
    AfterSummary,
    AfterArchive,
}

impl FailPoint {
    #[cfg(feature = "fail-points")]
    pub const ALL: [FailPoint; 3] = [FailPoint::AfterLtm, FailPoint::AfterSummary, FailPoint::AfterArchive];
}
