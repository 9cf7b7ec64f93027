//! The broker end to end, in one test binary (one link instead of one per
//! area): each module is one area's suite, run against the real binary or
//! the real `App` with fakes only at the network edge (`support`);
//! `conformance` runs the memory seam's specs on both stores. `tests/access.rs`
//! stays a binary of its own because it installs a process-wide log capture.
//! Run one area with `cargo test --test e2e <module>::`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test crate: an unwrap that fails is a failed test"
)]

mod support;

mod access_pg;
mod bench;
mod broker;
mod cli_output;
mod config_check;
mod conformance;
mod crash;
mod deploy;
mod discord;
mod hardening;
mod keep;
mod memory_tools;
mod model_backends;
mod operator;
mod ops;
mod postgres;
mod recall;
mod reminders;
mod slack;
mod store_copy;
mod telegram;
mod usage;

/// `autotests = false` means a new `tests/*.rs` file is silently not run
/// unless it is listed as a `[[test]]` or declared as a module of one: hold
/// that here, for every crate of the workspace.
#[test]
fn every_file_under_a_tests_folder_is_compiled_into_a_test_binary() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in [".", "sessions", "channels", "pg"] {
        let tests = root.join(krate).join("tests");
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let binaries: Vec<String> = std::fs::read_dir(&tests)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| manifest.contains(&format!("path = \"tests/{name}\"")))
            .collect();
        assert!(!binaries.is_empty(), "{krate}: no [[test]] in Cargo.toml");
        let roots: String = binaries
            .iter()
            .map(|b| std::fs::read_to_string(tests.join(b)).unwrap())
            .collect();
        for entry in std::fs::read_dir(&tests).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let Some(module) = name.strip_suffix(".rs") else {
                continue;
            };
            assert!(
                binaries.contains(&name) || roots.contains(&format!("mod {module};")),
                "{krate}/tests/{name} is neither a [[test]] nor a module of one: it would never run"
            );
        }
    }
}
