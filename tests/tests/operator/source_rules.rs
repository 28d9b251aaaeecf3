//! Rules on the workspace's own source that the compiler and clippy do not
//! check (docs/internals/decisions.md, "Store calls: one client trait, rows
//! by name, explicit paths"): no crate re-exports a module's items by glob
//! (`pub use x::*`), so a reader can tell where a function lives.
//! (`clippy::wildcard_imports`, denied for the workspace, covers plain
//! `use x::*` but not a re-export that nothing in its own crate uses.)

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The `pub use` (or `pub(crate) use`, ...) statements of `source` that
/// import a glob, each as written up to its `;`.
fn glob_re_exports(source: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(start) = rest.find("pub") {
        let after = &rest[start..];
        let visibility_end = match after[3..].trim_start().strip_prefix('(') {
            Some(inner) => inner
                .find(')')
                .map(|close| after.len() - inner.len() + close + 1),
            None => Some(3),
        };
        let statement = visibility_end
            .map(|end| after[end..].trim_start())
            .filter(|tail| tail.starts_with("use "))
            .and_then(|tail| tail.find(';').map(|semi| &tail[..semi]));
        if let Some(statement) = statement {
            if statement.contains('*') {
                found.push(statement.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        rest = &after[3..];
    }
    found
}

#[test]
fn the_glob_finder_finds_glob_re_exports_and_nothing_else() {
    assert_eq!(
        glob_re_exports("pub use steps::*;\npub(crate) use a::{b, *};\n"),
        vec!["use steps::*", "use a::{b, *}"]
    );
    assert!(glob_re_exports(
        "pub use steps::{claim_agents, Claim};\nuse super::*;\n// pub use x::*;\npub fn f() {}\n"
    )
    .is_empty());
}

#[test]
fn no_workspace_crate_re_exports_a_glob() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for entry in fs::read_dir(root).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            rust_files(&dir.join("src"), &mut files);
        }
    }
    assert!(
        files.len() > 100,
        "the workspace's sources were not found under {}",
        root.display()
    );
    let globs: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let source = fs::read_to_string(file).unwrap();
            glob_re_exports(&source)
                .into_iter()
                .map(move |statement| format!("{}: {statement}", file.display()))
        })
        .collect();
    assert!(
        globs.is_empty(),
        "glob re-exports hide where an item lives; name the items: {globs:#?}"
    );
}
