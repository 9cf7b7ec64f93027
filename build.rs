//! Puts the git revision the binary is built from into `MNEMO_GIT_REV`
//! (`mnemo --version`): the `MNEMO_GIT_REV` environment variable when it is
//! set (a build without the checkout: the Dockerfile passes it as a build
//! argument, since `.dockerignore` keeps `.git` out of the context); else
//! the short commit, with `-dirty` for uncommitted changes; `unknown` when
//! this is not a git checkout or git is missing (a crates.io or tarball
//! build), never a build failure.
//!
//! Also links the `mnemo` binary with packed relative relocations
//! (`-z pack-relative-relocs`, DT_RELR) where this machine's linker and C
//! library handle them, which a probe decides; elsewhere the binary is
//! linked as before. Never a build failure either.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The revision the builder names, if any.
// A build script's input, like cargo's variables below.
#[allow(clippy::disallowed_methods)]
fn given_rev() -> Option<String> {
    let rev = std::env::var("MNEMO_GIT_REV").ok()?;
    let rev = rev.trim();
    let printable = rev.chars().all(|c| c.is_ascii_graphic());
    (!rev.is_empty() && printable && rev.len() <= 64).then(|| rev.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MNEMO_GIT_REV");
    let rev = match (given_rev(), git(&["rev-parse", "--short=12", "HEAD"])) {
        (Some(given), _) => given,
        (None, Some(rev)) if !rev.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            if dirty { format!("{rev}-dirty") } else { rev }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=MNEMO_GIT_REV={rev}");
    // Rebuild when HEAD moves (a commit, a checkout) or the index changes.
    for path in ["HEAD", "index"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = git(&["rev-parse", "--git-path", &head])
    {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    if relr_links_and_runs() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether a binary linked with `-z pack-relative-relocs` can be built and
/// run here. A position-independent binary otherwise carries a 24-byte
/// `.rela.dyn` entry for every pointer the loader must fix up (1.46 MB of
/// the release binary, read at every start); DT_RELR packs them into a
/// bitmap (24 kB; BENCHMARKS.md). It needs GNU ld ≥ 2.38 and glibc ≥ 2.36, whose
/// loader refuses the binary otherwise (`GLIBC_ABI_DT_RELR not found`), so
/// the probe links and runs a C program with the flag and the binary gets
/// it only if that worked: on an older system, or when cross-compiling,
/// it is linked as before.
// A build script's inputs are cargo's environment variables (the target,
// `OUT_DIR`, `CC`); the product's rule that only setup reads the
// environment is about the binary.
#[allow(clippy::disallowed_methods)]
fn relr_links_and_runs() -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if !glibc || var("HOST") != var("TARGET") || !["x86_64", "x86"].contains(&var("CARGO_CFG_TARGET_ARCH").as_str()) {
        return false;
    }
    let out = Path::new(&std::env::var_os("OUT_DIR").unwrap_or_default()).join("relr-probe");
    let source = out.with_extension("c");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let linked = Command::new(cc)
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&out)
        .arg(&source)
        .output()
        .is_ok_and(|o| o.status.success());
    linked && Command::new(&out).status().is_ok_and(|s| s.success())
}
