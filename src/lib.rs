//! The mnemo broker as a library, so the binary stays thin glue and the
//! end-to-end tests drive the real `App`.

pub mod model;
