//! Scheduled maintenance (being assembled).
pub mod logs;
pub mod schedule;
pub mod state;
