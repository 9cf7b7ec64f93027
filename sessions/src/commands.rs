//! The `/session` commands (being assembled).
pub mod parse;
pub use parse::{SessionCommand, parse};
