//! Puts the git revision the binary is built from into `MNEMO_GIT_REV`
//! (`mnemo --version`): the short commit, with `-dirty` for uncommitted
//! changes; `unknown` when this is not a git checkout or git is missing
//! (a crates.io or tarball build), never a build failure.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let rev = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(rev) if !rev.is_empty() => {
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
}
