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
//!
//! And, in release builds, lays out the functions the broker runs on its
//! message path side by side (`build/hot-code.order`) where the linker
//! takes such a list ([`ordering_links`]).

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
    println!("cargo:rerun-if-changed={HOT_CODE}");
    if let Some(order) = ordering_links() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // A name the list holds that this build no longer has is skipped.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The functions the broker runs on its message path, one symbol a line,
/// written by `scripts/hot-code.sh` from a release build.
const HOT_CODE: &str = "build/hot-code.order";

/// The hot functions' list, when the release binary is to be linked with
/// them side by side (`--symbol-ordering-file`, an option of LLD, the
/// linker rustc uses on x86-64 Linux). The kernel maps a binary's code
/// 64 kB around each page a process first runs, so the ~2 MB of functions
/// a turn runs, spread over 12 MB of code, kept ~8 MB of it resident; side
/// by side, they keep what BENCHMARKS.md ("Code laid out by use") records.
/// Release builds only, and only if a probe program links with the option
/// the way this build links (its target, linker and flags): GNU ld, say,
/// has no such option, and then the binary is linked as before. Never a
/// build failure.
// A build script's inputs are cargo's environment variables.
#[allow(clippy::disallowed_methods)]
fn ordering_links() -> Option<std::path::PathBuf> {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // Absolute: the linker does not run in this folder.
    let hot = Path::new(&var("CARGO_MANIFEST_DIR")).join(HOT_CODE);
    if var("PROFILE") != "release" || !hot.is_file() {
        return None;
    }
    let out = Path::new(&std::env::var_os("OUT_DIR").unwrap_or_default()).join("ordering-probe");
    let source = out.with_extension("rs");
    let order = out.with_extension("order");
    if std::fs::write(&source, "fn main() {}\n").is_err() || std::fs::write(&order, "main\n").is_err() {
        return None;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut probe = Command::new(rustc);
    probe
        .arg("--target")
        .arg(var("TARGET"))
        .arg("-o")
        .arg(&out)
        .arg(&source);
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        probe.arg("-C").arg(format!("linker={linker}"));
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    probe.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    probe
        .arg("-C")
        .arg(format!("link-arg=-Wl,--symbol-ordering-file={}", order.display()));
    probe.output().is_ok_and(|o| o.status.success()).then_some(hot)
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
