//! The reference pages in docs/ stay true to the code: every operation of
//! the served OpenAPI document has a section in docs/api.md listing exactly
//! its statuses (and the page describes no other route); every type in
//! `holdfast.event_types()` is described in docs/events.md (and no other);
//! every `HOLDFAST_*` name in the crates' sources and every flag of the
//! server commands is in docs/configuration.md (and every variable its
//! tables name exists); docs/reference/cli.md is generated from the CLI's
//! parser; nothing cites sections of the original design document, which is
//! not in the repository, and nothing, the SQL included, cites a tracker
//! entry by number.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use holdfast_tests::process::holdfast_bin;
use holdfast_tests::TestDb;
use serde_json::Value;

const API_MD: &str = include_str!("../../../docs/api.md");
const EVENTS_MD: &str = include_str!("../../../docs/events.md");
const CONFIGURATION_MD: &str = include_str!("../../../docs/configuration.md");

/// The prefix of Holdfast's own environment variables.
const PREFIX: &str = "HOLDFAST_";

/// The processes whose flags docs/configuration.md lists one by one.
const SERVER_COMMANDS: &[&[&str]] = &[
    &["server", "api"],
    &["server", "worker"],
    &["server", "maintenance"],
    &["machine", "run"],
    &["up"],
    &["demo"],
];

/// `(method, path)` → statuses, for each route section of docs/api.md: a
/// heading ``### `METHOD /path` `` and, under it, bullets ``- `NNN` …``.
fn documented_routes() -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut routes = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in API_MD.lines() {
        if line.starts_with('#') {
            current = line
                .strip_prefix("### `")
                .and_then(|rest| rest.strip_suffix('`'))
                .and_then(|route| route.split_once(' '))
                .map(|(method, path)| (method.to_lowercase(), path.to_owned()));
            if let Some(route) = &current {
                let fresh = routes.insert(route.clone(), BTreeSet::new()).is_none();
                assert!(fresh, "docs/api.md has two sections for {route:?}");
            }
            continue;
        }
        let (Some(route), Some(rest)) = (&current, line.strip_prefix("- `")) else {
            continue;
        };
        let status: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if status.len() == 3 && rest[3..].starts_with('`') {
            routes.get_mut(route).expect("section").insert(status);
        }
    }
    routes
}

#[test]
fn every_operation_of_the_openapi_document_has_a_section_in_docs_api_md_with_its_statuses() {
    let document: Value =
        serde_json::from_str(&holdfast_api::openapi().to_json().unwrap()).unwrap();
    let mut served = BTreeMap::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let statuses: BTreeSet<String> = operation["responses"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            served.insert((method.clone(), path.clone()), statuses);
        }
    }
    assert!(served.len() > 30, "the document lists {served:?}");

    let documented = documented_routes();
    let undocumented: Vec<_> = served
        .keys()
        .filter(|r| !documented.contains_key(*r))
        .collect();
    let not_served: Vec<_> = documented
        .keys()
        .filter(|r| !served.contains_key(*r))
        .collect();
    assert!(
        undocumented.is_empty() && not_served.is_empty(),
        "docs/api.md and /openapi.json disagree: without a section {undocumented:?}, \
         described but not served {not_served:?}"
    );
    for (route, statuses) in &served {
        assert_eq!(
            &documented[route], statuses,
            "the statuses docs/api.md lists for {route:?} (left) are not the document's (right)"
        );
    }
}

/// The first cell of each row of docs/events.md's tables that names an
/// event type (a dotted lowercase word in backticks).
fn documented_event_types() -> BTreeSet<String> {
    EVENTS_MD
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| name)
        .filter(|name| {
            name.contains('.')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn every_event_type_is_described_in_docs_events_md() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let known: BTreeSet<String> = client
        .query_one("SELECT holdfast.event_types()", &[])
        .await
        .unwrap()
        .get::<_, Vec<String>>(0)
        .into_iter()
        .collect();
    assert!(
        known.contains("model.response"),
        "event_types() is {known:?}"
    );
    let documented = documented_event_types();
    let undocumented: Vec<_> = known.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/events.md and event_types() disagree: not described {undocumented:?}, \
         described but not a type {unknown:?}"
    );
}

/// The workspace's member directories, from the root Cargo.toml.
fn workspace_members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace manifest");
    let members: Vec<PathBuf> = line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root.join(m))
        .collect();
    assert!(members.len() > 3, "members {members:?}");
    members
}

/// The files under `dir` whose names end in one of `extensions`.
fn files_under(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, extensions, out);
        } else if path
            .extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
}

/// Every Rust file of the workspace members' `src` and `tests` dirs.
fn workspace_rust_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for member in workspace_members(root) {
        for dir in ["src", "tests"] {
            if member.join(dir).is_dir() {
                files_under(&member.join(dir), &["rs"], &mut files);
            }
        }
    }
    files
}

/// Every whole variable name with the prefix in `text`. A name ending in `_` is a prefix
/// (`HOLDFAST_MAX_*` in a message), not a variable.
fn holdfast_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(PREFIX) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.ends_with('_') {
            names.insert(name);
        }
    }
    names
}

#[test]
fn every_holdfast_variable_in_the_sources_is_in_docs_configuration_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = workspace_rust_files(root);
    let mut in_sources = BTreeSet::new();
    for file in &files {
        in_sources.extend(holdfast_names(&std::fs::read_to_string(file).unwrap()));
    }
    assert!(
        in_sources.len() > 40,
        "found only {in_sources:?} in {} files",
        files.len()
    );
    let missing: Vec<_> = in_sources
        .iter()
        .filter(|name| !CONFIGURATION_MD.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "read by the code but not in docs/configuration.md: {missing:?}"
    );

    // And the tables document nothing the code does not read: the names in
    // each row's flag and variable columns.
    let in_tables: BTreeSet<String> = CONFIGURATION_MD
        .lines()
        .filter(|line| line.starts_with('|'))
        .flat_map(|line| line.split('|').skip(1).take(2).map(holdfast_names))
        .flatten()
        .collect();
    let invented: Vec<_> = in_tables.difference(&in_sources).collect();
    assert!(
        invented.is_empty(),
        "docs/configuration.md's tables name variables no source reads: {invented:?}"
    );
}

