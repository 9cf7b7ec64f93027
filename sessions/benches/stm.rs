//! STM benches (being written).
fn main() {}
