//! One HTTP stack (docs/internals/decisions.md, "One HTTP stack and one
//! trust policy"): the dependency graph, as `cargo tree` resolves it for
//! every target, holds one version of each HTTP and TLS crate, and one
//! crypto provider (ring). Two reqwest versions would mean two TLS setups,
//! two resolver types and two trust stores to keep in step.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The HTTP and TLS crates of which the workspace links one version.
const ONE_VERSION: &[&str] = &[
    "reqwest",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "rustls",
    "rustls-webpki",
    "tokio-rustls",
];

/// Crypto providers and trust bundles the workspace does not link: ring
/// is the provider, the operating system's store the trust store.
const ABSENT: &[&str] = &[
    "aws-lc-rs",
    "aws-lc-sys",
    "openssl",
    "native-tls",
    "webpki-roots",
];

/// The versions of each package `cargo tree` lists for `scope` (e.g.
/// `--workspace`, or `-p holdfast`), on every target, through every kind
/// of edge.
fn versions(scope: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "--target", "all", "--edges", "all"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(scope)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in stdout.lines() {
        // `name vX.Y.Z`, then a path, `(proc-macro)` or `(*)` for some.
        let mut words = line.split_whitespace();
        if let (Some(name), Some(version)) = (words.next(), words.next()) {
            if let Some(version) = version.strip_prefix('v') {
                found
                    .entry(name.to_owned())
                    .or_default()
                    .insert(version.to_owned());
            }
        }
    }
    assert!(found.contains_key("holdfast"), "{stdout}");
    found
}

#[test]
fn the_workspace_links_one_version_of_each_http_and_tls_crate() {
    let found = versions(&["--workspace"]);
    for name in ONE_VERSION {
        let versions = found.get(*name).cloned().unwrap_or_default();
        assert_eq!(versions.len(), 1, "{name}: {versions:?}");
    }
    for name in ABSENT {
        assert!(!found.contains_key(*name), "{name}: {:?}", found[*name]);
    }
    assert!(found.contains_key("ring"));
}

#[test]
fn the_release_binary_links_exactly_one_reqwest() {
    let found = versions(&["-p", "holdfast"]);
    assert_eq!(
        found.get("reqwest").map(BTreeSet::len),
        Some(1),
        "{:?}",
        found.get("reqwest")
    );
    assert_eq!(
        found.get("http").map(BTreeSet::len),
        Some(1),
        "{:?}",
        found.get("http")
    );
}

/// The packages `package` links into its library and binaries (normal
/// edges only: no build scripts, no dev-dependencies), on every target.
fn linked_packages(package: &str, options: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "--target", "all", "--edges", "normal"])
        .args(["--prefix", "none", "--format", "{p}", "-p", package])
        .args(options)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let found: BTreeSet<String> = stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(found.contains(package), "{stdout}");
    found
}

/// Crates a program that only talks to the API over HTTP has no use for:
/// the Postgres driver, the provider-key cipher, the OTLP exporter.
const SERVER_ONLY: &[&str] = &[
    "tokio-postgres",
    "postgres-types",
    "deadpool-postgres",
    "aes-gcm",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
];

#[test]
fn the_rust_client_links_no_postgres_cipher_or_telemetry() {
    let found = linked_packages("holdfast-client", &[]);
    for name in SERVER_ONLY {
        assert!(!found.contains(*name), "holdfast-client links {name}");
    }
    assert!(found.contains("holdfast-wire"), "{found:?}");
}

/// The machine daemon runs on users' hosts and talks to the API over HTTP:
/// no Postgres driver, no provider-key cipher, none of the server's HTTP
/// stack, MCP client or schema validator. (It does export its command
/// spans over OTLP, so OpenTelemetry is in.)
#[test]
fn the_machine_daemon_links_no_database_or_server_crates() {
    let found = linked_packages("holdfast-machine", &[]);
    for name in [
        "tokio-postgres",
        "postgres-types",
        "deadpool-postgres",
        "aes-gcm",
        "axum",
        "rmcp",
        "jsonschema",
        "holdfast-db",
        "holdfast-providers",
        "holdfast-worker",
    ] {
        assert!(!found.contains(name), "holdfast-machine links {name}");
    }
    assert!(found.contains("holdfast-client"), "{found:?}");
}

/// The scripted model server is in the release binary only for `holdfast
/// demo` (the `demo` feature, on by default): a build without the feature
/// links no fake provider.
#[test]
fn the_scripted_model_server_is_linked_only_for_the_demo() {
    let with_demo = linked_packages("holdfast", &[]);
    assert!(with_demo.contains("holdfast-fakes"), "{with_demo:?}");
    let without = linked_packages("holdfast", &["--no-default-features"]);
    assert!(
        !without.contains("holdfast-fakes"),
        "holdfast --no-default-features links holdfast-fakes"
    );
}