#[test]
fn every_flag_of_the_server_commands_is_in_docs_configuration_md() {
    let binary = holdfast_bin();
    for words in SERVER_COMMANDS {
        let command = words.join(" ");
        let output = Command::new(&binary)
            .arg("help")
            .args(*words)
            .output()
            .expect("run holdfast help");
        assert!(output.status.success(), "holdfast help {command} failed");
        let help = String::from_utf8(output.stdout).unwrap();
        let flags: Vec<&str> = help
            .lines()
            .map(str::trim_start)
            .filter(|line| line.starts_with('-'))
            .filter_map(|line| line.split_whitespace().find(|w| w.starts_with("--")))
            .map(|flag| flag.trim_end_matches(','))
            .filter(|flag| *flag != "--help")
            .collect();
        assert!(flags.len() >= 3, "holdfast help {command}:\n{help}");
        let missing: Vec<_> = flags
            .iter()
            .filter(|flag| {
                !CONFIGURATION_MD.contains(&format!("`{flag}`"))
                    && !CONFIGURATION_MD.contains(&format!("`{flag} "))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "flags of holdfast {command} not in docs/configuration.md: {missing:?}"
        );
    }
}

/// docs/reference/cli.md is what the binary generates from its parser, so
/// every command, flag and argument it documents exists, as documented.
#[test]
fn the_committed_cli_reference_is_the_one_the_binary_generates() {
    let output = Command::new(holdfast_bin())
        .arg("cli-reference")
        .output()
        .expect("run holdfast cli-reference");
    assert!(output.status.success(), "holdfast cli-reference failed");
    let generated = String::from_utf8(output.stdout).unwrap();
    assert!(
        generated.contains("## `holdfast server api`"),
        "{generated}"
    );
    let committed = include_str!("../../../docs/reference/cli.md");
    assert!(
        committed == generated,
        "docs/reference/cli.md is not what the binary generates; regenerate it with:\n  \
         cargo run -q -p holdfast -- cli-reference > docs/reference/cli.md"
    );
}

#[test]
fn nothing_cites_the_original_design_by_section() {
    // Built here so this file does not cite it itself.
    let citation = format!("{} §", "DESIGN");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = workspace_rust_files(root);
    files_under(&root.join("docs"), &["md"], &mut files);
    files_under(&root.join("sql"), &["sql"], &mut files);
    files_under(
        &root.join("api/console"),
        &["js", "css", "html"],
        &mut files,
    );
    files.extend(["README.md", "docker/Dockerfile"].map(|f| root.join(f)));
    assert!(files.len() > 100, "found only {} files", files.len());
    let citing: Vec<_> = files
        .iter()
        .filter(|file| std::fs::read_to_string(file).unwrap().contains(&citation))
        .collect();
    assert!(
        citing.is_empty(),
        "{citing:?} cite the original design, which a clone does not have: \
         point at docs/api.md, docs/events.md, docs/configuration.md or docs/sql.md"
    );
}

/// Where `text` names a tracker entry by number (the word "issue" or "issues"
/// and then a number): no reader of a clone can follow one.
fn tracker_citations(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let word = "issue";
    lower
        .match_indices(word)
        .filter_map(|(at, _)| {
            let rest = lower[at + word.len()..].trim_start_matches('s');
            let number = rest.strip_prefix(' ')?.trim_start_matches(' ');
            let digits = number.len()
                - number
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            let end = lower.len() - number.len() + digits;
            (digits > 0).then(|| lower[at..end].to_string())
        })
        .collect()
}

#[test]
fn no_doc_comment_or_test_name_cites_a_tracker_entry_by_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = workspace_rust_files(root);
    files_under(&root.join("docs"), &["md"], &mut files);
    files_under(&root.join("sql"), &["sql"], &mut files);
    files_under(&root.join("sdk/python/src"), &["py"], &mut files);
    files_under(&root.join("sdk/typescript/src"), &["ts"], &mut files);
    files_under(&root.join("examples/python"), &["py"], &mut files);
    files.extend(
        [
            "README.md",
            "CHANGELOG.md",
            "examples/README.md",
            "sdk/python/README.md",
            "sdk/typescript/README.md",
            ".ci/run",
            "examples/check",
        ]
        .map(|f| root.join(f)),
    );
    let citing: Vec<_> = files
        .iter()
        .filter_map(|file| {
            let found = tracker_citations(&std::fs::read_to_string(file).unwrap());
            (!found.is_empty()).then(|| format!("{}: {found:?}", file.display()))
        })
        .collect();
    assert!(
        citing.is_empty(),
        "these cite tracker entries by number, which a reader cannot follow: {citing:#?}"
    );
}

#[test]
fn a_tracker_citation_is_found_and_plain_words_are_not() {
    // Built here so this file does not cite any itself.
    let (word, words) = (format!("Is{}", "sue"), format!("is{}s", "sue"));
    assert_eq!(
        tracker_citations(&format!("as {word} 18 item 3 asked")),
        [format!("{} 18", word.to_lowercase())]
    );
    assert_eq!(
        tracker_citations(&format!("{words} 3 and 4")),
        [format!("{words} 3")]
    );
    assert!(tracker_citations("an issue with 2 parts; issues, 4 of them").is_empty());
}
