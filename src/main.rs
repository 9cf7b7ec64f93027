//! The `mnemo` binary (being written).
fn main() {}
