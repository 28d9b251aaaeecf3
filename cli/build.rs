//! The commit `holdfast --version` names: `HOLDFAST_GIT_COMMIT` when the
//! build sets it (the container image, built without `.git`), else `git
//! rev-parse` of the checkout; neither (a source tarball): none is named.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=HOLDFAST_GIT_COMMIT");
    let commit = std::env::var("HOLDFAST_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuilt when HEAD moves: HEAD itself (a checkout) and the ref it
    // names (a commit), in the repository's own git directory (a worktree
    // has its own HEAD; refs live in the common one).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!(
            "cargo:rerun-if-changed={}",
            Path::new(&dir).join("HEAD").display()
        );
    }
    if let (Some(common), Some(head)) = (
        git(&["rev-parse", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        let common = Path::new(&common);
        println!("cargo:rerun-if-changed={}", common.join(&head).display());
        println!(
            "cargo:rerun-if-changed={}",
            common.join("packed-refs").display()
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    let long = match commit {
        Some(commit) => format!("{version} (commit {commit})"),
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=VERSION_WITH_COMMIT={long}");
}
